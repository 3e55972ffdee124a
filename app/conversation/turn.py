"""One turn: generate a reply after a fitted prompt, commit it once, and say how it ended.

A turn is a stack of small stages::

    backend.generate(ids)  ->  tokenizer.stream_decoder()  ->  ThinkFilter  ->  ReplyEvent

A reply ends on any end-of-generation id (``stop``), on ``max_tokens`` (``length``), on a
cancel (``cancelled``) or on a backend failure (``error``); in every case the partial reply is
committed with its finish reason, by :meth:`Turn._commit`, the one place a reply joins the
conversation: a new reply is appended, a continued one (/continue) grows in place; either way
it gets its stats, the record of the prompt it answered, and the prompt builder remembers its
ids as generated, so the next prompt extends them exactly.

The turn's outcome (:class:`~app.conversation.messages.TurnOutcome`) is known before its
``done`` event, which carries it, and the generator returns it; :func:`refuse` is the turn
that sends nothing (the same ``error`` and ``done`` events).

Not handled here: fitting the prompt (:mod:`app.conversation.fit`), deciding what the turn
answers (:class:`app.conversation.session.ChatSession`).
"""
from __future__ import annotations

import threading
import time
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterable, Iterator, Sequence

from app.conversation.conversation import Conversation
from app.conversation.messages import ChatMessage, ReplyEvent, TurnOutcome, TurnStats, merge_stats
from backends.base import BackendError, FinishReason, GenerationStats, SamplingParams
from backends.constraint import describe
from templates.builder import BuiltPrompt
from tokenizer.think import ThinkEvent, ThinkFilter

if TYPE_CHECKING:
    from tokenizer.protocol import Tokenizer

#: what a turn's generator is: its events, then its outcome as the return value
TurnEvents = Generator[ReplyEvent, None, TurnOutcome]


class Turn:
    """The reply being generated after ``head``, and its accounting.

    ``prior_ids``: ids the reply already holds after ``head`` (the user's opening for /reply, or the
    reply being continued); ``prior``: the message a continuation grows (None: a new reply);
    ``cache_cut``: ids the engine held that ``head`` does not start with (see :func:`cache_cut`).
    """

    def __init__(self, conversation: Conversation, head: BuiltPrompt | None, *, stop_ids: frozenset[int],
                 cancel: threading.Event, reasoning_budget: int | None, started: float | None = None,
                 prior_ids: Sequence[int] = (), prior: ChatMessage | None = None, opening: str = "",
                 cache_cut: int = 0) -> None:
        self.conversation = conversation
        self.head = head
        self.stop_ids = stop_ids
        self.cancel = cancel
        self.reasoning_budget = reasoning_budget
        self.started = time.monotonic() if started is None else started
        self.prior_ids = list(prior_ids)
        self.prior = prior
        self.cache_cut = cache_cut
        self.reply_ids: list[int] = []
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.reasoning_tokens = 0
        self.forced_close_tokens = 0  # ids appended to close the think block (the budget was spent)
        self.first_at: float | None = None
        self.last_at: float | None = None
        #: the engine's reason once the reply ended (None until then; still None at the end means cancelled)
        self.finish: FinishReason | None = None
        self.ended = False  # the stream ran to its end (stop id, length, or the backend finished)
        #: why the engine ended the reply short of its own accord (a server's abort or limit): the turn's error
        self.cut: str | None = None
        self.flushed = False
        self.verified = True  # every generation of this turn matched the backend's own count
        self.prior_reasoning = 0  # reasoning ids of the reply's earlier part (a continued reply), for the budget
        self.evaluated = 0  # prompt ids evaluated by earlier generations of this turn (after a budget cut)
        self.drafted = 0  # speculative drafts of earlier generations of this turn (after a budget cut)
        self.accepted = 0
        self.reasoning_cut = False
        self.stats: GenerationStats | None = None  # the engine's facts about this turn's latest generation
        self.outcome: TurnOutcome | None = None  # known once the turn has ended
        self.prompt: BuiltPrompt | None = None
        self.opening = opening
        self.decoder: Any = None
        self.think: ThinkFilter | None = None
        if head is not None:
            self._prime(head)

    def _prime(self, head: BuiltPrompt) -> None:
        """Set the decoder and think filter after ``head`` and feed them the reply's prior ids."""
        tokenizer = self.conversation.tokenizer
        self.decoder = tokenizer.stream_decoder()
        self.think = ThinkFilter.for_prompt(head.text)
        if self.prior is None and not self.prior_ids:
            self.prompt = head
            return
        events, reasoning = [], 0
        for token in self.prior_ids:  # id by id, counting reasoning ids as _generate does
            before = self.think.in_reasoning
            events += self.think.feed(self.decoder.feed(token))
            reasoning += before or self.think.in_reasoning
        if self.prior is None:  # the opening is this reply's first text (not yielded: the caller shows it)
            self._keep(events)
            self.opening = "".join(self.content) or self.opening
        else:  # a reply cut before its stats were stored (a kill) counts its reasoning from its ids
            self.prior_reasoning = self.prior.stats.reasoning_tokens if self.prior.stats else reasoning
        rendered = replace(head.rendered, text=head.text + tokenizer.decode(self.prior_ids))
        self.prompt = BuiltPrompt(rendered, list(head.ids) + self.prior_ids, head.reused)

    # -- running --------------------------------------------------------------------------------

    def run(self) -> TurnEvents:
        """Generate, then commit the reply whatever happens, and yield ``done`` with its stats."""
        c = self.conversation
        prompt = self.prompt
        assert prompt is not None, "a turn without a prompt is a refusal: see refuse()"
        c.last_prompt = prompt
        room = c.context_size - len(prompt.ids)
        sampling = replace(c.sampling, max_tokens=max(1, min(c.sampling.max_tokens, room)))
        stream = self._generate(prompt, sampling)
        error: str | None = None
        try:
            yield from stream
        except BackendError as exc:
            self.finish, error = FinishReason.ERROR, str(exc)
        except Exception:
            self.finish = FinishReason.ERROR  # a bug: the partial reply is kept, the traceback goes on up
            raise
        finally:
            stream.close()
            if not self.ended and self.finish != FinishReason.ERROR:
                self.finish = FinishReason.CANCELLED  # the caller stopped reading, or cancel() was called
            self._flush()  # text still held back is kept even when it cannot be yielded now
            stats = self._commit()
            error = error if error is not None else self.cut
            self.outcome = TurnOutcome.after(self.finish, error)
        if error is not None:
            yield ReplyEvent("error", error)
        yield ReplyEvent("done", stats=stats, data=self.outcome)
        return self.outcome

    def _generate(self, prompt: BuiltPrompt, sampling: SamplingParams) -> Generator[ReplyEvent, None, None]:
        """backend ids -> stream decoder -> think filter -> events, with accounting on the way.

        Reasoning budget: once the reply has ``reasoning_budget`` reasoning ids, the generation
        stops, the model's end-of-thinking ids (:func:`think_close_ids`) join the reply as if
        generated, and a new generation goes on from there (the engine's cache holds all of it,
        so only those ids are evaluated), as llama.cpp's server does."""
        think = self.think
        assert think is not None  # _prime set it, before any generation
        budget = self.reasoning_budget
        if budget is not None and think.in_reasoning and self.prior_reasoning >= budget:
            yield from self._close_think()  # a budget of 0, or one spent before a /continue
            budget = None
        backend = self.conversation.backend
        while True:
            ids = backend.generate(list(prompt.ids) + self.reply_ids,
                                   replace(sampling, max_tokens=sampling.max_tokens - len(self.reply_ids),
                                           generated_ids=self._generated_ids()),
                                   self.stop_ids)
            self.stats = ids.stats
            noticed = ""  # an engine found dead and started again for this reply: said once, when it is known
            over_budget = False
            try:
                if ids.stats.notice:
                    noticed = ids.stats.notice
                    yield ReplyEvent("notice", noticed)
                for token in ids:
                    if ids.stats.notice != noticed:
                        noticed = ids.stats.notice
                        yield ReplyEvent("notice", noticed)
                    now = time.monotonic()
                    self.first_at = self.first_at or now
                    self.last_at = now
                    self.reply_ids.append(token)
                    if token in self.stop_ids:  # the engine said "stop" as it handed this id out (Generation)
                        self.finish = ids.stats.finish_reason or FinishReason.STOP
                        break
                    before = think.in_reasoning
                    events = think.feed(self.decoder.feed(token))
                    if before or think.in_reasoning:
                        self.reasoning_tokens += 1
                    yield from self._emit(events)
                    if self.cancel.is_set():
                        break
                    if (budget is not None and think.in_reasoning
                            and self.reasoning_tokens + self.prior_reasoning >= budget
                            and len(self.reply_ids) < sampling.max_tokens):
                        over_budget = True
                        break
                else:
                    if not self.cancel.is_set():
                        self.finish = self._engine_finish(ids.stats, sampling.max_tokens, noticed)
            finally:
                ids.close()
                # a remote backend checks the ids it passed on against the server's count (backends.remote)
                self.verified = self.verified and ids.stats.verified
            if not over_budget:
                break
            self.evaluated += ids.stats.prompt_evaluated
            self.drafted, self.accepted = self._draft_counts()
            yield from self._close_think()
            budget = None  # one cut per reply
        if not self.finish:
            return  # cancelled: run()'s finally marks it and keeps the held-back text
        self.ended = True
        yield from self._emit(self._flush(), keep=False)

    def _engine_finish(self, stats: GenerationStats, max_tokens: int, noticed: str = "") -> FinishReason:
        """Why the reply ended, the turn not having stopped it: the engine's own reason, set once by the engine
        (:meth:`GenerationStats.end`; a server's cap is "length", its abort "error"), not worked out here.  A
        reply the engine cut (an "error" of its own, or a "length" before the ``max_tokens`` asked for) gets
        :attr:`cut`, one line (the engine's notice where it gave one not ``noticed`` already), so it is
        reported as a failure, stored with that reason and can be continued.

        The one reason read differently: "cancelled" (or none) from ids that simply ran out while the turn
        stopped nothing is an engine that ended the reply without a word on why (every real engine says;
        a test's plain list of ids does not): the reply ended, at ``max_tokens`` or before it."""
        reason = stats.finish_reason
        if reason in (None, FinishReason.CANCELLED):
            return FinishReason.LENGTH if len(self.reply_ids) >= max_tokens else FinishReason.STOP
        if reason == FinishReason.ERROR or (reason == FinishReason.LENGTH and len(self.reply_ids) < max_tokens):
            n = len(self.reply_ids)
            said = stats.notice if stats.notice != noticed else ""  # a notice given already is not the reason
            self.cut = said or (
                f"the engine ended the reply after {n} id{'s' if n != 1 else ''}, before the {max_tokens} asked for "
                f"({'a failure of its own' if reason == FinishReason.ERROR else 'a limit of its own'}); the reply so "
                "far is kept as cut and can be continued")
        return reason

    def _generated_ids(self) -> int:
        """How many of the next generation's prompt ids the model generated: the continued reply's (past a
        user-written opening) and this turn's so far (``SamplingParams.generated_ids``: a local engine
        evaluates them again one at a time, so a continuation is the one-go reply id for id)."""
        prior = self.prior
        if prior is None:
            return len(self.reply_ids)
        opening = len(self.conversation.tokenizer.encode(prior.opening)) if prior.opening else 0
        return max(len(self.prior_ids) - opening, 0) + len(self.reply_ids)

    def _close_think(self) -> Iterator[ReplyEvent]:
        """Append the end-of-thinking ids to the reply as if generated (the reasoning budget is spent)."""
        think = self.think
        assert think is not None  # _prime set it, before any generation
        self.reasoning_cut = True
        for token in think_close_ids(self.conversation.tokenizer, think.close_tag):
            self.reply_ids.append(token)
            self.forced_close_tokens += 1  # tokchat's, not the model's: counted apart from reasoning_tokens
            yield from self._emit(think.feed(self.decoder.feed(token)))

    def _emit(self, events: list[ThinkEvent], keep: bool = True) -> Iterator[ReplyEvent]:
        if keep:
            self._keep(events)
        for event in events:
            yield ReplyEvent(event.kind, event.text)

    def _keep(self, events: list[ThinkEvent]) -> None:
        """Add the text of ``events`` to the reply's content or reasoning."""
        for event in events:
            (self.reasoning if event.kind == "reasoning" else self.content).append(event.text)

    def _flush(self) -> list[ThinkEvent]:
        """Events for the text the decoder and think filter still hold (once), kept in the reply."""
        if self.flushed or self.think is None:
            return []
        self.flushed = True
        # a cut reply (length, cancelled, error) may be continued: a character still arriving stays in its
        # ids, not U+FFFD in its text, so the continuation completes it as the one-go reply does
        tail = self.decoder.finalize(continuable=self.finish in (FinishReason.LENGTH, FinishReason.CANCELLED,
                                                                 FinishReason.ERROR))
        events = (self.think.feed(tail) if tail else []) + self.think.finalize()
        self._keep(events)
        return events

    # -- committing -------------------------------------------------------------------------------

    def _commit(self) -> TurnStats:
        """The reply joins the conversation (the one place it does): appended as a new message, or
        grown in place (a continuation); then its record, and the builder primed with its ids."""
        c = self.conversation
        stats = self.stats_now()
        stats.cache_cut_tokens = self.cache_cut
        all_ids = tuple(self.prior_ids) + tuple(self.reply_ids)
        prior = self.prior
        assert self.head is not None and self.finish is not None
        if prior is None:
            stats.opening_tokens = len(self.prior_ids)
            message = ChatMessage("assistant", "".join(self.content), "".join(self.reasoning), stats,
                                  self.finish, opening=self.opening, reply_ids=all_ids)
        else:
            message = prior
            stats = merge_stats(prior.stats if prior.stats is not None else self._unrecorded_part(stats), stats)
            c.grow_reply(message, "".join(self.content), "".join(self.reasoning), stats, self.finish, all_ids)
        c.commit_reply(message, self.head, all_ids)
        return stats

    def _unrecorded_part(self, stats: TurnStats) -> TurnStats:
        """The part of a continued reply whose stats were never stored (it was cut by a kill, or is being
        written by another window), as far as its ids tell: the prompt it answered (``head``, plus the
        user's opening) and its ids as completion.  Of the prompt ids this turn evaluated (``stats``), the
        last ones are the reply's own (evaluated again to continue, kept in ``stats``); those before them
        are the prompt's, the work that part would have shown.  Changes ``stats`` to keep only its own."""
        prior = self.prior
        assert prior is not None and self.head is not None
        n_ids = len(self.prior_ids)
        opening = min(len(self.conversation.tokenizer.encode(prior.opening)), n_ids) if prior.opening else 0
        generated = n_ids - opening
        again = min(stats.new_prompt_tokens, generated)
        first = TurnStats(
            new_prompt_tokens=stats.new_prompt_tokens - again, prompt_tokens=len(self.head.ids) + opening,
            completion_tokens=generated, reasoning_tokens=self.prior_reasoning, opening_tokens=opening,
            context_used=len(self.head.ids) + n_ids, context_limit=stats.context_limit,
            finish_reason=FinishReason(prior.finish_reason or FinishReason.INTERRUPTED), backend=stats.backend,
            device=stats.device,
            model=stats.model, template=stats.template, sampling=stats.sampling)
        stats.new_prompt_tokens = again
        return first

    def stats_now(self) -> TurnStats:
        """This turn's accounting as it stands (a refused turn: nothing sent, nothing generated)."""
        c = self.conversation
        info = c.backend.info
        prompt = self.prompt  # None: refused
        n_prompt = len(prompt.ids) if prompt else 0
        n_reply = len(self.reply_ids)
        speed = 0.0
        if n_reply > 1 and self.first_at is not None and self.last_at and self.last_at > self.first_at:
            speed = (n_reply - 1) / (self.last_at - self.first_at)
        if n_reply:
            evaluated = (self.stats.prompt_evaluated if self.stats else 0) + self.evaluated
        else:
            evaluated = self._evaluated_unanswered(prompt)
        ttft = (self.first_at - self.started) if self.first_at else 0.0
        drafted, accepted = self._draft_counts() if n_reply else (0, 0)
        finish = self.finish if prompt is not None and self.finish is not None else FinishReason.ERROR
        return TurnStats(
            new_prompt_tokens=evaluated, prompt_tokens=n_prompt, completion_tokens=n_reply,
            reasoning_tokens=self.reasoning_tokens, forced_close_tokens=self.forced_close_tokens,
            ttft_s=ttft, tokens_per_s=speed, prompt_tokens_per_s=evaluated / ttft if ttft > 0 else 0.0,
            context_used=n_prompt + n_reply, context_limit=c.context_size, finish_reason=finish,
            dropped_turns=c.dropped_turns(),
            backend=info.backend, device=info.device,
            gpu_layers=(f"{info.offloaded_layers}/{info.total_layers}"
                        if info.offloaded_layers and info.total_layers else ""),
            vram_mib=info.vram_mib,
            verified=self.verified, model=info.model_name, template=c.template.name,
            sampling=asdict(replace(c.sampling, constraint=None)), reasoning_cut=self.reasoning_cut,
            drafted_tokens=drafted, accepted_tokens=accepted, constraint=describe(c.sampling.constraint),
            generation=self.stats if self.stats is not None else GenerationStats(),
        )

    def _evaluated_unanswered(self, prompt: BuiltPrompt | None) -> int:
        """Prompt ids evaluated by a turn stopped before its first reply id (Esc while a long prompt
        was evaluated): the engine's last progress report, the count the user saw on the progress line.
        The engine keeps those ids in its cache, so the next turn reuses them; saying 0 here would
        hide that work.  A refused or failed turn evaluated nothing that is counted."""
        if prompt is None or self.finish != "cancelled":
            return 0
        progress = self.stats.progress if self.stats else None
        return min(progress.done, len(prompt.ids)) if progress is not None else 0

    def _draft_counts(self) -> tuple[int, int]:
        """(drafted, accepted) of this turn so far: earlier generations' plus the latest generation's."""
        counts = self.stats.draft if self.stats is not None else None
        if counts is None:
            return self.drafted, self.accepted
        return self.drafted + counts.drafted, self.accepted + counts.accepted


def refuse(turn: Turn, why: str) -> TurnEvents:
    """The turn that sends nothing: ``error`` (why), then ``done`` with empty stats; the caller has
    left the conversation as it was.  ``turn``: one made without a prompt."""
    turn.outcome = TurnOutcome("refused", why)
    yield ReplyEvent("error", why)
    yield ReplyEvent("done", stats=turn.stats_now(), data=turn.outcome)
    return turn.outcome


def watch_outcome(events: Iterable[ReplyEvent], keep: Callable[[TurnOutcome], None]) -> Iterator[ReplyEvent]:
    """Pass a session turn's events on, handing its outcome to ``keep`` as its ``done`` event passes,
    before any reader further on sees that event.  For a caller that runs the turn through the tool
    loop, whose own ``done`` ends the whole turn: whether the session took the turn is the first
    step's outcome (a later step refused leaves the reply that called the tool in place)."""
    for event in events:
        if event.kind == "done" and isinstance(event.data, TurnOutcome):
            keep(event.data)
        yield event


def cache_cut(conversation: Conversation, prompt: BuiltPrompt, replaced: ChatMessage | None = None) -> int:
    """Ids of what the backend holds that ``prompt`` does not start with (its cache loses them).

    ``replaced``: a reply this turn replaces on purpose (it stays a sibling); when the cache ends
    with it, its ids are not counted: only earlier turns rewritten (a template that drops old
    reasoning) are a cut worth showing (:meth:`Conversation.cache_cut`)."""
    return conversation.cache_cut(prompt, replaced)


def think_close_ids(tokenizer: Tokenizer, close_tag: str = "</think>") -> list[int]:
    """The ids that end a think block: ``\\n</think>\\n\\n`` as the model's own tokenizer encodes it
    (``</think>`` is one id where the vocabulary has it), the way Qwen3 and R1 close theirs."""
    return tokenizer.encode(f"\n{close_tag}\n\n", special=True)
