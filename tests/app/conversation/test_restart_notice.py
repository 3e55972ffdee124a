"""An engine that dies while it evaluates the prompt is started again, and the same turn says so.

The notice is a fact of that reply's generation (``GenerationStats.notice``), set when the
engine process is found dead mid-prompt, after ``generate`` returned: the session says it
when it learns it, before the reply's first text.  Real SmolLM2 in the real engine process,
killed by a real SIGSEGV.
"""
from __future__ import annotations

import os
import signal
import threading
import time

from app.conversation.session import ChatSession
from backends.base import LoadOptions, SamplingParams
from backends.engine_client import HostedBackend
from templates import resolve_template
from tokenizer import load_tokenizer


def test_an_engine_killed_mid_prompt_is_said_once_in_the_same_turn(smollm_path, tmp_path):
    tokenizer = load_tokenizer(smollm_path)
    template, _ = resolve_template("auto", tokenizer)
    backend = HostedBackend("llama.cpp")
    backend.load(smollm_path, LoadOptions(n_ctx=4096, log_path=tmp_path / "engine.log"))
    session = ChatSession(tokenizer, template, backend=backend, context_size=4096,
                          sampling=SamplingParams(temperature=0, max_tokens=8))
    pid = backend.pid
    killed = threading.Event()

    def kill_in_the_prompt() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            stats = session.generation_stats
            if stats is not None and stats.progress is not None and stats.progress.done < stats.progress.total:
                os.kill(pid, signal.SIGSEGV)
                killed.set()
                return
            time.sleep(0.002)

    killer = threading.Thread(target=kill_in_the_prompt)
    killer.start()
    try:
        events = list(session.send("Summarise these notes. " + "The sea is wide and deep. " * 120))
        killer.join()
        assert killed.is_set(), "the prompt was evaluated before the engine could be killed in it"
        kinds = [e.kind for e in events]
        notices = [e.text for e in events if e.kind == "notice"]
        assert len(notices) == 1 and "died of SIGSEGV" in notices[0] and "while evaluating the prompt" in notices[0]
        assert kinds.index("notice") < kinds.index("content")  # said before the reply's text
        stats = events[-1].stats
        assert stats.finish_reason in ("stop", "length") and stats.completion_tokens > 0
        assert backend.pid not in (None, pid)
        # the next turn's generation is the fresh engine's own: nothing to say
        assert [e for e in session.send("Thanks.") if e.kind == "notice"] == []
    finally:
        backend.close()
