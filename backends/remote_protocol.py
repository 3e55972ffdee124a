"""What the remote backend and its per-server adapters share: the shapes, not the HTTP.

An adapter (:mod:`backends.remote_llamacpp`, :mod:`backends.remote_vllm`,
:mod:`backends.remote_sglang`) knows one server's JSON: how to ask for a
streamed completion of our prompt ids, how to read the ids and the server's
own counts out of each server-sent event, how to tokenize a probe text and
how to describe what the server serves.  It never opens a connection:
:mod:`backends.remote` does the HTTP, so every adapter is tested on plain
dicts (the response shapes documented in each server's sources).

Not handled here: connection handling, timeouts, the vocabulary check.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Collection, Protocol, Sequence, runtime_checkable

from backends.base import DraftCounts, GenerationStats, SamplingParams

#: the server kinds tokchat speaks to
SERVER_KINDS = ("llamacpp", "vllm", "sglang")


@dataclass
class ServerCounts:
    """What the server itself says about one turn (None: it did not say)."""

    prompt_tokens: int | None = None  # its count of our prompt ids
    cached_tokens: int | None = None  # of those, reused from its prompt cache
    evaluated_tokens: int | None = None  # of those, evaluated this turn
    completion_tokens: int | None = None  # ids it generated so far (the stop id included)
    finish: str | None = None  # stop | length | error, once it says the reply ended
    #: how the server said it ended, in its own terms (``stop_type "limit"``, ``finish_reason "abort"``), for the
    #: line that says a reply was cut
    said: str = ""
    tokens_per_s: float | None = None  # its own measured generation speed
    #: its latest prompt progress: (evaluated, to evaluate, seconds since it began), its cache excluded
    progress: tuple[int, int, float] | None = None
    #: its own speculation numbers (a server started with a drafter)
    draft: DraftCounts | None = None
    #: the slot that served the turn (llama-server's ``id_slot``)
    slot: int | None = None
    #: ids its cache held for the conversation when the reply ended (llama-server's ``tokens_cached``: prompt
    #: and reply but the reply's last id, which is never evaluated)
    held: int | None = None


@dataclass
class ServerInfo:
    """What a server says it is and serves, read at connect (``tokchat doctor --server``)."""

    kind: str
    url: str
    version: str = ""
    model: str = ""  # the model id or path the server serves
    context_size: int | None = None
    n_vocab: int | None = None
    slots: int | None = None
    notes: list[str] = field(default_factory=list)
    #: what identifies the served weights and build beyond the model's name (llama-server: the file's size,
    #: parameters and type, and the build): the key of what tokchat asks the server to save
    identity: str = ""


@dataclass
class Request:
    """One HTTP request an adapter wants sent: method, path, JSON body."""

    method: str
    path: str
    body: dict[str, Any] | None = None


class StreamParser(Protocol):
    """Reads one turn's server-sent events: ids out, the server's counts kept."""

    counts: ServerCounts
    #: ids whose exact value could not be recovered from the stream (the turn is unverified then)
    unrecovered: int

    def feed(self, event: dict[str, Any]) -> list[int]:
        """The new generated ids in one event's JSON (possibly none)."""
        ...

    def finished(self) -> bool:
        """True once the server said the reply ended."""
        ...


class Adapter(Protocol):
    """One server kind's protocol; see the module docstring."""

    kind: str
    #: what the server keeps of a conversation between requests and runs, as the stats' ``state`` says it once
    #: (``none (why)``); llama-server's is said only when it cannot save slots (backends.remote_slots)
    state_note: str

    def completion(
        self, prompt: Sequence[int], sampling: SamplingParams, stop_ids: Collection[int], seed: int
    ) -> Request: ...

    def parser(self, prompt: Sequence[int]) -> StreamParser: ...

    def tokenize(self, text: str) -> Request: ...

    def tokenized_ids(self, body: Any) -> list[int]: ...

    def info_requests(self) -> list[Request]: ...

    def server_info(self, url: str, replies: dict[str, Any]) -> ServerInfo: ...


@runtime_checkable
class RecoveringAdapter(Adapter, Protocol):
    """An adapter whose server can give back the ids its stream held back (llama-server's non-streamed
    ``return_tokens`` answer for the same seeded turn; see :mod:`backends.remote_llamacpp`)."""

    def recovery(self, prompt: Sequence[int], sampling: SamplingParams, seed: int, n: int) -> Request: ...

    def recovered_ids(self, body: Any) -> list[int]: ...


class ServerState(Protocol):
    """What tokchat does with what a server keeps between runs (:mod:`backends.remote_slots`): called by
    :class:`backends.remote.RemoteBackend` around every turn."""

    def prepare(self, prompt: list[int], request: Request, stats: GenerationStats) -> Request:
        """Before the turn: set ``stats.state``; the request to send (a restored slot pins it)."""
        ...

    def after(self, ids: list[int], counts: ServerCounts) -> None:
        """After a turn that did not fail: ``ids`` (prompt and reply) and the server's counts."""
        ...

    def flush(self, timeout: float) -> None:
        """Wait at most ``timeout`` seconds for what is under way (the chat closes)."""
        ...


class SaidOnce:
    """A server whose state tokchat does nothing with: ``note`` in the first turn's stats, then nothing."""

    def __init__(self, note: str) -> None:
        self.note = note

    def prepare(self, prompt: list[int], request: Request, stats: GenerationStats) -> Request:
        stats.state, self.note = self.note, ""
        return request

    def after(self, ids: list[int], counts: ServerCounts) -> None:
        """Nothing to keep."""

    def flush(self, timeout: float) -> None:
        """Nothing under way."""


def error_message(body: Any) -> str:
    """The human part of a server's JSON error body, whichever of the usual shapes it has.

    llama-server: ``{"error": {"code", "message", "type"}}`` (tools/server/server-common.cpp
    ``format_error_response``); vLLM: ``{"error": {"message", "type", "code"}}`` (its
    ``ErrorResponse``); SGLang and FastAPI: ``{"detail": ...}`` or ``{"message": ...}``.
    """
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str) and err:
            return err
        for key in ("message", "detail"):
            if body.get(key):
                return str(body[key])
    if isinstance(body, str) and body.strip():
        return body.strip().splitlines()[0][:200]
    return ""
