"""Fitting a turn into the context: which earlier turns leave the prompt, and when a message is refused.

When ``prompt + max_tokens`` does not fit, the oldest turns leave the prompt (never the system
prompt, a pinned turn (/pin) or the message being sent): an eighth of the context more than needed, so the turns
after a drop extend the same prefix and the backend reuses its cache.  A message that does not
fit even alone is refused, with a reason the user can act on.  :func:`refusal` applies the same
rule before anything changes, so a UI can keep the draft.  :func:`window` says where the prompt would
start without changing anything (what the meter and the policies of :mod:`app.conversation.compaction`
ask); under the policy ``refuse`` no turn leaves: the send is refused with how much would have to go.

Not handled here: what the window means for the stats (``dropped_turns``, in
:mod:`app.conversation.turn`) and the prompt builder itself (:mod:`templates.builder`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from app.conversation.conversation import Conversation
from app.conversation.messages import ChatMessage
from templates import TemplateError
from templates.builder import BuiltPrompt

#: the least room a reply must have, or the message is refused
MIN_REPLY_TOKENS = 32


@dataclass(frozen=True)
class Window:
    """Where the next prompt would start: ``start``, the first message kept (the pinned ones before it stay),
    and the prompt from there; or ``prompt`` None and ``why`` when nothing left out makes it fit."""

    start: int
    prompt: BuiltPrompt | None
    why: str | None = None


def window(conversation: Conversation, new: Sequence[ChatMessage]) -> Window:
    """Where the prompt for ``new`` would start, dropping the oldest turns as needed; changes nothing.

    Raises :class:`templates.TemplateError` when the template cannot render the messages."""
    c = conversation
    need = min(c.sampling.max_tokens, c.context_size)
    start = min(c.window_start, len(c.messages))
    while True:
        prompt = c.build_prompt(start, new)
        excess = len(prompt.ids) + need - c.context_size
        if excess <= 0:
            return Window(start, prompt)
        # drop an eighth of the context more than needed: the turns after a drop then
        # extend the same prefix (backends reuse their cache) instead of each dropping
        # one more turn and changing the prompt's start every time
        later = _drop_plan(c, start, excess + c.context_size // 8)
        if later is None:  # only the system prompt, the pinned turns and this message are left
            if c.context_size - len(prompt.ids) >= min(need, MIN_REPLY_TOKENS):
                return Window(start, prompt)  # it fits with a shorter reply
            return Window(start, None, _too_long(c, len(prompt.ids), need))
        start = later


def turns_between(conversation: Conversation, start: int, end: int) -> list[int]:
    """The numbers (1-based, as the user counts turns) of the user turns in ``messages[start:end]``, pinned
    ones left out (they stay in the prompt)."""
    numbers, turn = [], 0
    for index, message in enumerate(conversation.messages[:end]):
        if message.role == "user":
            turn += 1
            if index >= start and not message.pinned:
                numbers.append(turn)
    return numbers


def name_turns(numbers: Sequence[int]) -> str:
    """``turn 3`` / ``turns 1-4`` / ``turns 1, 3``: how a notice names the turns that leave."""
    if len(numbers) == 1:
        return f"turn {numbers[0]}"
    if list(numbers) == list(range(numbers[0], numbers[-1] + 1)):
        return f"turns {numbers[0]}-{numbers[-1]}"
    return "turns " + ", ".join(map(str, numbers))


def fit(conversation: Conversation, new: Sequence[ChatMessage]) -> tuple[BuiltPrompt | None, str | None]:
    """The prompt for ``new`` after the path, dropping the oldest turns if needed (the conversation's
    window moves): (prompt, a notice when turns left it), or (None, why) when it cannot fit or the
    policy is ``refuse`` and turns would have to leave (the policy ``summarize`` has summarized them
    before this is called: :mod:`app.conversation.compaction`).

    Raises :class:`templates.TemplateError` when the template cannot render the messages."""
    c = conversation
    plan = window(c, new)
    if plan.prompt is None:
        return None, plan.why
    leaving = turns_between(c, c.window_start, plan.start)
    if leaving and c.compact_policy == "refuse":
        return None, refuse_text(c, plan.start, leaving)
    dropped_before = c.window_start
    c.move_window(plan.start)
    prompt = plan.prompt
    if plan.start > dropped_before and leaving:
        # every turn now out of the prompt, as the turn's stats count them (dropped_turns)
        turns = sum(1 for m in c.messages[:plan.start] if m.role == "user")
        return prompt, (f"context full: left the {turns} oldest turn{'s' if turns != 1 else ''} out of the prompt "
                        f"({name_turns(leaving)} now; {len(prompt.ids)} of {c.context_size} tokens used)")
    return prompt, None


def refuse_text(c: Conversation, start: int, leaving: Sequence[int]) -> str:
    """Why the policy ``refuse`` sends nothing: how much must go, and how to make room."""
    freed = sum(c.token_count(m.content) + 4 for m in c.messages[c.window_start:start] if not m.pinned)
    return (f"context full (policy refuse): about {freed} tokens, {name_turns(leaving)}, would have to leave the "
            f"prompt for this message and its reply; /compact drop or /compact summarize, /new, a shorter "
            f"message, or a larger --ctx")


def refusal(conversation: Conversation, text: str) -> str | None:
    """Why a message of ``text`` cannot be sent even with every earlier turn left out, or None
    (the rule of :func:`fit`, checked before anything changes)."""
    from templates import prompt_ids

    c = conversation
    if c.compact_policy == "refuse":  # no turn may leave: said before the send, the draft kept
        why = _refused_by_policy(c, text)
        if why is not None:
            return why
    need = min(c.sampling.max_tokens, c.context_size, MIN_REPLY_TOKENS)
    if c.draft_tokens(text) + need <= c.context_size // 2:
        return None  # far from the limit: no need to render
    try:
        rendered = c.template.render(c.template_messages(len(c.messages), [ChatMessage("user", text)]),
                                     add_generation_prompt=True, enable_thinking=c.enable_thinking, tools=c.tools)
    except TemplateError as exc:
        return str(exc)
    size = len(prompt_ids(c.tokenizer, rendered))
    if c.context_size - size >= need:
        return None
    return (f"message too long: {size} tokens with the system prompt, and the context holds "
            f"{c.context_size}; shorten it, raise --ctx, or save it to a file and /attach it "
            f"(an attachment is cut to its token budget)")


def _refused_by_policy(c: Conversation, text: str) -> str | None:
    """Under the policy ``refuse``: why ``text`` cannot be sent without turns leaving, or None."""
    need = min(c.sampling.max_tokens, c.context_size)
    if c.context_used + c.draft_tokens(text) + need + 16 < c.context_size:
        return None  # far from full: no need to build the prompt
    try:
        plan = window(c, [ChatMessage("user", text)])
    except TemplateError as exc:
        return str(exc)
    leaving = turns_between(c, c.window_start, plan.start)
    return refuse_text(c, plan.start, leaving) if plan.prompt is not None and leaving else None


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
    def size(message: ChatMessage) -> int:  # a pinned message or a summary stays: nothing freed
        return 0 if message.pinned or message.role == "summary" else c.token_count(message.content) + 4  # + markup

    freed = 0
    index = start
    while index < len(c.messages):
        freed += size(c.messages[index])
        index += 1
        while index < len(c.messages) and c.messages[index].role != "user":
            freed += size(c.messages[index])
            index += 1
        if freed >= excess:
            break
    return index if index > start else None
