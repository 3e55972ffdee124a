"""Plain-text formatting for what the TUI shows about tokens, sizes and models.

Pure functions, so the exact strings can be tested without a screen.  The
numbers come straight from :class:`app.conversation.session.TurnStats`; nothing here
counts or estimates tokens.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from app.chat.open import human_size  # noqa: F401  (one owner: a chat's load progress writes sizes first)

if TYPE_CHECKING:
    from app.conversation.session import TurnStats


def stats_line(stats: TurnStats) -> str:
    """The line under every reply, e.g.
    ``prompt 27 new / 27 total · completion 12 · reasoning 0 · TTFT 0.05 s · 180.2 tok/s · stop``.
    """
    parts = [
        f"prompt {stats.new_prompt_tokens} new / {stats.prompt_tokens} total",
        f"completion {stats.completion_tokens}",
        f"reasoning {stats.reasoning_tokens}",
        f"TTFT {stats.ttft_s:.2f} s",
        f"{stats.tokens_per_s:.1f} tok/s",
        stats.finish_reason,
    ]
    if stats.drafted_tokens:
        parts.insert(5, f"drafted {stats.drafted_tokens} / accepted {stats.accepted_tokens}")
    if not stats.verified:
        parts.append("unverified: " + (stats.note or "the server's count differs"))
    elif stats.note:  # how the counts were kept verified (a server's held-back ids, fetched again)
        parts.append(stats.note)
    if stats.dropped_turns:
        parts.append(f"dropped {stats.dropped_turns} old turn(s)")
    if stats.opening_tokens:
        parts.append(f"your start {stats.opening_tokens} (in prompt)")
    if stats.parts:
        parts.append(f"{len(stats.parts)} parts (" + " + ".join(str(p["completion_tokens"]) for p in stats.parts) + ")")
        again = sum(p["new_prompt_tokens"] for p in stats.parts[1:])
        if again:  # the later parts' own prompt work: not the prompt the reply answered
            parts.append(f"{again} evaluated again to continue")
    if stats.reasoning_cut:
        parts.append("reasoning budget reached")
    if stats.state:
        parts.append(f"state: {stats.state}")
    if stats.cache_cut_tokens:
        parts.append(f"cache cut {stats.cache_cut_tokens} (earlier turns rewritten)")
    if stats.tool_call_tokens or stats.model_steps > 1:
        parts.append(f"{stats.model_steps} steps · tool calls {stats.tool_call_tokens} · "
                     f"tool results {stats.tool_result_tokens}")
    return " · ".join(parts)


def json_code_block(content: str) -> str | None:
    """The Markdown that shows ``content`` as a ``json`` code block when the whole answer is one JSON object
    or array (a reply held to ``/format json`` or a schema, or one the model wrote so), else None: JSON as
    prose Markdown would lose its indentation and read ``*`` or ``_`` in strings as emphasis."""
    import json

    text = content.strip()
    if not text or text[0] not in "{[" or "```" in text:
        return None
    try:
        json.loads(text)
    except ValueError:
        return None
    return f"```json\n{text}\n```"


def device_label(device: str, offloaded: int = 0, total: int = 0) -> str:
    """``CUDA 29/29 layers`` where layers are on a GPU; the device alone otherwise."""
    return f"{device} {offloaded}/{total} layers" if device != "CPU" and offloaded and total else device


def model_bar_text(model_name: str, quantization: str, backend: str, device: str,
                   template: str, context_size: int, caveat: str = "") -> str:
    """The header line: everything that decides how a prompt becomes tokens and tokens become text.

    ``caveat`` (the backend's, e.g. a lossy weight conversion) stays visible at the end.
    """
    text = (f"{model_name} · {quantization} · {backend} on {device} · "
            f"template {template} · ctx {context_size}")
    return f"{text} · ⚠ {caveat}" if caveat else text


def meter_level(used: int, limit: int) -> str:
    """``ok`` | ``warn`` | ``full``: the context meter's colour class as the window fills."""
    if limit <= 0:
        return "ok"
    ratio = used / limit
    if ratio >= 0.9:
        return "full"
    if ratio >= 0.7:
        return "warn"
    return "ok"


def meter_text(used: int, draft: int, limit: int) -> str:
    """``ctx 120+8 / 8192 (2%)``: tokens in the conversation, the draft's tokens, the window."""
    total = used + draft
    pct = 100 * total / limit if limit else 0
    draft_part = f"+{draft}" if draft else ""
    return f"ctx {used}{draft_part} / {limit} ({pct:.0f}%)"


def error_text(exc: BaseException) -> str:
    """One line for the screen: the user-facing message, or the type and message of a bug.

    Here, not in the window's module, so that a feature's worker (a model download) can say
    what failed without importing the window."""
    from app.errors import user_message

    return user_message(exc) or f"{type(exc).__name__}: {exc}"
