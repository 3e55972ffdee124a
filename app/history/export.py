"""A stored conversation as Markdown (to read) or JSON (everything, and back again).

The JSON document is versioned (``"format": "tokchat-conversation"``,
``"version": 1``) and holds every stored field: settings, model, each
message with its reasoning, per-turn stats and timestamps (ISO 8601 UTC, the
raw epoch seconds beside them so nothing is rounded away).
:func:`conversation_from_json` reads it back, checking the shape first, so
``import`` of an export gives the same messages.  ``messages`` is the branch
shown; ``branches`` holds the replies and prompts it replaced, every message
carrying its ``id`` and its ``parent`` so the tree comes back on import.

Markdown puts reasoning in a collapsed ``<details>`` block above the answer
and a one-line stats footer under each reply; tool calls and tool results
are collapsed ``<details>`` blocks too (JSON arguments, the result as text).
A message's tool fields travel in JSON as ``"tool"`` (absent in older exports).
"""
from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from typing import Any

from app.history.types import Conversation, ConversationInfo, StoredMessage, StoreError

FORMAT = "tokchat-conversation"
VERSION = 1

_MESSAGE_FIELDS = ("role", "content", "reasoning", "finish_reason", "prompt_tokens", "completion_tokens",
                   "reasoning_tokens", "ttft_s", "tokens_per_s", "stats", "created_at", "finished_at")
_INFO_FIELDS = ("title", "model_path", "model_name", "template", "system_prompt", "sampling", "settings",
                "created_at", "updated_at")


class ImportFormatError(StoreError):
    """A file given to import is not a tokchat JSON export; the message says what is wrong."""


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def to_dict(conv: Conversation) -> dict[str, Any]:
    info = conv.info
    return {
        "format": FORMAT,
        "version": VERSION,
        "id": info.id,
        **{name: getattr(info, name) for name in _INFO_FIELDS},
        "created": iso(info.created_at),
        "updated": iso(info.updated_at),
        # a fork (/fork): the conversation and message it was cut from (absent otherwise)
        **({"forked_from": info.forked_from, "forked_at": info.forked_at} if info.forked_from is not None else {}),
        "messages": [_message_dict(m) for m in conv.messages],
        # regenerated replies and edited prompts off the shown branch: the tree is kept by "id"/"parent"
        "branches": [_message_dict(m) for m in conv.branches],
    }


def _message_dict(m: StoredMessage) -> dict[str, Any]:
    return {"id": m.id, "parent": m.parent_id, **{name: getattr(m, name) for name in _MESSAGE_FIELDS},
            "created": iso(m.created_at), "finished": iso(m.finished_at), **({"tool": m.tool} if m.tool else {}),
            **({"opening": m.opening} if m.opening else {}),
            **({"reply_ids": m.reply_ids} if m.reply_ids is not None else {})}


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float (not JSON: ``JSON.parse`` rejects them) made null.

    Such numbers reach the history from older tokchats (``--temperature nan`` was accepted)
    or from a stat divided by zero; an export must always be valid JSON.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def to_json(conv: Conversation) -> str:
    return json.dumps(finite(to_dict(conv)), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _need(data: dict, key: str, kinds: tuple[type, ...], where: str) -> Any:
    if key not in data:
        raise ImportFormatError(f"{where}: missing {key!r}")
    value = data[key]
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
        raise ImportFormatError(f"{where}: {key!r} must be {names}, not {type(value).__name__}")
    return value


def from_dict(data: Any, source: str = "import") -> Conversation:
    """Check a parsed export and rebuild the conversation (ids are assigned on insert)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ImportFormatError(f"{source}: not a tokchat conversation export (no \"format\": \"{FORMAT}\")")
    if data.get("version") != VERSION:
        raise ImportFormatError(f"{source}: export version {data.get('version')!r}; this tokchat reads {VERSION}")
    text, num = (str,), (int, float)
    info = ConversationInfo(
        id=0, title=_need(data, "title", text, source), model_path=_need(data, "model_path", text, source),
        model_name=_need(data, "model_name", text, source), template=_need(data, "template", text, source),
        system_prompt=_need(data, "system_prompt", text, source), sampling=_need(data, "sampling", (dict,), source),
        settings=_need(data, "settings", (dict,), source), created_at=_need(data, "created_at", num, source),
        updated_at=_need(data, "updated_at", num, source),
        forked_from=_need(data, "forked_from", (int, type(None)), source) if "forked_from" in data else None,
        forked_at=_need(data, "forked_at", (int, type(None)), source) if "forked_at" in data else None)
    shown = _messages(_need(data, "messages", (list,), source), f"{source}: messages")
    branches = _messages(data.get("branches") or [], f"{source}: branches")
    return Conversation(info, shown, branches)


def _messages(items: list, source: str) -> list[StoredMessage]:
    text, num, opt_num = (str,), (int, float), (int, float, type(None))
    opt_int = (int, type(None))
    if not isinstance(items, list):
        raise ImportFormatError(f"{source} must be a list")
    messages = []
    for i, m in enumerate(items):
        where = f"{source}[{i}]"
        if not isinstance(m, dict):
            raise ImportFormatError(f"{where} must be an object")
        ids = {"id": m.get("id") or 0, "parent_id": m.get("parent")}
        if not isinstance(ids["id"], int) or not isinstance(ids["parent_id"], opt_int) or \
                isinstance(ids["id"], bool):
            raise ImportFormatError(f"{where}: 'id' and 'parent' must be integers")
        messages.append(StoredMessage(
            **ids, role=_need(m, "role", text, where), content=_need(m, "content", text, where),
            reasoning=_need(m, "reasoning", text, where), finish_reason=_need(m, "finish_reason", (str, type(None)), where),
            prompt_tokens=_need(m, "prompt_tokens", opt_int, where),
            completion_tokens=_need(m, "completion_tokens", opt_int, where),
            reasoning_tokens=_need(m, "reasoning_tokens", opt_int, where),
            ttft_s=_need(m, "ttft_s", opt_num, where), tokens_per_s=_need(m, "tokens_per_s", opt_num, where),
            stats=_need(m, "stats", (dict, type(None)), where), created_at=_need(m, "created_at", num, where),
            finished_at=_need(m, "finished_at", opt_num, where),
            tool=_need(m, "tool", (dict, type(None)), where) if "tool" in m else None,
            opening=_need(m, "opening", text, where) if "opening" in m else "",
            reply_ids=_reply_ids(m, where)))
    return messages


def _reply_ids(m: dict, where: str) -> list[int] | None:
    """A message's ``reply_ids`` (absent in older exports): a list of non-negative integers."""
    if "reply_ids" not in m or m["reply_ids"] is None:
        return None
    ids = m["reply_ids"]
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise ImportFormatError(f"{where}: 'reply_ids' must be a list of token ids (integers >= 0)")
    return ids


def _no_constant(name: str) -> Any:
    raise ImportFormatError(f"{name} is not a JSON number")


def conversation_from_json(text: str, source: str = "import") -> Conversation:
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except ImportFormatError as exc:
        raise ImportFormatError(f"{source}: not JSON ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ImportFormatError(f"{source}: not JSON ({exc})") from exc
    return from_dict(data, source)


def _stats_line(m: StoredMessage) -> str:
    parts = []
    if m.completion_tokens is not None:
        parts.append(f"{m.completion_tokens} tokens")
    if m.reasoning_tokens:
        parts.append(f"{m.reasoning_tokens} reasoning")
    if m.ttft_s is not None:
        parts.append(f"{m.ttft_s:.2f} s to first token")
    if m.tokens_per_s is not None:
        parts.append(f"{m.tokens_per_s:.1f} tokens/s")
    if m.finish_reason and m.finish_reason != "stop":
        parts.append(m.finish_reason)
    if m.stats and m.stats.get("parts"):  # a continued reply (/continue)
        parts.append(f"{len(m.stats['parts'])} parts: " + " + ".join(str(p.get("completion_tokens")) for p in m.stats["parts"]))
    return " · ".join(parts)


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if ts else ""


def _details(summary: str, body: str, language: str) -> list[str]:
    """A collapsed block with ``body`` fenced (the fence longer than any backtick run inside)."""
    import re

    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    summary = summary.replace("<", "&lt;").replace(">", "&gt;")
    return ["<details>", f"<summary>{summary}</summary>", "", f"{fence}{language}", body, fence, "",
            "</details>", ""]


def to_markdown(conv: Conversation) -> str:
    info = conv.info
    out = [f"# {info.title or '(untitled)'}", ""]
    model = info.model_name or info.model_path or "?"
    out.append(f"- Model: {model}" + (f" (`{info.model_path}`)" if info.model_name and info.model_path else ""))
    if info.template:
        out.append(f"- Template: {info.template}")
    if info.sampling:
        out.append("- Sampling: " + ", ".join(f"{k} {v}" for k, v in info.sampling.items() if v is not None))
    out.append(f"- Started: {_when(info.created_at)} · {len(conv.messages)} messages")
    if info.forked_from is not None:
        out.append(f"- Forked from conversation {info.forked_from}"
                   + (f" at message {info.forked_at}" if info.forked_at is not None else ""))
    out.append("")
    if info.system_prompt:
        out += ["## System", "", info.system_prompt, ""]
    for m in conv.messages:
        tool = m.tool or {}
        if m.role == "tool":
            out += _details(f"Tool result: {tool.get('name', '?')}", m.content, "text")
            continue
        out += [f"## {m.role.capitalize()}", "", f"*{_when(m.created_at)}*", ""]
        if m.reasoning:
            out += ["<details>", "<summary>Reasoning</summary>", "", m.reasoning.strip(), "", "</details>", ""]
        if m.opening:
            out += [f"*The start of this reply was written by the user: “{m.opening}”*", ""]
        if m.content.strip() or not tool.get("tool_calls"):
            out += [m.content.strip() or "*(empty)*", ""]
        for call in tool.get("tool_calls") or []:
            function = call.get("function", call)
            out += _details(f"Tool call: {function.get('name', '?')}",
                            json.dumps(function.get("arguments", {}), ensure_ascii=False, indent=2), "json")
        if m.role == "assistant" and _stats_line(m):
            out += [f"*{_stats_line(m)}*", ""]
    return "\n".join(out)
