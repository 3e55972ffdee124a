"""The hand-off from the generation thread to the UI: coalescing, order, cancellation, errors."""
from __future__ import annotations

import threading

from app.conversation.session import ReplyEvent, TurnStats
from app.tui.generation import EventBuffer, pump


def test_buffer_wakes_once_per_batch_and_joins_runs_of_one_kind():
    wakes = []
    buffer = EventBuffer(lambda: wakes.append(1))
    for event in [ReplyEvent("notice", "dropped"), ReplyEvent("reasoning", "a"), ReplyEvent("reasoning", "b"),
                  ReplyEvent("content", "c"), ReplyEvent("content", "d")]:
        buffer.push(event)
    assert len(wakes) == 1
    drained = buffer.drain()
    assert drained.chunks == [("notice", "dropped"), ("reasoning", "ab"), ("content", "cd")]
    assert drained.text_events == 4 and drained.done is None and not drained.finished
    buffer.push(ReplyEvent("content", "e"))
    assert len(wakes) == 2


def test_done_error_and_finish_are_reported():
    buffer = EventBuffer(lambda: None)
    stats = TurnStats(finish_reason="error")
    buffer.push(ReplyEvent("error", "engine died"))
    buffer.push(ReplyEvent("done", stats=stats))
    buffer.finish()
    drained = buffer.drain()
    assert drained.errors == ["engine died"] and drained.done.stats is stats and drained.finished


def test_pump_asks_the_session_to_stop_once_and_keeps_draining():
    cancelled = threading.Event()
    asked = []

    def events():
        for n in range(100):
            if n == 3:
                cancelled.set()
            if asked and n > 5:
                break
            yield ReplyEvent("content", str(n))
        yield ReplyEvent("done", stats=TurnStats(finish_reason="cancelled"))

    buffer = EventBuffer(lambda: None)
    pump(events(), buffer, cancelled.is_set, lambda: asked.append(1), lambda exc: ReplyEvent("error", str(exc)))
    drained = buffer.drain()
    assert asked == [1]
    assert drained.done.stats.finish_reason == "cancelled" and drained.finished
    assert drained.chunks == [("content", "012345")]


def test_pump_turns_an_exception_into_one_error_event():
    def events():
        yield ReplyEvent("content", "partial")
        raise ValueError("nothing to regenerate")

    buffer = EventBuffer(lambda: None)
    pump(events(), buffer, lambda: False, lambda: None, lambda exc: ReplyEvent("error", str(exc)))
    drained = buffer.drain()
    assert drained.chunks == [("content", "partial")]
    assert drained.errors == ["nothing to regenerate"] and drained.finished


def test_a_thread_and_the_reader_lose_nothing():
    got = []
    buffer = EventBuffer(lambda: None)

    def produce():
        for n in range(5000):
            buffer.push(ReplyEvent("content", f"{n},"))
        buffer.finish()

    thread = threading.Thread(target=produce)
    thread.start()
    while True:
        drained = buffer.drain()
        got.extend(text for _, text in drained.chunks)
        if drained.finished:
            break
    thread.join()
    assert "".join(got) == "".join(f"{n}," for n in range(5000))
