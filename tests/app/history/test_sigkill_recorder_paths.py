"""A real SIGKILL while the recorder writes each kind of reply keeps what was saved, marked as cut (issue 44, C2).

The chat TUI saves a turn through the same recorder calls as these writers make (app/tui/history.py):
a first reply (``on_user``, then the reply's events), a regenerated one (``rewind`` to the user's message,
then a new reply beside the old), a continued one (``on_continue``, then its events), and a tool round's
answer (the call and its result committed as the tool loop commits them, then the answer's events).  Each writer is
a real process on a real SQLite file, killed with a real SIGKILL once its partial text is saved; the rows
are then read back read-only (nothing has marked the dead writer's reply since).
"""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from support.process_env import child_env

from app.history.store import ChatStore

#: argv: database, path ("first", "regenerate", "continue"); says "saved" once the reply being written is saved
WRITER = r"""
import sys
from app.conversation.messages import ChatMessage, ReplyEvent
from app.history.recorder import HistoryRecorder

db, path = sys.argv[1], sys.argv[2]
recorder = HistoryRecorder(store_path=db, progress_interval_s=0.0)
recorder.on_user(ChatMessage("user", "Tell me a story"))
if path == "tool":  # a tool round as the tool loop records it: the call, its result, then the answer streams
    call = '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    recorder.on_event(ReplyEvent(kind="content", text=call))
    recorder.on_reply(ChatMessage("assistant", call, finish_reason="tool_calls", tool_calls=[
        {"type": "function", "id": "call_0", "function": {"name": "get_time", "arguments": {}}}]))
    recorder.on_user(ChatMessage("tool", "12:00", tool_call_id="call_0", name="get_time"))
elif path != "first":
    first = ChatMessage("assistant", "Once upon a time", finish_reason="length")
    recorder.on_event(ReplyEvent(kind="content", text="Once upon a time"))
    first.store_id = recorder.on_reply(first)  # the row the caller's conversation keeps (Conversation.mark_stored)
    if path == "regenerate":  # what the TUI's Ctrl+R records: the next reply follows the user's message
        recorder.rewind(recorder.last_user_id)
    else:
        recorder.on_continue(first)
recorder.on_event(ReplyEvent(kind="content", text=" there was" if path == "continue" else "In a land"))
recorder.on_event(ReplyEvent(kind="content", text=" a dragon"))
print("saved", flush=True)
sys.stdin.readline()
"""


@pytest.mark.parametrize("path, shown, siblings", [
    ("first", "In a land a dragon", []),
    ("regenerate", "In a land a dragon", ["Once upon a time"]),
    ("continue", "Once upon a time there was a dragon", []),
    ("tool", "In a land a dragon", []),
])
def test_a_sigkill_keeps_the_saved_text_of_every_kind_of_reply_marked_interrupted(path, shown, siblings, tmp_path):
    db = tmp_path / "history.sqlite3"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db), path], text=True, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, env=child_env(tmp_path))
    try:
        assert writer.stdout.readline().strip() == "saved"
        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(30)
    assert writer.returncode == -signal.SIGKILL
    with ChatStore(db, readonly=True) as store:
        conversation = store.load(1)
    before = [("user", "Tell me a story", None)]
    if path == "tool":  # the committed call and its result stay as they were; the answer is cut
        before += [("assistant", '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>', "tool_calls"),
                   ("tool", "12:00", None)]
    assert [(m.role, m.content, m.finish_reason) for m in conversation.messages] == [
        *before, ("assistant", shown, "interrupted")]
    assert conversation.messages[-1].stats is None and conversation.messages[-1].reply_ids is None
    assert [m.content for m in conversation.branches] == siblings
