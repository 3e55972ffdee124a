"""Compaction: what a send does when the conversation no longer fits, by the chat's policy.

* ``drop``: the oldest turns leave the prompt (:mod:`app.conversation.fit`); the meter says so before
  the send (:func:`next_send`) and the turn's notice names them;
* ``summarize``: the same model first writes a summary of the turns about to leave (:func:`summarize`:
  a short fixed instruction rendered with the chat template, greedy, at most :func:`summary_budget`
  ids).  The summary is a message of its own (role ``summary``), stored in the history with its ids
  and its cost (its ``stats``: the prompt it read, the ids it wrote, ``compacted_turns`` = the turns it
  stands for), and kept in the prompt in their place: joined to the system message, at the prompt's
  start, so every later turn extends one stable prefix and the engine's cache serves it.  A later
  summary folds the earlier one in (one summary at a time is in the prompt: :func:`active_summary`);
* ``refuse``: nothing leaves; the send is refused saying how much would have to go.

A pinned message (``/pin``) stays in the prompt under every policy.

Where a summary sits: it is made while a message is being sent, and stored after that message; on the
path it stands before it (:func:`summary_first` puts a reloaded one back there), and
:func:`summary_start` finds, from the turns it stands for, where the prompt starts again.

Not handled here: which turns leave (:func:`app.conversation.fit.window`), running the turn.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generator, Sequence

from app.conversation.messages import ChatMessage, ReplyEvent, TurnStats
from app.conversation.summary import SUMMARY_ROLE, UNDONE, active_summary

if TYPE_CHECKING:
    from app.conversation.conversation import Conversation

#: the policies, the default first
POLICIES = ("drop", "summarize", "refuse")
#: what the model is asked; fixed, so that a summary is reproducible (greedy) and cheap to read
INSTRUCTION = ("Summarize the conversation below for your own memory in a few short sentences. Keep names, "
               "facts, numbers, decisions and open questions. Write only the summary.")
#: the most ids a summary may have, whatever the context
MAX_SUMMARY_TOKENS = 256


def summary_budget(context_size: int) -> int:
    """The most ids a summary may have: within the eighth of the context a drop frees beyond what the
    send needs (:func:`app.conversation.fit.window`), less its header, so the summary takes the room the
    drop made and no further turn has to leave for it."""
    return max(16, min(MAX_SUMMARY_TOKENS, context_size // 8 - 24))


@dataclass(frozen=True)
class NextSend:
    """What sending the draft will do to the prompt (the meter's words)."""

    action: str  # fits | drop | summarize | refuse | too-long
    turns: tuple[int, ...] = ()  # the user turns that would leave (1-based)

    def describe(self) -> str:
        """``next send drops turns 1-2`` ("" when the message fits as things are)."""
        from app.conversation.fit import name_turns

        if self.action == "fits":
            return ""
        if self.action == "too-long":
            return "next send does not fit"
        named = name_turns(self.turns)
        verb = {"drop": "drops", "summarize": "summarizes", "refuse": "is refused: must drop"}[self.action]
        return f"next send {verb} {named}"


def next_send(conversation: Conversation, text: str) -> NextSend:
    """What a send of ``text`` would do now, by the conversation's policy (changes nothing).  Cheap while
    the conversation is far from full: the prompt is built only near the limit."""
    from app.conversation.fit import turns_between, window
    from templates import TemplateError

    c = conversation
    need = min(c.sampling.max_tokens, c.context_size)
    if c.context_used + c.draft_tokens(text) + need + 16 < c.context_size:
        return NextSend("fits")
    try:
        plan = window(c, [ChatMessage("user", text)])
    except TemplateError:
        return NextSend("fits")  # the send says why itself
    if plan.prompt is None:
        return NextSend("too-long")
    leaving = tuple(turns_between(c, c.window_start, plan.start))
    if not leaving:
        return NextSend("fits")
    return NextSend(c.compact_policy if c.compact_policy in POLICIES else "drop", leaving)


@dataclass(frozen=True)
class Compacted:
    """What compaction did before a send (the turn's stats carry it: ``compacted_turns``, ``summary_tokens``)."""

    turns: int = 0
    summary_tokens: int = 0


def compact(session: Any, new: Sequence[ChatMessage]) -> Generator[ReplyEvent, None, Compacted]:
    """Before a send under the policy ``summarize``: when ``new`` would make turns leave the prompt, the
    model summarizes them, the summary joins the path (``summary`` event, ``data`` the message, for the
    history and the screen) and the prompt starts after them.  Other policies: nothing to do here.
    A backend that fails to summarize leaves the turns to be dropped, said in a notice."""
    from app.conversation.fit import name_turns, turns_between, window
    from backends.base import BackendError

    c = session
    if c.compact_policy != "summarize":
        return Compacted()
    plan = window(c, new)
    leaving = turns_between(c, c.window_start, plan.start)
    if plan.prompt is None or not leaving:
        return Compacted()
    yield ReplyEvent("notice", f"context full: summarizing {name_turns(leaving)} before they leave the prompt")
    try:
        summary = summarize(c, plan.start)
    except BackendError as exc:
        yield ReplyEvent("notice", f"could not summarize ({exc}): {name_turns(leaving)} are dropped instead")
        return Compacted()
    c.add_summary(summary, plan.start)
    yield ReplyEvent("summary", summary.content, data=summary)
    return Compacted(len(leaving), len(summary.reply_ids or ()))


def summarize(conversation: Any, start: int) -> ChatMessage:
    """The summary message of the turns before ``start`` that are still in the prompt (and of the active
    summary, folded in), written greedily by the conversation's own model.

    Raises :class:`backends.base.BackendError` when the engine fails."""
    from backends.base import FinishReason, SamplingParams
    from templates import prompt_ids

    c = conversation
    earlier = active_summary(c.messages)
    lines = [f"{'User' if m.role == 'user' else 'Assistant'}: {m.content.strip()}"
             for m in c.messages[c.window_start:start] if m.role in ("user", "assistant") and not m.pinned and m.content]
    budget = summary_budget(c.context_size)
    while True:
        head = [f"Earlier: {earlier.content}"] if earlier is not None else []
        text = f"{INSTRUCTION}\n\n" + "\n".join(head + lines)
        rendered = c.template.render([{"role": "user", "content": text}], add_generation_prompt=True,
                                     enable_thinking=False)
        ids = prompt_ids(c.tokenizer, rendered)
        if len(ids) + budget <= c.context_size or len(lines) <= 1:
            break
        lines = lines[1:]  # the oldest line goes first; the newest matter most to what follows
    if len(ids) + budget > c.context_size:  # one line longer than the context: its end is kept
        ids = ids[-(c.context_size - budget):]
    sampling = replace(SamplingParams(), temperature=0.0, max_tokens=budget)
    generation = c.backend.generate(ids, sampling, c.stop_ids)
    out: list[int] = []
    finish = FinishReason.LENGTH
    try:
        for token in generation:
            if token in c.stop_ids:
                finish = FinishReason.STOP
                break
            out.append(token)
    finally:
        generation.close()
    info = c.backend.info
    covered = sum(1 for m in c.messages[:start] if m.role == "user")
    stats = TurnStats(new_prompt_tokens=generation.stats.prompt_evaluated, prompt_tokens=len(ids),
                      completion_tokens=len(out), context_limit=c.context_size, finish_reason=finish,
                      backend=info.backend, device=info.device, model=info.model_name, template=c.template.name,
                      compacted_turns=covered, summary_tokens=len(out))
    content = c.tokenizer.decode(out).strip() or "(the model wrote no summary)"
    return ChatMessage(SUMMARY_ROLE, content, stats=stats, finish_reason=finish, reply_ids=tuple(out))


def undo_summary(conversation: Any) -> ChatMessage | None:
    """Take the active summary out of the prompt (marked :data:`UNDONE`, kept on the path and in the
    history; the turns it stood for stay out of the prompt, as a drop leaves them; an earlier summary, if
    any, is the one in the prompt again); the message, or None when there is none."""
    summary = active_summary(conversation.messages)
    if summary is None:
        return None
    summary.finish_reason = UNDONE
    conversation.prompt_changed()
    return summary


def edit_summary(conversation: Any, text: str) -> ChatMessage | None:
    """Replace the active summary's text with the user's; the message, or None when there is none."""
    summary = active_summary(conversation.messages)
    if summary is None:
        return None
    summary.content = text
    conversation.prompt_changed()
    return summary
