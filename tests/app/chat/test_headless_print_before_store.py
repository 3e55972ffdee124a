"""Headless prints a reply's text before the history stores it, so a SIGKILL between the two leaves the stored
reply a prefix of what was printed (tests/hardening/test_sigkill_replies.py kills a real process there; this
pins the order that makes it hold, which a kill hits only by chance).

Real parts: SmolLM2 on the real llama.cpp engine, the real SQLite history through the real HistoryRecorder,
headless as the CLI runs it; the recorder is watched as each event reaches it.
"""
from __future__ import annotations

import io

from app.chat.headless import run_headless
from app.history.recorder import HistoryRecorder
from app.history.store import ChatStore
from app.settings.options import ChatOptions
from backends import SamplingParams


class WatchedRecorder(HistoryRecorder):
    """Notes, as each content event arrives, whether stdout already holds that text."""

    def __init__(self, out: io.StringIO, **kwargs) -> None:
        super().__init__(**kwargs)
        self.out = out
        self.printed_first: list[bool] = []

    def on_event(self, event) -> None:
        if event.kind == "content" and event.text:
            self.printed_first.append(self.out.getvalue().endswith(event.text))
        super().on_event(event)


def test_reply_text_is_printed_before_it_reaches_the_history(smollm_path, tmp_path):
    out, err = io.StringIO(), io.StringIO()
    db = tmp_path / "history.sqlite3"
    recorder = WatchedRecorder(out, store_path=db, notify=lambda n: err.write(n + "\n"))
    options = ChatOptions(model=str(smollm_path), ctx=1024, backend="cpu", speculative="off",
                          sampling=SamplingParams(temperature=0.0, max_tokens=24), prompt="Say hello.")
    try:
        status = run_headless(options, recorder=recorder, out=out, err=err)
    finally:
        recorder.close()
    assert status == 0, err.getvalue()
    assert len(recorder.printed_first) > 3 and all(recorder.printed_first), recorder.printed_first
    with ChatStore(db) as store:
        reply = store.load(store.last_conversation_id()).messages[-1]
    assert reply.content and out.getvalue().startswith(reply.content)
