"""Ids handed from the thread that makes them to the caller that reads them: one loop, one way to end.

Three places hand ids across a thread: the engine's worker thread (:mod:`backends.worker`), the
reader of the engine process's pipe (:mod:`backends.engine_client`) and the reader of a remote
server's stream (:mod:`backends.remote`).  Each producer puts its items in a queue and, last, one
end marker: :data:`ENDED` (nothing more comes) or :class:`Failed` (the error the producer met, to be
raised in the caller's thread).  The caller reads with :func:`drain`, which also stops at once when
the caller's cancel flag is set, so a cancel never waits for a busy producer.
"""
from __future__ import annotations

import queue
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from backends.timeouts import POLL_S


@dataclass(frozen=True)
class Ended:
    """The producer is done: nothing more comes after this."""


#: the one :class:`Ended` value producers put
ENDED = Ended()


@dataclass(frozen=True)
class Failed:
    """The producer met ``error``; nothing more comes, and the caller raises it in its own thread."""

    error: BaseException


def drain(items: "queue.Queue[object]", cancelled: Callable[[], bool],
          on_silence: Optional[Callable[[], None]] = None) -> Iterator[object]:
    """Yield the producer's items until :data:`ENDED` (return), :class:`Failed` (raise its error) or
    ``cancelled()`` (return at once, whatever the producer is doing).

    ``on_silence`` runs whenever nothing came for :data:`~backends.timeouts.POLL_S` (a remote turn
    checks its deadlines there and raises when one has passed).
    """
    while not cancelled():
        try:
            item = items.get(timeout=POLL_S)
        except queue.Empty:
            if on_silence is not None:
                on_silence()
            continue
        if isinstance(item, Ended):
            return
        if isinstance(item, Failed):
            raise item.error
        yield item
