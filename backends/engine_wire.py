"""The engine pipe's messages, both ways, as typed values: the one definition both ends use.

:mod:`backends.engine_client` (the chat's side) writes requests and reads answers;
:mod:`backends.engine_process` (the engine's process) reads requests and writes
answers.  Each message is a frozen dataclass; on the pipe it is one JSON
line ``{"type": "<ClassName>", ...fields}``, written whole under a lock by a
:class:`LineWriter`, so a reader tells messages apart by their type, never by
which key happens to be present.

Requests (chat -> engine): :class:`Load`, :class:`Generate`, :class:`Cancel`
(acted on at once by the engine's reader thread), :class:`Close`.
Answers (engine -> chat): :class:`Loaded` or :class:`LoadFailed` to a load;
to a generation, tagged with its job: :class:`Progress` while the prompt is
evaluated, :class:`Ids` for every generated id (with the evaluated-prompt
count and the draft counts current at that id, since the chat stops reading
at a stop id), then :class:`Done` (with the finish reason) or :class:`Failed`;
:class:`StateNote` before the first id when the state cache has something to say.
These are the fields of the engine's :class:`backends.base.GenerationStats`,
filled in again on the chat's side.  When the pipe closes, the chat's reader
puts :data:`backends.handoff.ENDED` in its queue, the end marker every id
hand-off uses: the one way an engine's death reaches the code waiting.
"""
from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field, fields
from typing import IO, Any, Union


#: the engine process's module, ``python -m ENGINE_PROCESS_MODULE``: the one name by which the chat
#: starts its engine (:mod:`backends.engine_client`) and tests recognise it among processes
ENGINE_PROCESS_MODULE = "backends.engine_process"


@dataclass(frozen=True)
class Load:
    engine: str
    device: str
    path: str
    #: LoadOptions as plain values (paths as strings, no model_meta)
    options: dict[str, Any]
    #: the header's scalar facts as the chat read them (backends.model_meta.header_facts), or None
    meta: dict[str, Any] | None = None


@dataclass(frozen=True)
class Generate:
    job: int
    prompt: list[int]
    sampling: dict[str, Any]
    stop: list[int]


@dataclass(frozen=True)
class Cancel:
    job: int


@dataclass(frozen=True)
class Close:
    pass


@dataclass(frozen=True)
class Loaded:
    #: BackendInfo's fields
    info: dict[str, Any]


@dataclass(frozen=True)
class LoadFailed:
    error: str


@dataclass(frozen=True)
class Progress:
    job: int
    done: int
    total: int


@dataclass(frozen=True)
class Ids:
    job: int
    ids: list[int]
    #: prompt ids the engine evaluated for this reply (the rest came from its cache)
    evaluated: int
    #: (drafted, accepted) so far when the engine speculates, else None
    draft: tuple[int, int] | None = None
    #: the constraint's mask time so far (GenerationStats.mask_ms); 0 without one
    mask_ms: float = 0.0


@dataclass(frozen=True)
class Done:
    job: int
    evaluated: int
    draft: tuple[int, int] | None = None
    #: the engine's GenerationStats.finish_reason ("" if it gave none)
    finish: str = ""
    mask_ms: float = 0.0


@dataclass(frozen=True)
class StateNote:
    """What the engine's state cache did for this job's prompt (GenerationStats.state), sent before its first id."""

    job: int
    note: str


@dataclass(frozen=True)
class Failed:
    job: int
    error: str


Request = Union[Load, Generate, Cancel, Close]
Answer = Union[Loaded, LoadFailed, Progress, Ids, Done, StateNote, Failed]
_TYPES: dict[str, type[Request | Answer]] = {
    cls.__name__: cls for cls in (Load, Generate, Cancel, Close, Loaded, LoadFailed, Progress, Ids, Done, StateNote, Failed)
}


class WireError(ValueError):
    """A line that is not one of the messages above."""


def encode(message: Request | Answer) -> bytes:
    return json.dumps({"type": type(message).__name__, **asdict(message)}, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes | str) -> Request | Answer:
    try:
        data = json.loads(line)
        cls = _TYPES[data.pop("type")]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise WireError(f"not an engine message: {line[:80]!r}") from exc
    names = {f.name for f in fields(cls)}
    if set(data) - names:
        raise WireError(f"{cls.__name__} has no field(s) {sorted(set(data) - names)}")
    if data.get("draft") is not None:
        data["draft"] = tuple(data["draft"])
    try:
        message: Request | Answer = cls(**data)
    except TypeError as exc:
        raise WireError(f"{cls.__name__}: {exc}") from exc
    return message


@dataclass
class LineWriter:
    """Writes whole messages to one stream under a lock (two threads of one end may write)."""

    stream: IO[bytes]
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def send(self, message: Request | Answer) -> None:
        data = encode(message)
        with self._lock:
            self.stream.write(data)
            self.stream.flush()
