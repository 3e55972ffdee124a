"""Fitting a turn into the context: which earlier turns leave the prompt, and when a message is refused.

When ``prompt + max_tokens`` does not fit, the oldest turns leave the prompt (never the system
prompt, never the message being sent): an eighth of the context more than needed, so the turns
after a drop extend the same prefix and the backend reuses its cache.  A message that does not
fit even alone is refused, with a reason the user can act on.  :func:`refusal` applies the same
rule before anything changes, so a UI can keep the draft.

Not handled here: what the window means for the stats (``dropped_turns``, in
:mod:`app.conversation.turn`) and the prompt builder itself (:mod:`templates.builder`).
"""
from __future__ import annotations

from typing import Sequence

from app.conversation.conversation import Conversation
from app.conversation.messages import ChatMessage
from templates import TemplateError
from templates.builder import BuiltPrompt

#: the least room a reply must have, or the message is refused
MIN_REPLY_TOKENS = 32


def fit(conversation: Conversation, new: Sequence[ChatMessage]) -> tuple[BuiltPrompt | None, str | None]:
    """The prompt for ``new`` after the path, dropping the oldest turns if needed (the conversation's
    window moves): (prompt, a notice when turns left it), or (None, why) when it cannot fit.

    Raises :class:`templates.TemplateError` when the template cannot render the messages."""
    c = conversation
    need = min(c.sampling.max_tokens, c.context_size)
    start = min(c._window, len(c.messages))
    dropped_before = start
    while True:
        prompt = c._builder.build(c._template_messages(start, new), c.enable_thinking, c.tools)
        excess = len(prompt.ids) + need - c.context_size
        if excess <= 0:
            break
        # drop an eighth of the context more than needed: the turns after a drop then
        # extend the same prefix (backends reuse their cache) instead of each dropping
        # one more turn and changing the prompt's start every time
        later = _drop_plan(c, start, excess + c.context_size // 8)
        if later is None:  # only the system prompt and this message are left
            if c.context_size - len(prompt.ids) >= min(need, MIN_REPLY_TOKENS):
                break  # it fits with a shorter reply
            return None, _too_long(c, len(prompt.ids), need)
        start = later
    c._window = start
    if start > dropped_before:
        # every turn now out of the prompt, as the turn's stats count them (dropped_turns)
        turns = sum(1 for m in c.messages[:start] if m.role == "user")
        return prompt, (f"context full: left the {turns} oldest turn{'s' if turns != 1 else ''} "
                        f"out of the prompt ({len(prompt.ids)} of {c.context_size} tokens used)")
    return prompt, None


def refusal(conversation: Conversation, text: str) -> str | None:
    """Why a message of ``text`` cannot be sent even with every earlier turn left out, or None
    (the rule of :func:`fit`, checked before anything changes)."""
    from templates import prompt_ids

    c = conversation
    need = min(c.sampling.max_tokens, c.context_size, MIN_REPLY_TOKENS)
    if c.draft_tokens(text) + need <= c.context_size // 2:
        return None  # far from the limit: no need to render
    try:
        rendered = c.template.render(c._template_messages(len(c.messages), [ChatMessage("user", text)]),
                                     add_generation_prompt=True, enable_thinking=c.enable_thinking, tools=c.tools)
    except TemplateError as exc:
        return str(exc)
    size = len(prompt_ids(c.tokenizer, rendered))
    if c.context_size - size >= need:
        return None
    return (f"message too long: {size} tokens with the system prompt, and the context holds "
            f"{c.context_size}; shorten it, raise --ctx, or save it to a file and /attach it "
            f"(an attachment is cut to its token budget)")


def _too_long(c: Conversation, size: int, need: int) -> str:
    """Why a prompt of ``size`` ids, with every earlier turn left out, leaves no room for its reply."""
    if size < c.context_size:  # it fits, but not with the room kept for the reply
        reply = min(need, MIN_REPLY_TOKENS)
        return (f"message too long: the prompt would be {size} tokens, leaving "
                f"{c.context_size - size} of the context's {c.context_size} for a reply "
                f"that needs room for {reply} (--max-tokens {c.sampling.max_tokens}); lower "
                f"--max-tokens, shorten the message or the system prompt, or raise --ctx")
    return (f"message too long: the prompt would be {size} tokens with a context of "
            f"{c.context_size}; shorten it, shorten the system prompt, or raise --ctx")


def _drop_plan(c: Conversation, start: int, excess: int) -> int | None:
    """The first message to keep so that roughly ``excess`` tokens leave; None if none can."""
    freed = 0
    index = start
    while index < len(c.messages):
        freed += c.token_count(c.messages[index].content) + 4  # + markup, roughly
        index += 1
        while index < len(c.messages) and c.messages[index].role != "user":
            freed += c.token_count(c.messages[index].content) + 4
            index += 1
        if freed >= excess:
            break
    return index if index > start else None
