"""``tokchat export`` of a reply that is not finished (issue 44, C9): read while its writer is alive, and after
a SIGKILL, before any writer has opened the database again.

The writer is a real process writing through the real recorder (as a chat does: the user's message
committed, the reply's first words saved); the export is a real ``tokchat export`` process, which opens
the history read-only.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from support.process_env import child_env

#: a chat: a new conversation in database argv[1], the question committed, the reply's first words saved;
#: then it waits on stdin
WRITER = r"""
import sys
from app.conversation.messages import ChatMessage, ReplyEvent
from app.history.recorder import HistoryRecorder

recorder = HistoryRecorder(store_path=sys.argv[1])
recorder.on_user(ChatMessage(role="user", content="Tell me a story", reasoning="", stats=None, finish_reason=None))
recorder.on_event(ReplyEvent(kind="content", text="Once upon"))
print("saved", flush=True)
sys.stdin.readline()
"""


def export(env: dict, fmt: str) -> str:
    run = subprocess.run([sys.executable, "-m", "app", "export", "1", "--format", fmt], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_an_unfinished_reply_exports_as_being_written_and_after_a_sigkill_as_interrupted(tmp_path):
    env = child_env(tmp_path)
    db = Path(env["TOKCHAT_DATA_DIR"]) / "history.sqlite3"
    db.parent.mkdir(parents=True)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], text=True, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, env=env)
    try:
        assert writer.stdout.readline().strip() == "saved"
        live = export(env, "md")
        assert "Once upon" in live and "being written, unfinished" in live, live
        assert json.loads(export(env, "json"))["messages"][-1]["finish_reason"] is None
        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(30)
    assert writer.returncode == -signal.SIGKILL
    # nobody has opened the file for writing since: the export alone says the reply was cut
    cut = export(env, "md")
    assert "Once upon" in cut and "interrupted" in cut and "being written" not in cut, cut
    reply = json.loads(export(env, "json"))["messages"][-1]
    assert (reply["content"], reply["finish_reason"]) == ("Once upon", "interrupted")
