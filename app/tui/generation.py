"""Hand a reply's events from the generation thread to the UI, coalesced.

The worker thread iterates the session's :class:`ReplyEvent` stream and
pushes every event into an :class:`EventBuffer`.  Only the push that finds
the buffer empty wakes the UI (one message), and the UI drains *everything*
queued since.  So at 20 tok/s each token is shown as it comes, and at
20,000 tok/s the UI takes hundreds per refresh instead of falling behind
one message per token.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

if TYPE_CHECKING:
    from app.conversation.messages import ReplyEvent


@dataclass
class Drained:
    """Everything the UI takes from the buffer in one go, in the order it must apply it.

    ``chunks`` is a list of ``(kind, payload)`` in arrival order: streamed text
    (``reasoning`` | ``content`` | ``tool_call_delta``, consecutive events of
    one kind joined; each ``notice`` apart) as a string, and the tool loop's
    ``tool_call`` | ``tool_result`` | ``tool_message`` as the event itself;
    ``done`` is the final event (``done`` or ``error``) if it has arrived;
    ``finished`` says the worker thread has ended.
    """

    chunks: list[tuple[str, str | ReplyEvent]] = field(default_factory=list)
    text_events: int = 0
    done: ReplyEvent | None = None
    errors: list[str] = field(default_factory=list)
    finished: bool = False


class EventBuffer:
    """Thread-safe queue of reply events; ``wake`` is called when it goes from empty to non-empty."""

    def __init__(self, wake: Callable[[], object]) -> None:
        self._wake = wake
        self._lock = threading.Lock()
        self._events: list[ReplyEvent] = []
        self._finished = False

    def push(self, event: ReplyEvent) -> None:
        with self._lock:
            was_empty = not self._events and not self._finished
            self._events.append(event)
        if was_empty:
            self._wake()

    def finish(self) -> None:
        """The worker is done: nothing more will be pushed."""
        with self._lock:
            was_empty = not self._events
            self._finished = True
        if was_empty:
            self._wake()

    def drain(self) -> Drained:
        with self._lock:
            events, self._events = self._events, []
            finished = self._finished
        out = Drained(finished=finished)
        for event in events:
            kind = event.kind
            if kind in ("reasoning", "content"):
                out.text_events += 1
            if kind in ("reasoning", "content", "notice", "tool_call_delta"):
                # streamed text (a tool call's as it is generated too) joins its predecessor of the same kind
                last = out.chunks[-1] if out.chunks and kind != "notice" else None
                if last is not None and last[0] == kind and isinstance(last[1], str):
                    out.chunks[-1] = (kind, last[1] + event.text)
                else:
                    out.chunks.append((kind, event.text))
            elif kind in ("tool_call", "tool_result", "tool_message", "summary"):
                out.chunks.append((kind, event))  # the event itself: its data is the call / outcome
            elif kind == "error":
                out.errors.append(event.text)
                if event.stats is not None:
                    out.done = event
            elif kind == "done":
                out.done = event
        return out


def pump(events: Iterable[ReplyEvent], buffer: EventBuffer, is_cancelled: Callable[[], bool],
         cancel: Callable[[], None], error_event: Callable[[BaseException], ReplyEvent]) -> None:
    """Run in the worker thread: move ``events`` into ``buffer`` until the stream ends.

    A cancelled worker asks the session to stop (``cancel``) and keeps
    draining, so the session can finish its bookkeeping and yield ``done``
    with the partial reply.  An exception becomes one error event.
    """
    asked = False
    iterator: Iterator[ReplyEvent] = iter(events)
    try:
        for event in iterator:
            buffer.push(event)
            if event.kind == "done":
                continue  # the turn is over: a late cancel must not reach the session's next turn
            if not asked and is_cancelled():
                asked = True
                cancel()
    except Exception as exc:  # the UI boundary for generation: shown, never swallowed
        buffer.push(error_event(exc))
    finally:
        buffer.finish()
