"""Speculative decoding's engine-neutral parts: the n-gram drafter, the acceptance rule, the ``auto`` policy.

A reply that copies from the conversation ("rewrite this file without its
docstrings") emits long runs of ids that are already in the context.  The
:class:`NgramDrafter` finds the latest earlier occurrence of the last few
ids (prompt lookup) and proposes the ids that followed it; the engine
evaluates the last id plus the draft in one batch, with logits for every
position, keeps the agreed prefix plus the model's own next id and drops
the rest from its cache.  A match that runs into the context's own end is
a loop and the draft goes round it; a copy the reply left for an edit (a
typo fixed, a field renamed) is picked up again just past the edit.

Why this is lossless (:func:`accept_draft`): at each position the engine
draws the model's own id ``y`` from its sampling chain, exactly as it would
without speculation, and keeps the draft id ``x`` only when ``y == x``.  For
a deterministic draft (q one-hot at ``x``) that *is* the standard
speculative-sampling rule (Leviathan et al. 2023; Chen et al. 2023): ``x``
is kept with probability ``min(1, p(x)/q(x)) = p(x)``, and on a rejection
the id comes from ``p`` with ``x`` removed and renormalised, which is ``y``
given ``y != x``.  Drawing ``y`` first also spends the random generator
exactly as the plain loop does, one draw per emitted id, so a seeded reply
is the same with speculation on or off; greedy is the special case of a
one-hot ``p``.  A draft model's greedy drafts are one-hot too
(:mod:`backends.draft_model`), so this one rule serves both sources.

One :class:`Speculator` per reply owns all of it: the sources (prompt lookup,
a draft model), the policies that decide whether each is asked and how long
its draft is (:class:`AutoPolicy` for lookup drafts, :class:`SpeedCheck` for
the draft model, whose length is its own ``DraftModelConfig.max_draft``),
the step timing and the reply's drafted / accepted counts.  The engine's
decode loop asks it for a draft, verifies it, and tells it what came out.

Not handled: tree drafts, several sequences, MLX (its backend samples with
NumPy in the parent; wiring the drafter there is left for an Apple machine).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from backends.base import DraftCounts

#: the ``speculative`` setting's values
MODES = ("auto", "off", "ngram", "draft")


@dataclass(frozen=True)
class DrafterConfig:
    """How the n-gram drafter looks up and how much it proposes (tuned by ``bench/bench_speculative.py``)."""

    #: lookup lengths, longest first: a longer match disambiguates repeated code, a shorter one finds more;
    #: a 3-id match drafted wrong runs and was slower on bench_speculative's rewrite (docs/speculative.md)
    sizes: tuple[int, ...] = (24, 12, 6)
    #: the most ids one draft proposes (a copied run verified 128 ids a batch, faster on the same rewrite than
    #: 64, 32 or 16: docs/speculative.md); a failed draft quarters the next one
    max_draft: int = 128
    #: the fewest ids worth a batch (a 1-id draft rarely pays for the batch)
    min_draft: int = 2
    #: the first draft's length; it doubles after a draft kept whole and is divided by ``shrink`` after one that
    #: failed.  On a CPU a verified id costs about half a one-id step (the batch is compute-bound: 12 ms per batch
    #: + 15.5 ms per id for Qwen2.5-Coder-0.5B on 2 EPYC cores), so a drafted id pays only if it is kept more
    #: often than not: starting at 8 and quartering on a failure drafted 294 ids for 260 kept on the stdlib
    #: rewrite where 16 and halving drafted 450 for 261 (bench/spec_counts.py, docs/speculative.md)
    start_draft: int = 8
    #: what a failed draft divides the next one's length by
    shrink: int = 4
    #: a match of the longest lookup size (24 ids) is a copy, not a coincidence: it drafts up to this many ids
    #: whatever the current length, and still drafts after ``auto`` gave up on chance matches (llama-server's
    #: ngram-mod drafts only such matches, 48 to 64 ids; docs/speculative.md compares the two).  48, not 64:
    #: a copy with an edit every record (a JSON field renamed) or a loop that varies every few sentences is
    #: cut sooner, and replayed over six saved replies under the CPU's batch cost it came out ahead (json
    #: rename 1.15x -> 1.34x of plain, a prose loop 1.03x -> 1.10x, the rest unchanged: docs/speculative.md)
    long_draft: int = 48
    #: how many ids a match must have to count as such a copy
    long_match: int = 24
    #: lookups shorter than this come after picking up the last draft's copy again past an edit (_resync)
    resync_after: int = 12
    #: how far past the point where the reply left the copy an edit may reach (0: never picked up)
    resync_window: int = 8
    #: how many of the copy's ids the reply must have kept before it is picked up again
    resync_min: int = 3


class NgramDrafter:
    """Prompt lookup over one reply's context: the prompt's ids, then every id the reply keeps.

    Shape of the state: ``ids`` is the context so far; ``_index[n]`` maps an
    n-gram (a tuple of ``n`` ids) to the position right after its latest
    occurrence whose next id is known, i.e. where its continuation starts:
    ``{n: {(id, ..., id): position}}``.  The trailing n-gram of ``ids`` is
    indexed only when the id after it arrives, so a lookup never finds the
    suffix itself.
    """

    def __init__(self, context: Sequence[int], config: DrafterConfig = DrafterConfig()) -> None:
        self.config = config
        self.ids: list[int] = []
        self._index: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in config.sizes}
        #: the last draft's copy: (where it started copying, how long the context was then); see _resync
        self._copy: tuple[int, int] | None = None
        self.extend(context)

    def extend(self, ids: Sequence[int]) -> None:
        """Append ids the context now holds (the prompt, or the ids a step kept)."""
        all_ids = self.ids
        for token in ids:
            end = len(all_ids)  # the position ``token`` takes: every n-gram ending before it now has a next id
            for n, index in self._index.items():
                if end >= n:
                    index[tuple(all_ids[end - n:end])] = end
            all_ids.append(int(token))

    def draft(self, limit: int | None = None, room: int | None = None, long_only: bool = False) -> list[int]:
        """The ids that followed the latest earlier occurrence of the context's longest matching suffix.

        At most ``limit`` (default ``config.max_draft``) ids, except that a
        match of ``config.long_match`` ids or more may give up to
        ``config.long_draft`` (never more than ``room``, the ids the context
        and the reply still take); ``long_only`` looks for such a match only.
        Between the lookup sizes of ``config.resync_after`` ids and the
        shorter ones, the copy the last draft came from is picked up again
        where the reply left it (see :meth:`_resync`).  ``[]`` when nothing
        matched, or the match would give fewer than ``config.min_draft`` ids.
        """
        cap = self.config.max_draft if limit is None else min(limit, self.config.max_draft)
        room = self.config.long_draft if room is None else room
        ids = self.ids
        resynced = False
        for n, index in self._index.items():
            is_long = n >= self.config.long_match
            if long_only and not is_long:
                break
            if not resynced and n < self.config.resync_after:
                resynced = True
                start = self._resync()
                if start is not None:
                    return self._take(start, min(cap, room))
            if len(ids) < n:
                continue
            start = index.get(tuple(ids[-n:]))
            if start is not None:
                take = min(max(cap, min(self.config.long_draft, room)) if is_long else cap, room)
                return self._take(start, take)
        if not long_only and not resynced:
            start = self._resync()
            if start is not None:
                return self._take(start, min(cap, room))
        return []

    def _take(self, start: int, take: int) -> list[int]:
        """``take`` ids copied from ``start`` on (the copy remembered for :meth:`_resync`); ``[]`` if too few."""
        ids = self.ids
        found = ids[start:start + take]
        # a match that runs into the suffix itself is a loop of period len(ids) - start: go round it
        period = len(ids) - start
        while len(found) < take:
            found.append(found[-period])
        if len(found) < self.config.min_draft:
            return []
        self._copy = (start, len(ids))
        return found

    def _resync(self) -> int | None:
        """Where the copy the last draft came from goes on, now that the reply left it; None if not found.

        A reply that copies with edits (a typo fixed, a field renamed, a
        counter that goes up) leaves its source for an id or a few and then
        goes on copying from just after the edit.  The last draft copied from
        ``source`` on while the context was ``at`` ids long; the ids appended
        since agree with the source up to position ``q``.  The copy is taken
        up again after the first occurrence of the latest id in the next
        ``config.resync_window`` source ids from ``q``: a one-id match is
        chance anywhere, but not a few ids after where the reply left off.
        The copy is forgotten once the reply has gone ``resync_window`` ids
        its own way.
        """
        if self._copy is None:
            return None
        source, at = self._copy
        ids = self.ids
        k = 0
        appended = len(ids) - at
        while k < appended and ids[source + k] == ids[at + k]:
            k += 1
        if k == appended:
            return None  # still on the copy: the lookups find it
        if k < self.config.resync_min:
            self._copy = None  # the reply never followed it: a chance match, not a copy
            return None
        if appended - k > self.config.resync_window:
            self._copy = None
            return None
        q, last = source + k, ids[-1]
        for r in range(q, min(q + self.config.resync_window, len(ids) - 1)):
            if ids[r] == last:
                return r + 1
        return None


def accept_draft(draft: Sequence[int], sampled: Sequence[int]) -> int:
    """How many draft ids the model's own ids agree with: the length of their common prefix.

    ``sampled[i]`` is the id the model drew after the context plus
    ``draft[:i]``; the step keeps ``draft[:k]`` and then ``sampled[k]``.
    """
    k = 0
    for x, y in zip(draft, sampled):
        if x != y:
            break
        k += 1
    return k


class SpeedCheck:
    """Whether the draft model pays in this reply, judged by how fast its steps emit ids against plain steps.

    Why time and not counts: a draft model costs a decode of its own for
    every id it proposes, and one even when it proposes nothing (its top
    choice under ``p_min``), and what a kept id saves depends on the
    hardware.  On a 2-core CPU a 0.5B draft step costs about 0.4 of a 1.5B
    step and verifying a batch costs nearly as much per id as a plain step,
    so the draft model lost with 92% of its ids kept (prose at 0.59x of
    plain, docs/speculative.md); on a GPU a batch costs about what one id
    does and the same draft pays.  So ``auto`` measures: the first
    ``plain_steps`` steps of a reply do not ask the draft model; once
    ``min_steps`` steps have asked it, the draft model is set aside for the
    rest of the reply whenever those steps emitted fewer ids per second than
    the plain ones.  Steps drafted by prompt lookup count for neither: a
    lookup costs nothing, and its drafts are judged by :class:`AutoPolicy`.

    The probe's cost where the draft model loses: ``min_steps`` slow steps
    in a reply (8 of 300 ids at 0.6x is about 2%).
    """

    def __init__(self, plain_steps: int = 4, min_steps: int = 8) -> None:
        self.plain_steps = plain_steps
        self.min_steps = min_steps
        self.plain_seconds = 0.0
        self.plain_ids = 0
        self.model_seconds = 0.0
        self.model_ids = 0
        self.model_steps = 0
        #: False once the draft model was set aside in this reply
        self.model_pays = True

    def may_ask_model(self) -> bool:
        return self.model_pays and self.plain_ids >= self.plain_steps

    def record(self, seconds: float, ids: int, *, asked_model: bool, drafted: bool) -> None:
        """Count one step: ``ids`` emitted in ``seconds``; ``drafted`` when its draft came from a lookup or the model."""
        if asked_model:
            self.model_seconds += seconds
            self.model_ids += ids
            self.model_steps += 1
        elif not drafted:
            self.plain_seconds += seconds
            self.plain_ids += ids
        else:
            return
        if self.model_steps >= self.min_steps and self.plain_ids and self.plain_seconds > 0:
            plain_rate = self.plain_ids / self.plain_seconds
            if self.model_ids < plain_rate * self.model_seconds:
                self.model_pays = False


class AutoPolicy:
    """When prompt lookup drafts during one reply, and how long its next draft is.

    ``ngram`` drafts whenever the drafter finds a match.  ``auto`` does too,
    but gives up on chance matches for the rest of the reply once drafts keep
    failing: after ``fail_streak`` drafts in a row with nothing accepted, or
    after ``min_drafted`` drafted ids of which fewer than ``min_rate`` were
    accepted, so that fresh prose, where matches are chance, does not pay for
    batches it throws away.  Only lookup drafts are recorded here (their own
    ``drafted``/``accepted``, this rule's input); a draft model is judged by
    :class:`SpeedCheck` alone.
    """

    def __init__(self, mode: str, *, fail_streak: int = 4, min_drafted: int = 48, min_rate: float = 0.3,
                 config: DrafterConfig = DrafterConfig()) -> None:
        if mode not in MODES:
            raise ValueError(f"speculative must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode = mode
        self.config = config
        #: the next draft's length: long while drafts are kept whole (a copied run), short after a failure
        self.limit = config.start_draft
        self.fail_streak = fail_streak
        self.min_drafted = min_drafted
        self.min_rate = min_rate
        self.drafted = 0
        self.accepted = 0
        self._streak = 0
        self.active = mode != "off"

    def record(self, drafted: int, accepted: int) -> None:
        """Count one verified draft; ``auto`` may turn itself off here."""
        self.drafted += drafted
        self.accepted += accepted
        if accepted == drafted:
            self.limit = min(2 * self.limit, self.config.max_draft)
        else:
            self.limit = max(self.limit // self.config.shrink, self.config.min_draft)
        self._streak = self._streak + 1 if accepted == 0 else 0
        if self.mode != "auto":
            return
        if self._streak >= self.fail_streak:
            self.active = False
        elif self.drafted >= self.min_drafted and self.accepted < self.min_rate * self.drafted:
            self.active = False


class ModelSource(Protocol):
    """A draft model kept in step with the reply (:class:`backends.draft_model.ModelDrafter`)."""

    def extend(self, ids: Sequence[int]) -> None: ...

    def draft(self, limit: int) -> list[int]:
        """Up to ``limit`` ids, never more than the draft model's own ``max_draft``."""
        ...


class Speculator:
    """One reply's speculation: its sources, the policies over them, its step timing and its counts.

    The sources: prompt lookup (:class:`NgramDrafter`, ``auto`` and ``ngram``)
    and a draft model (``model``, loaded for ``draft`` and ``auto``).  Lookup
    goes first (it costs nothing); the draft model is asked where lookup found
    nothing.  Who decides what, each once:

    - whether lookup drafts chance matches, and its draft length:
      :class:`AutoPolicy` (after ``auto`` gave up, only a copy, a long match,
      still drafts);
    - whether the draft model is asked: :class:`SpeedCheck` under ``auto``
      (timed with ``clock``), always under ``draft``;
    - the draft model's length: its own ``DraftModelConfig.max_draft``;
    - ``drafted``/``accepted``: here, over both sources.

    The engine's loop, per step: :meth:`draft` with the id just emitted, then
    :meth:`plain_step` when nothing was drafted, or :meth:`verified` with the
    ids the batch emitted.  ``off`` drafts nothing and counts nothing.
    """

    def __init__(self, mode: str, context: Sequence[int], *, config: DrafterConfig = DrafterConfig(),
                 model: ModelSource | None = None, clock: Callable[[], float] = time.perf_counter) -> None:
        if mode not in MODES:
            raise ValueError(f"speculative must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode = mode
        self.config = config
        self.clock = clock
        drafting = mode != "off"
        self.model = model if drafting else None
        #: prompt lookup: wherever it drafts, and always where there is no draft model to draft instead
        lookup = drafting and (model is None or mode in ("auto", "ngram"))
        self.ngram = NgramDrafter(context, config) if lookup else None
        self.policy = AutoPolicy(mode, config=config) if lookup else None
        self.speed = SpeedCheck() if self.model is not None and mode == "auto" else None
        self.drafted = 0
        self.accepted = 0
        #: the latest :meth:`draft`'s ids, whether it asked the draft model (it then paid for its decodes), and
        #: when its step started
        self._draft: list[int] = []
        self._asked_model = False
        self._started = 0.0

    def draft(self, last: int, room: int, cut: Callable[[list[int]], list[int]] | None = None) -> list[int]:
        """The ids to verify after ``last`` (the id just emitted, now added to the context); ``[]``: a plain step.

        ``room``: how many ids the context and the reply still take after
        ``last``.  ``cut`` shortens a draft to what a constraint allows; a
        draft cut under ``config.min_draft`` ids is dropped.
        """
        self._started = self.clock()
        self._extend((last,))
        found: list[int] = []
        if self.ngram is not None and self.policy is not None:
            found = self.ngram.draft(min(room, self.policy.limit), room, long_only=not self.policy.active)
        self._asked_model = (not found and self.model is not None
                             and (self.speed is None or self.speed.may_ask_model()))
        if self._asked_model and self.model is not None:
            found = self.model.draft(room)
        if found and cut is not None:
            found = cut(found)
            if len(found) < self.config.min_draft:
                found = []
        self._draft = found
        return found

    def plain_step(self) -> None:
        """The step after the latest :meth:`draft` verified nothing and emitted one id."""
        self._draft = []
        if self.speed is not None:
            self.speed.record(self.clock() - self._started, 1, asked_model=self._asked_model, drafted=False)

    def verified(self, emitted: Sequence[int]) -> None:
        """The batch that verified the latest draft emitted ``emitted``: the draft's agreed prefix, then at most
        one id of the model's own (fewer where the reply ended inside the batch)."""
        draft, self._draft = self._draft, []
        accepted = accept_draft(draft, emitted)
        self.drafted += len(draft)
        self.accepted += accepted
        self._extend(emitted[:-1])  # the last one comes with the next draft()
        if not self._asked_model and self.policy is not None:
            self.policy.record(len(draft), accepted)
        if self.speed is not None:
            self.speed.record(self.clock() - self._started, len(emitted), asked_model=self._asked_model,
                              drafted=True)

    def counts(self, batch: Sequence[int] = ()) -> DraftCounts | None:
        """The reply's counts so far, None under ``off``; ``batch``: the ids the batch under way emitted so far
        (its draft counts from its first id on: the reader may stop at any id, the stop id included)."""
        if self.mode == "off":
            return None
        pending = accept_draft(self._draft, batch) if batch else 0
        return DraftCounts(self.drafted + (len(self._draft) if batch else 0), self.accepted + pending)

    def _extend(self, ids: Sequence[int]) -> None:
        if self.ngram is not None:
            self.ngram.extend(ids)
        if self.model is not None:
            self.model.extend(ids)
