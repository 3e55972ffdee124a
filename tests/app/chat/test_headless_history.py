"""What a headless run stores (issue 34, items 1 and 2): a refused message stores nothing, and a
``--resume`` builds on the leaf it loaded, never on another run's turn in progress.

Real parts throughout: ``python -m app`` processes with their own data and config folders, the
real SQLite history they write (read back with ``tokchat export`` and :class:`ChatStore`),
SmolLM2 through the local llama.cpp engine, and a real ``llama-server`` for the remote path.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.process_env import child_env

from app.conversation.session import ChatMessage
from app.history.store import ChatStore
from support.headless_runs import db_path, exported, ROOT, tokchat  # noqa: E402

#: SmolLM2's prompt with its default system prompt is about 40 tokens: 200 words never fit a context of 100
TOO_LONG = "word " * 200

pytestmark = pytest.mark.slow


def first_turn(env: dict[str, str], *model: str) -> None:
    done = tokchat(env, *model, "--prompt", "Say hi", "--max-tokens", "4", "--temperature", "0")
    assert done.returncode == 0, done.stderr


# -- item 1: a refused message stores nothing ----------------------------------------------------------


def test_a_refused_message_after_resume_stores_nothing(smollm_path, tmp_path):
    env = child_env(tmp_path)
    model = ("-m", str(smollm_path), "--ctx", "100")
    first_turn(env, *model)
    before = exported(env, 1)
    done = tokchat(env, *model, "--resume", "1", "--prompt", TOO_LONG, "--max-tokens", "4", "--temperature", "0")
    assert done.returncode == 2 and done.stdout == ""
    assert "message too long" in done.stderr
    after = exported(env, 1)
    # no new user message, no reply copied from the one before, no branch: the conversation is unchanged
    assert [(m["role"], m["content"]) for m in after["messages"]] == \
        [(m["role"], m["content"]) for m in before["messages"]]
    assert len(after["messages"]) == 2 and not after.get("branches")
    with ChatStore(db_path(tmp_path)) as store:
        conv = store.load(1)
        assert len(conv.messages) == 2 and conv.branches == []


def test_a_refused_stdin_prompt_starts_no_conversation(smollm_path, tmp_path):
    env = child_env(tmp_path)
    done = tokchat(env, "-m", str(smollm_path), "--ctx", "100", "--max-tokens", "4", stdin=TOO_LONG * 20)
    assert done.returncode == 2 and "message too long" in done.stderr
    with ChatStore(db_path(tmp_path)) as store:
        assert store.list_conversations() == []  # no orphan one-message conversation


def test_a_refused_message_through_a_server_stores_nothing(smollm_path, tmp_path):
    from support.remote_servers import LlamaServer

    server = LlamaServer(smollm_path, tmp_path).start()  # a context of 512
    try:
        env = child_env(tmp_path)
        remote = ("--server", server.url, "-m", str(smollm_path))
        first_turn(env, *remote)
        done = tokchat(env, *remote, "--resume", "1", "--prompt", "word " * 800, "--max-tokens", "4")
        assert done.returncode == 2 and "message too long" in done.stderr, done.stderr
    finally:
        server.stop()
    with ChatStore(db_path(tmp_path)) as store:
        conv = store.load(1)
        assert [m.role for m in conv.messages] == ["user", "assistant"] and conv.branches == []


# -- item 2: a resume extends the leaf it loaded ----------------------------------------------------


@pytest.mark.parametrize("reply_started", [True, False], ids=["reply-streaming", "reply-not-started"])
def test_a_resume_leaves_another_runs_turn_in_progress_alone(smollm_path, tmp_path, reply_started):
    """Run B is this test process (alive, so its reply row stays "in progress"): it has written its
    user message and perhaps begun its reply when run A, a real tokchat, resumes the conversation.
    A must answer after the last finished reply, as B's sibling, and see nothing of B's turn."""
    env = child_env(tmp_path)
    model = ("-m", str(smollm_path), "--ctx", "512")
    first_turn(env, *model)
    with ChatStore(db_path(tmp_path)) as store:
        say_hi, reply = store.load(1).messages
        b_user = store.add_message(1, ChatMessage("user", "Branch B"), parent_id=reply.id)
        b_reply = store.begin_reply(1, parent_id=b_user) if reply_started else None
        if b_reply is not None:
            store.update_reply(b_reply, "B is answ")
    done = tokchat(env, *model, "--resume", "1", "--prompt", "Branch A", "--max-tokens", "4", "--temperature", "0",
                   "--stats")
    assert done.returncode == 0, done.stderr
    with ChatStore(db_path(tmp_path)) as store:
        if b_reply is not None:
            store.finish_message(b_reply, ChatMessage("assistant", "B is answering.", finish_reason="stop"))
        conv = store.load(1)
    every = {m.id: m for m in conv.messages + conv.branches}
    a_user = next(m for m in every.values() if m.content == "Branch A")
    a_reply = next(m for m in every.values() if m.parent_id == a_user.id)
    assert a_user.parent_id == reply.id == every[b_user].parent_id  # two siblings after the first reply
    assert a_reply.role == "assistant" and a_reply.finish_reason in ("stop", "length")
    assert [m.content for m in conv.messages] == ["Say hi", reply.content, "Branch A", a_reply.content]
    if b_reply is not None:
        assert every[b_reply].parent_id == b_user and every[b_reply].content == "B is answering."
    assert "no finished reply (another tokchat may be writing it)" in done.stderr
    # the oracle: the same two turns on a history nobody else writes; A's prompt and reply are exactly those
    oracle = child_env(tmp_path / "oracle")
    first_turn(oracle, *model)
    alone = tokchat(oracle, *model, "--resume", "1", "--prompt", "Branch A", "--max-tokens", "4", "--temperature",
                    "0", "--stats")
    assert alone.returncode == 0, alone.stderr
    stats, alone_stats = (json.loads(run.stderr.strip().splitlines()[-1]) for run in (done, alone))
    assert stats["prompt_tokens"] == alone_stats["prompt_tokens"] and done.stdout == alone.stdout


def test_two_parallel_resumes_never_interleave(smollm_path, tmp_path):
    """Two real runs resume one conversation at once.  Whichever order the machine gives them, each
    message follows its own turn: a user message follows a reply, a reply follows its own run's
    prompt, and a run that loaded the other's turn only did so once that turn was finished."""
    env = child_env(tmp_path)
    model = ("-m", str(smollm_path), "--ctx", "512")
    first_turn(env, *model)
    runs = [subprocess.Popen([sys.executable, "-m", "app", *model, "--resume", "1", "--prompt", f"Branch {name}",
                              "--max-tokens", "8", "--temperature", "0"], cwd=ROOT, env=env, text=True,
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for name in "AB"]
    for run in runs:
        out, err = run.communicate(timeout=600)
        assert run.returncode == 0, err
    with ChatStore(db_path(tmp_path)) as store:
        conv = store.load(1)
    every = {m.id: m for m in conv.messages + conv.branches}
    assert len(every) == 6
    for m in every.values():
        parent = every.get(m.parent_id)
        if m.role == "user":
            assert parent is None or (parent.role == "assistant" and parent.finish_reason is not None), m.content
        else:
            assert parent is not None and parent.role == "user" and parent.content.startswith(("Say", "Branch"))
    for name in "AB":
        prompt = next(m for m in every.values() if m.content == f"Branch {name}")
        assert sum(1 for m in every.values() if m.parent_id == prompt.id) == 1  # its own reply, once
