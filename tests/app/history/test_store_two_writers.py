"""Two tokchat processes writing turns into one stored conversation (issue 27, item 4).

Process A is this test; process B is a real second Python process on the
same SQLite file, driven step by step over a pipe so the two interleave as
two TUIs on one conversation do.  Each must extend its own branch: a user
message always follows a reply (or starts the conversation), a reply always
follows a user message, whatever the other process wrote in between.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from app.history.recorder import HistoryRecorder
from app.conversation.session import ChatMessage
from app.history.store import ChatStore

#: process B: one recorder; each line on stdin is a step, answered with "ok" once committed
WRITER = textwrap.dedent("""
    import sys
    from app.history.recorder import HistoryRecorder
    from app.conversation.session import ChatMessage

    recorder = HistoryRecorder(store_path=sys.argv[1])
    for line in sys.stdin:
        step, _, arg = line.rstrip("\\n").partition(" ")
        if step == "resume":
            recorder.resume(int(arg))
        elif step == "user":
            recorder.on_user(ChatMessage("user", arg))
        elif step == "reply":
            recorder.on_reply(ChatMessage("assistant", arg, finish_reason="stop"))
        print("ok", flush=True)
    recorder.close()
""")


class Writer:
    """Process B."""

    def __init__(self, db: Path) -> None:
        root = Path(__file__).resolve().parents[3]
        self.proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], cwd=root, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def step(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ok", "process B failed (its traceback is above)"

    def close(self) -> None:
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0


def reply(text: str) -> ChatMessage:
    return ChatMessage("assistant", text, finish_reason="stop")


def test_two_processes_on_one_conversation_each_extend_their_own_branch(tmp_path):
    db = tmp_path / "history.sqlite3"
    a = HistoryRecorder(store_path=db)
    a.on_user(ChatMessage("user", "q1"))
    a.on_reply(reply("r1"))
    conv = a.conversation_id
    b = Writer(db)
    try:
        b.step(f"resume {conv}")
        a.on_user(ChatMessage("user", "a2"))
        b.step("user b2")  # while A's reply is being generated
        a.on_event(type("Event", (), {"kind": "content", "text": "ra"})())  # A's reply starts streaming
        b.step("reply rb2")
        a.on_reply(reply("ra2"))
        a.on_user(ChatMessage("user", "a3"))
        a.on_reply(reply("ra3"))
    finally:
        b.close()
    a.close()
    with ChatStore(db) as store:
        conversation = store.load(conv)
    every = {m.id: m for m in conversation.messages + conversation.branches}
    for m in every.values():
        parent = every.get(m.parent_id)
        if m.role == "user":
            assert parent is None or parent.role == "assistant", (m.content, parent and parent.content)
        else:
            assert parent is not None and parent.role == "user", (m.content, parent and parent.content)
    # the branch written last is the one a resume shows; B's turn is its sibling, not mixed into it
    assert [m.content for m in conversation.messages] == ["q1", "r1", "a2", "ra2", "a3", "ra3"]
    assert sorted(m.content for m in conversation.branches) == ["b2", "rb2"]
    b2 = next(m for m in conversation.branches if m.content == "b2")
    assert every[b2.parent_id].content == "r1"
