"""The conversation manager: messages in, typed reply events and exact accounting out.

No UI code lives here; the TUI and the headless mode both drive a :class:`ChatSession`,
which is the conversation (:class:`~app.conversation.conversation.Conversation`: messages,
branches, editing, forking, the system prompt) plus what each kind of turn answers: a new
message, tool results, the last user message again, an edited one, more of the last reply,
a reply the user started.  Each decides what the turn sends, fits it into the context
(:mod:`app.conversation.fit`) and runs one :class:`~app.conversation.turn.Turn`, which
generates and commits the reply once.

Prompt ids come from :class:`templates.builder.PromptBuilder`, which keeps turn N's prompt an
exact extension of turn N-1's prompt plus the reply ids as generated, so the backend
re-evaluates only the new part.

Every turn method is a generator of :class:`ReplyEvent` whose last, ``done``, carries the turn's
:class:`TurnOutcome` (answered, refused with its reason, stopped, failed), which the generator also
returns and :attr:`ChatSession.last_outcome` reads.  A refused turn changes nothing.

Tools: ``tools`` (JSON schemas) go to the template, and :meth:`ChatSession.continue_turn`
answers tool results; finding calls in a reply and running them is :mod:`app.tools.loop`'s job.

One constructor for every front end: :meth:`ChatSession.from_options` (open_chat, the TUI's
scripted loader), and :meth:`ChatSession.with_template` (``/template``) builds the new session
through the same ``__init__`` with every setting of the old one (:meth:`ChatSession.settings`).

Not handled here: persistence (see :mod:`app.history.recorder`).
"""
from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

from app.conversation import fit
from app.conversation.compaction import Compacted, compact
from app.conversation.conversation import RECORDS_KEPT, Conversation
from app.conversation.fit import MIN_REPLY_TOKENS
from app.conversation.messages import ChatMessage, ReplyEvent, TurnOutcome, TurnStats, merge_stats
from app.conversation.turn import Turn, TurnEvents, cache_cut, refuse, think_close_ids
from backends.base import Backend, GenerationStats, SamplingParams
from templates import ChatTemplate, TemplateError
from templates.builder import BuiltPrompt

if TYPE_CHECKING:
    from tokenizer.protocol import Tokenizer

__all__ = ["ChatMessage", "ChatSession", "END_MARKERS", "MIN_REPLY_TOKENS", "RECORDS_KEPT", "ReplyEvent",
           "SessionOptions", "TurnOutcome", "TurnStats", "merge_stats"]

#: end-of-turn markers that stop generation when the vocabulary has them as control tokens
END_MARKERS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<｜end▁of▁sentence｜>", "<|endoftext|>")


class SessionOptions(Protocol):
    """What :meth:`ChatSession.from_options` reads of the chat's options (``app.settings.options.ChatOptions``)."""

    system: str
    sampling: SamplingParams
    think: bool | None
    reasoning_budget: int | None
    compact: str


class ChatSession(Conversation):
    """A conversation with one model: system prompt, messages, sampling and context size, and its turns."""

    def __init__(self, tokenizer: Tokenizer, template: ChatTemplate, *, backend: Backend, system_prompt: str = "",
                 sampling: SamplingParams | None = None, context_size: int,
                 enable_thinking: bool | None = None, tools: list[dict[str, Any]] | None = None,
                 tool_instructions: str = "", reasoning_budget: int | None = None) -> None:
        super().__init__(tokenizer, template, backend=backend, system_prompt=system_prompt, sampling=sampling,
                         context_size=context_size, enable_thinking=enable_thinking, tools=tools,
                         tool_instructions=tool_instructions)
        #: reasoning ids after which tokchat closes the think block itself (None: no limit)
        self.reasoning_budget = reasoning_budget
        self.stop_ids = frozenset(tokenizer.eog_ids) | _marker_ids(tokenizer)
        self._cancel = threading.Event()
        self._last_turn: Turn | None = None  # the turn running now, or the last one (refusals too)
        self._generating: Turn | None = None  # the turn generating now, or the last one that generated

    @classmethod
    def from_options(cls, options: SessionOptions, tokenizer: Tokenizer, template: ChatTemplate, *, backend: Backend,
                     context_size: int) -> ChatSession:
        """The session a front end opens: system prompt, sampling (a copy: the session's own to change),
        thinking and reasoning budget from ``options``."""
        session = cls(tokenizer, template, backend=backend, system_prompt=options.system,
                      sampling=replace(options.sampling), context_size=context_size, enable_thinking=options.think,
                      reasoning_budget=options.reasoning_budget)
        session.compact_policy = options.compact
        return session

    def settings(self) -> dict[str, Any]:
        """Every keyword of the constructor apart from the parts (tokenizer, template, backend, context
        size), as the session is set now: what a session rebuilt around other parts carries over."""
        return {"system_prompt": self.system_prompt, "sampling": self.sampling,
                "enable_thinking": self.enable_thinking, "tools": self.tools,
                "tool_instructions": self.tool_instructions, "reasoning_budget": self.reasoning_budget}

    def with_template(self, template: ChatTemplate) -> ChatSession:
        """This conversation and every setting with another template (``/template``): the messages and
        branches go on, their prompt records do not (another template sends other ids)."""
        new = type(self)(self.tokenizer, template, backend=self.backend, context_size=self.context_size,
                         **self.settings())
        new.load_messages([m for m in self.messages if m.role != "system"], self.branches)
        new.compact_policy = self.compact_policy
        return new

    @property
    def last_outcome(self) -> TurnOutcome | None:
        """How the last turn ended: known when its ``done`` event is yielded (None before the first
        turn, and while one runs)."""
        return self._last_turn.outcome if self._last_turn is not None else None

    @property
    def generation_stats(self) -> GenerationStats | None:
        """The engine's facts about the generation running now, or the last one (the TUI's progress line)."""
        return self._generating.stats if self._generating is not None else None

    def refusal(self, text: str) -> str | None:
        """Why a message of ``text`` cannot be sent even with every earlier turn left out, or None.

        The same rule as the turn's own (:func:`app.conversation.fit.fit`), checked before anything
        changes, so the UI can refuse it and keep the draft."""
        return fit.refusal(self, text)

    def think_close_ids(self, close_tag: str = "</think>") -> list[int]:
        """The ids that end a think block (see :func:`app.conversation.turn.think_close_ids`)."""
        return think_close_ids(self.tokenizer, close_tag)

    def cancel(self) -> None:
        """Stop the reply being generated (any thread); the partial reply is kept as cancelled."""
        self._cancel.set()
        self.backend.cancel()

    # -- the turns --------------------------------------------------------------------------------

    def send(self, user_text: str) -> TurnEvents:
        """Send a user message and stream the reply; the assistant message is appended at the end."""
        return (yield from self._answer([ChatMessage("user", user_text)], list(self.messages)))

    def continue_turn(self, results: Sequence[ChatMessage]) -> TurnEvents:
        """Send tool results (``tool`` messages) after the last reply and stream the model's next step."""
        return (yield from self._answer(list(results), list(self.messages)))

    def regenerate(self) -> TurnEvents:
        """Answer the last user message again; the earlier reply stays as a sibling (``branches``)."""
        before = list(self.messages)
        self.take_replies()
        if not self.messages:
            self.messages = before
            return (yield from self._refuse("nothing to regenerate: the conversation has no user message yet"))
        return (yield from self._forked(before, lambda: self._answer([self.messages.pop()], before)))

    def edit_last_user(self, text: str) -> TurnEvents:
        """Send ``text`` in place of the last user message; the old one and its reply stay as a sibling."""
        before = list(self.messages)
        self.take_replies()
        if self.messages and self.messages[-1].role == "user":
            self.messages.pop()
        return (yield from self._forked(before, lambda: self._answer([ChatMessage("user", text)], before)))

    def continue_reply(self) -> TurnEvents:
        """Generate more of the last reply (cut by ``max_tokens``, stopped, or written by the user).

        The prompt is the reply's own prompt plus its ids as generated, so the
        backend's cache holds all of it (only the last id is evaluated again)
        and, greedy, a reply continued from N ids is the reply generated in one
        go.  The new text joins the same message; its stats keep each part.
        """
        why = self.continue_refusal()
        if why is not None:
            return (yield from self._refuse(why))
        reply = self.messages[-1]
        head, prior_ids = self._reply_context(len(self.messages) - 1)
        return (yield from self._extend(head, prior_ids, list(self.messages), prior=reply))

    def reply_with(self, opening: str) -> TurnEvents:
        """Answer the last user message with a reply that starts with ``opening`` (the user's words);
        the model continues from it.  An earlier reply to it stays as a sibling (``branches``).

        The opening's ids are appended to the prompt as they encode on their own (no
        re-tokenization across the generation prompt); they count as prompt, not completion.
        """
        if not opening:
            return (yield from self._refuse("/reply needs the start of the reply: /reply TEXT"))
        before = list(self.messages)
        self.take_replies()
        if not self.messages or self.messages[-1].role != "user":
            self.messages = before
            return (yield from self._refuse("nothing to reply to: the conversation has no user message yet"))
        return (yield from self._forked(before, lambda: self._reply_with(opening, before)))

    def _reply_with(self, opening: str, before: list[ChatMessage]) -> TurnEvents:
        try:
            head, _ = fit.fit(self, [])
        except TemplateError as exc:
            head, why = None, str(exc)
        else:
            why = "no room in the context for a reply"
        if head is None:
            self.messages = before
            return (yield from self._refuse(why))
        return (yield from self._extend(head, self.tokenizer.encode(opening), before, opening=opening))

    # -- running one ------------------------------------------------------------------------------

    def _forked(self, before: list[ChatMessage], turn: Callable[[], TurnEvents]) -> TurnEvents:
        """Run ``turn()`` where the path (now cut short of ``before``) forks: what it replaces stays a
        sibling (``branches``), unless the turn is refused (then nothing changed)."""
        at = len(self.messages)
        forks = at < len(before)
        if forks:
            self.branches.fork(before, at)
        outcome = yield from turn()
        if outcome.refused and forks:
            self.branches.unfork(before, at)
        return outcome

    def _answer(self, new: list[ChatMessage], before: list[ChatMessage]) -> TurnEvents:
        """One turn after ``new`` (the user's message, or tool results); on a refusal the
        messages are put back as they were (``before``)."""
        started = time.monotonic()
        self._cancel.clear()
        window_before = self.window_start
        try:
            # the policy summarize: the turns about to leave are summarized first (app.conversation.compaction)
            compacted = yield from compact(self, new)
            prompt, notice = fit.fit(self, new)
        except TemplateError as exc:
            prompt, notice = None, str(exc)
        if prompt is None:
            self.put_back(before, window_before)
            return (yield from self._refuse(notice or ""))
        if notice:
            yield ReplyEvent("notice", notice)
        # what the cache loses when the path before ``new`` is the one generated (a regenerate or an
        # edit drops the old reply on purpose: not counted)
        cut = cache_cut(self, prompt) if len(self.messages) == len(before) else 0
        self.messages.extend(new)
        return (yield from self._compacted(self._run(self._turn(prompt, started=started, cache_cut=cut)), compacted))

    @staticmethod
    def _compacted(events: TurnEvents, compacted: Compacted) -> TurnEvents:
        """The turn's events, its stats saying what compaction did before it (``compacted_turns``, ``summary_tokens``)."""
        try:
            while True:
                try:
                    event = next(events)
                except StopIteration as end:
                    outcome: TurnOutcome = end.value  # what the turn's generator returned
                    return outcome
                if event.kind == "done" and event.stats is not None and compacted.turns:
                    event.stats.compacted_turns = compacted.turns
                    event.stats.summary_tokens = compacted.summary_tokens
                yield event
        finally:
            events.close()  # a reader that stops early stops the turn, as ``yield from`` would

    def _extend(self, head: BuiltPrompt, prior_ids: list[int], before: list[ChatMessage],
                prior: ChatMessage | None = None, opening: str = "") -> TurnEvents:
        """A reply after ``head`` that already holds ``prior_ids``: the one being continued (``prior``,
        the message the new text joins), or the user's ``opening`` of a new one (``prior`` None)."""
        started = time.monotonic()
        self._cancel.clear()
        size = len(head.ids) + len(prior_ids)
        if self.context_size - size < 1:
            self.messages = before
            return (yield from self._refuse(f"the context is full ({size} of {self.context_size} tokens): "
                                            "nothing can be added to this reply; raise --ctx"))
        # a reply written over the last one (/reply) drops that one on purpose, as a regenerate does
        replaced = before[-1] if len(before) > len(self.messages) else None
        cut = cache_cut(self, head, replaced=replaced) if prior is None else 0
        return (yield from self._run(self._turn(head, started=started, prior_ids=prior_ids, prior=prior,
                                                opening=opening, cache_cut=cut)))

    def _turn(self, head: BuiltPrompt | None, **kwargs: Any) -> Turn:
        return Turn(self, head, stop_ids=self.stop_ids, cancel=self._cancel,
                    reasoning_budget=self.reasoning_budget, **kwargs)

    def _run(self, turn: Turn) -> TurnEvents:
        """Run ``turn`` (the one :attr:`last_outcome` and :attr:`generation_stats` then read)."""
        self._last_turn = self._generating = turn
        return (yield from turn.run())

    def _refuse(self, why: str) -> TurnEvents:
        """The turn that sends nothing (the messages are already as they were)."""
        self._last_turn = turn = self._turn(None)
        return (yield from refuse(turn, why))


def _marker_ids(tokenizer: Tokenizer) -> frozenset[int]:
    specials = tokenizer.special_tokens
    return frozenset(specials[m] for m in END_MARKERS if m in specials)
