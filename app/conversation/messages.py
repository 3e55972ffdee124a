"""What a conversation is made of: its messages, a turn's accounting, events and outcome.

:class:`ChatMessage` is one message of the path (an assistant reply carries its
:class:`TurnStats` and the prompt it answered); a turn streams :class:`ReplyEvent` values
and ends with a :class:`TurnOutcome`.  Plain values only: no tokenizer, template or backend.

Not handled here: building prompts and running a turn (:mod:`app.conversation.turn`),
the message list and its branches (:mod:`app.conversation.conversation`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from app.conversation.context_breakdown import PromptRecord
from backends.base import FinishReason, GenerationStats

#: roles that belong to a reply (what regenerate and edit take away)
REPLY_ROLES = ("assistant", "tool")


@dataclass
class TurnStats:
    """Exact accounting for one turn: the turn's own counts, and the engine's facts about its latest
    generation held as they came (:attr:`generation`, read through :attr:`state`, :attr:`mask_ms`,
    :attr:`note`), never copied field by field.  Stored and printed flat (:func:`stats_dict`)."""

    new_prompt_tokens: int = 0  # prompt ids the backend had to evaluate (the rest came from its cache)
    prompt_tokens: int = 0
    completion_tokens: int = 0  # generated ids, the stop id included
    #: of completion_tokens, those the model generated inside the think block (its own tags included)
    reasoning_tokens: int = 0
    ttft_s: float = 0.0  # from send() to the first generated id
    tokens_per_s: float = 0.0  # generation speed after the first id
    #: prompt processing: new prompt ids evaluated per second of the time to the first id (0 when none)
    prompt_tokens_per_s: float = 0.0
    context_used: int = 0  # prompt + completion: what the backend's context holds now
    context_limit: int = 0
    #: the engine's, set once by it (GenerationStats.end); "interrupted" for a part of a reply cut by a kill
    finish_reason: FinishReason = FinishReason.STOP
    dropped_turns: int = 0  # earlier turns currently left out of the prompt to fit the context
    backend: str = ""
    device: str = ""
    #: layers on the GPU out of those llama.cpp can offload ("29/29"; "" on the CPU), and the VRAM they take
    gpu_layers: str = ""
    vram_mib: int = 0
    tool_call_tokens: int = 0  # of completion_tokens, those inside tool-call markup
    tool_result_tokens: int = 0  # tokens of the tool results sent back to the model
    model_steps: int = 1  # generations in this turn (1 + one per round of tool results)
    #: False when a remote server's own count disagreed with the ids received (see backends.remote)
    verified: bool = True
    #: what produced this reply: the model's name, the chat template and the sampling settings
    #: (a chat goes on across /model, so each reply says which one answered)
    model: str = ""
    template: str = ""
    sampling: dict[str, Any] | None = None
    #: ids of the reply's start the user wrote (/reply): counted in prompt_tokens, not completion_tokens
    opening_tokens: int = 0
    #: ids the engine held from the last turn that this prompt does not start with, so they were
    #: dropped from its cache (a template that leaves earlier reasoning out: Qwen3, DeepSeek R1)
    cache_cut_tokens: int = 0
    #: tokchat closed the think block itself after the reasoning budget (--reasoning-budget)
    reasoning_cut: bool = False
    #: of completion_tokens, the ids tokchat appended to close the think block (``\n</think>\n\n``) when the
    #: budget was spent: not the model's reasoning, so not in reasoning_tokens (0 when nothing was cut)
    forced_close_tokens: int = 0
    #: speculative decoding (backends.speculative): ids the drafter proposed and how many the model kept;
    #: the kept ones are counted in completion_tokens like every other id (0 and 0: no speculation)
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    #: the constraint the reply was held to (backends.constraint.describe: "json schema", "regex /.../"; "" =
    #: none); the milliseconds its masks took are the engine's (:attr:`mask_ms`)
    constraint: str = ""
    #: turns that left the prompt into a summary before this reply (a summary message: the turns it stands
    #: for), and the summary's ids (app.conversation.compaction; 0 and 0: nothing was compacted)
    compacted_turns: int = 0
    summary_tokens: int = 0
    #: a continued reply (/continue): each part's own stats as a dict, first to last; the counts above
    #: are their sums (prompt_tokens, new_prompt_tokens and ttft_s are the first part's: see merge_stats;
    #: the rest the last part's)
    parts: list[dict[str, Any]] | None = None
    #: the engine's facts about the turn's latest generation, as the engine filled them (a stored reply: the
    #: ones the user is shown, :data:`ENGINE_FACTS`)
    generation: GenerationStats = field(default_factory=GenerationStats, compare=False, repr=False)

    @property
    def state(self) -> str:
        """What the engine's state cache did for the prompt (backends.state_keeper): "loaded N ids from disk
        in T s", "none (why)"; "" = nothing to say (states off, a server, or the engine's own cache served it)."""
        return self.generation.state

    @property
    def mask_ms(self) -> float:
        """Milliseconds the reply's constraint took to mask the logits in the engine (0 where it masks nothing)."""
        return self.generation.mask_ms

    @property
    def note(self) -> str:
        """The engine's note on this reply's counts: why they are unverified, or how they were kept verified
        (a server's ids the stream held back, fetched again); "" = nothing to say."""
        return self.generation.note


#: the engine's facts a turn's stats show, stored and printed at the top level beside the turn's own counts
ENGINE_FACTS = ("state", "mask_ms", "note")


def stats_dict(stats: TurnStats) -> dict[str, Any]:
    """``stats`` as the history stores it and ``--stats`` prints it: the turn's fields and the engine's
    facts (:data:`ENGINE_FACTS`) side by side, one flat JSON object."""
    out = asdict(stats)
    del out["generation"]
    engine = stats.generation
    out.update(state=engine.state, mask_ms=engine.mask_ms, note=engine.note)  # ENGINE_FACTS
    return out


def stats_from_dict(data: dict[str, Any]) -> TurnStats | None:
    """A :class:`TurnStats` from :func:`stats_dict`'s form (the history's ``stats_json``); keys of another
    version are left out; None when the dict lacks what a TurnStats needs."""
    names = {f.name for f in fields(TurnStats)} - {"generation"}
    known = {k: v for k, v in data.items() if k in names}
    reason = known.get("finish_reason")
    if isinstance(reason, str) and reason in FinishReason._value2member_map_:
        known["finish_reason"] = FinishReason(reason)
    facts = {k: data[k] for k in ENGINE_FACTS if k in data}
    try:
        return TurnStats(**known, generation=GenerationStats(**facts))
    except TypeError:  # a stats dict from another version lacks required fields
        return None


@dataclass
class ChatMessage:
    """One message; an assistant reply carries its reasoning, stats and finish reason.

    Tool calling uses Hugging Face's message convention: an assistant reply
    carries ``tool_calls`` (``[{"type": "function", "id": ..., "function":
    {"name": ..., "arguments": {...}}}]``), a ``tool`` message the
    ``tool_call_id`` and tool ``name`` it answers.
    """

    role: str
    content: str
    reasoning: str = ""
    stats: TurnStats | None = None
    finish_reason: str | None = None
    #: for a reply: the prompt it answered, as sent (see app.conversation.context_breakdown); None when loaded
    record: PromptRecord | None = field(default=None, compare=False, repr=False)
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    #: the message's row in the history database, once stored (how a branch switch is saved)
    store_id: int | None = field(default=None, compare=False, repr=False)
    #: a reply's start written by the user (/reply); ``content`` begins with it
    opening: str = ""
    #: a reply's ids as generated (its opening's ids first): what /continue resumes from
    reply_ids: tuple[int, ...] | None = field(default=None, compare=False, repr=False)
    #: kept in the prompt whatever the compaction policy (/pin)
    pinned: bool = field(default=False, compare=False, repr=False)


@dataclass
class ReplyEvent:
    """What a turn yields: ``notice``, ``reasoning``, ``content``, ``error``, then ``done`` last
    (``stats``: the turn's :class:`TurnStats`; ``data``: its :class:`TurnOutcome`).

    The tool loop (:mod:`app.tools.loop`) adds ``tool_call_delta`` (call text as it is
    generated), ``tool_call`` and ``tool_result`` (``data``: the call / its outcome); the
    TUI's tool wiring (:mod:`app.tui.tools`) adds ``tool_message`` (``data``: a message the
    loop put into the conversation, for the history to store in order).
    """

    kind: str
    text: str = ""
    stats: TurnStats | None = None
    data: Any = None


#: what a turn came to (:class:`TurnOutcome`'s ``kind``)
ANSWERED, REFUSED, STOPPED, FAILED = "answered", "refused", "stopped", "failed"


@dataclass(frozen=True)
class TurnOutcome:
    """How a turn ended, said once by the turn itself (its ``done`` event carries it, its generator
    returns it, and the session keeps it as ``last_outcome``):

    * ``answered``: a reply was committed (it stopped on its own or at ``max_tokens``);
    * ``refused``: nothing was sent and the conversation is as it was (``reason``: why);
    * ``stopped``: cancelled; the partial reply was committed;
    * ``failed``: the backend failed; the partial reply was committed (``reason``: the error).

    Callers ask this instead of guessing from the message list (a refusal leaves it as it was,
    but so does nothing else reliably: a continued reply grows the same last message)."""

    kind: str
    reason: str = ""

    @property
    def refused(self) -> bool:
        """Nothing was sent: the conversation is exactly as before the turn."""
        return self.kind == REFUSED

    @classmethod
    def after(cls, finish_reason: str | None, error: str | None = None) -> TurnOutcome:
        """The outcome of a turn that generated and committed a reply ending with ``finish_reason``."""
        if finish_reason == "cancelled":
            return cls(STOPPED)
        if finish_reason == "error" or error:  # an engine's error, or a reply it cut short (a server's cap)
            return cls(FAILED, error or "")
        return cls(ANSWERED)


def merge_stats(first: TurnStats, second: TurnStats) -> TurnStats:
    """The stats of a reply generated in parts (/continue): sums of the counts, each part kept.

    ``prompt_tokens``, ``new_prompt_tokens``, ``opening_tokens`` and ``ttft_s`` are the first part's:
    the prompt the reply answered (``tokchat render --ids`` of the messages before it) and how much of
    it was evaluated, so "new" never exceeds "total".  What a later part evaluated again to go on (the
    reply's own ids, or more after a branch switch) stays in its part (``parts``) and is shown apart.
    The speed is all generated ids over all generation time; the rest is the last part's.
    """
    parts = list(first.parts or [part_of(first)]) + [part_of(second)]

    def gen_time(p: dict[str, Any]) -> float:
        return (p["completion_tokens"] - 1) / p["tokens_per_s"] if p["tokens_per_s"] > 0 else 0.0

    spent = sum(gen_time(p) for p in parts)
    steps = sum(max(p["completion_tokens"] - 1, 0) for p in parts if p["tokens_per_s"] > 0)
    return replace(
        second, prompt_tokens=first.prompt_tokens, opening_tokens=first.opening_tokens, ttft_s=first.ttft_s,
        new_prompt_tokens=parts[0]["new_prompt_tokens"],
        completion_tokens=sum(p["completion_tokens"] for p in parts),
        reasoning_tokens=sum(p["reasoning_tokens"] for p in parts),
        forced_close_tokens=sum(p.get("forced_close_tokens", 0) for p in parts),
        drafted_tokens=sum(p.get("drafted_tokens", 0) for p in parts),
        accepted_tokens=sum(p.get("accepted_tokens", 0) for p in parts),
        tool_call_tokens=sum(p["tool_call_tokens"] for p in parts),
        tokens_per_s=steps / spent if spent > 0 else 0.0,
        reasoning_cut=any(p["reasoning_cut"] for p in parts), verified=all(p["verified"] for p in parts),
        parts=parts)



def part_of(stats: TurnStats) -> dict[str, Any]:
    """One part of a continued reply, as :attr:`TurnStats.parts` keeps it."""
    part = stats_dict(stats)
    part.pop("parts", None)
    return part


def template_message(message: ChatMessage) -> dict[str, Any]:
    """A message as the template sees it: role and content, plus the tool keys it has."""
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    tool = {"tool_calls": message.tool_calls, "tool_call_id": message.tool_call_id, "name": message.name}
    out.update({key: value for key, value in tool.items() if value})
    return out
