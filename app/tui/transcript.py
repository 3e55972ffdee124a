"""A conversation as text: the Markdown that /export writes and the /stats totals.

Works on the session's :class:`~app.conversation.session.ChatMessage` list, so what is
exported is exactly what the model saw (the reasoning is kept, quoted).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from app.conversation.messages import ChatMessage


def transcript_markdown(messages: Sequence[ChatMessage]) -> str:
    """``## user`` / ``## assistant`` sections; reasoning as a quote; stats as a comment line."""
    from app.tui.format import stats_line

    out = ["# tokchat conversation", ""]
    for message in messages:
        out.append(f"## {message.role}")
        out.append("")
        if message.reasoning:
            out.extend("> " + line for line in message.reasoning.splitlines())
            out.append("")
        out.append(message.content)
        out.append("")
        if message.stats is not None:
            out.append(f"<!-- {stats_line(message.stats)} -->")
            out.append("")
    return "\n".join(out)


def totals_text(messages: Sequence[ChatMessage], context_used: int, context_limit: int) -> str:
    """The /stats block: turns, tokens in and out, mean speed, context in use."""
    replies = [m.stats for m in messages if m.role == "assistant" and m.stats is not None]
    new_prompt = sum(s.new_prompt_tokens for s in replies)
    completion = sum(s.completion_tokens for s in replies)
    reasoning = sum(s.reasoning_tokens for s in replies)
    timed = [s for s in replies if s.tokens_per_s > 0]
    speed = sum(s.tokens_per_s for s in timed) / len(timed) if timed else 0.0
    return "\n".join([
        "This conversation:",
        f"  replies: {len(replies)}",
        f"  prompt tokens evaluated: {new_prompt}",
        f"  completion tokens: {completion} (reasoning {reasoning})",
        f"  mean speed: {speed:.1f} tok/s",
        f"  context: {context_used} / {context_limit} tokens",
    ])
