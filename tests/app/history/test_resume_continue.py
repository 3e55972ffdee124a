"""Headless ``--resume ID --continue`` and the history keeping continued parts, openings and forks.

Real parts: SmolLM2 through the real llama.cpp engine, the real SQLite
history, the real export/import.  The oracle for a continued reply is the
same reply generated in one go.
"""
from __future__ import annotations

import io
import json
import sqlite3

import pytest

from app.history.export import conversation_from_json, to_json, to_markdown
from app.chat.headless import run_headless
from app.settings.options import ChatOptions
from app.history.recorder import HistoryRecorder
from app.conversation.session import ChatMessage, TurnStats
from app.history.store import _MIGRATIONS, SCHEMA_VERSION, ChatStore
from backends import SamplingParams

QUESTION = "Write a long story about a dragon who learns to bake bread."


def _options(model, **kwargs) -> ChatOptions:
    sampling = SamplingParams(temperature=0.0, max_tokens=kwargs.pop("max_tokens"))
    return ChatOptions(model=str(model), ctx=1024, backend="cpu", sampling=sampling, system="You are a storyteller.",
                       **kwargs)


def _run(options, db) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    recorder = HistoryRecorder(store_path=db, notify=lambda n: err.write(n + "\n"))
    try:
        status = run_headless(options, recorder=recorder, out=out, err=err)
    finally:
        recorder.close()
    return status, out.getvalue(), err.getvalue()


def test_resume_continue_equals_one_long_reply_and_is_stored_whole(smollm_path, tmp_path):
    db = tmp_path / "history.sqlite3"
    status, one_go, _ = _run(_options(smollm_path, prompt=QUESTION, max_tokens=48), db)
    assert status == 0
    status, first, _ = _run(_options(smollm_path, prompt=QUESTION, max_tokens=16), db)
    assert status == 0
    with ChatStore(db) as store:
        conv_id = store.last_conversation_id()
        cut = store.load(conv_id).messages[-1]
        assert cut.finish_reason == "length" and len(cut.reply_ids) == 16
    status, more, err = _run(_options(smollm_path, resume=conv_id, continue_reply=True, max_tokens=32,
                                      stats=True), db)
    assert status == 0, err
    # stdout: only the continuation, which completes the first part into the one-go reply
    assert (first.rstrip("\n") + more.rstrip("\n")) == one_go.rstrip("\n")
    stats = json.loads(err.strip().splitlines()[-1])
    assert stats["completion_tokens"] == 48 and [p["completion_tokens"] for p in stats["parts"]] == [16, 32]
    with ChatStore(db) as store:
        whole = store.load(store.list_conversations()[-1].id).messages[-1]
        conv = store.load(conv_id)
    # the same stored message grew: no new row, ids and text as in one go, both parts' stats kept
    assert [m.role for m in conv.messages] == ["user", "assistant"]
    reply = conv.messages[-1]
    assert reply.id == cut.id and reply.reply_ids == whole.reply_ids and reply.content == whole.content
    assert reply.finish_reason == "length" and [p["completion_tokens"] for p in reply.stats["parts"]] == [16, 32]


def test_continue_refuses_a_reply_that_stopped_and_changes_nothing(smollm_path, tmp_path):
    db = tmp_path / "history.sqlite3"
    with ChatStore(db) as store:
        conv_id = store.new_conversation(str(smollm_path), "chatml")
        store.add_message(conv_id, ChatMessage("user", "Hi"))
        store.add_message(conv_id, ChatMessage("assistant", "Hello!", finish_reason="stop"))
    status, out, err = _run(_options(smollm_path, resume=conv_id, continue_reply=True, max_tokens=8), db)
    assert status == 2 and out == ""
    assert err.strip().splitlines()[-1].startswith("tokchat: --continue: the last reply ended on its own")
    with ChatStore(db) as store:
        assert [m.content for m in store.load(conv_id).messages] == ["Hi", "Hello!"]


def _stored_chat(store: ChatStore) -> int:
    conv_id = store.new_conversation("m.gguf", "chatml", "Be brief.")
    store.add_message(conv_id, ChatMessage("user", "Name a cat."))
    stats = TurnStats(prompt_tokens=20, completion_tokens=3, opening_tokens=2, model="m",
                      parts=[{"completion_tokens": 1}, {"completion_tokens": 2}])
    store.add_message(conv_id, ChatMessage("assistant", "It is Tom.", stats=stats, finish_reason="stop",
                                           opening="It is", reply_ids=(40, 41, 42, 43, 2)))
    store.add_message(conv_id, ChatMessage("user", "Another?"))
    store.add_message(conv_id, ChatMessage("assistant", "Felix.", finish_reason="stop"))
    return conv_id


def test_openings_ids_and_fork_links_survive_store_export_and_import(tmp_path):
    with ChatStore(tmp_path / "a.sqlite3") as store:
        conv_id = _stored_chat(store)
        conv = store.load(conv_id)
        reply = conv.messages[1]
        assert (reply.opening, reply.reply_ids) == ("It is", [40, 41, 42, 43, 2])
        fork_id = store.fork(conv_id, reply.id)
        fork = store.load(fork_id)
        assert [m.content for m in fork.messages] == ["Name a cat.", "It is Tom."]
        assert (fork.info.forked_from, fork.info.forked_at) == (conv_id, reply.id)
        assert fork.messages[1].reply_ids == [40, 41, 42, 43, 2] and fork.messages[1].opening == "It is"
        assert fork.messages[1].stats["parts"] == [{"completion_tokens": 1}, {"completion_tokens": 2}]
        # the source is untouched, and the fork goes on on its own
        store.add_message(fork_id, ChatMessage("user", "Dogs?"))
        assert len(store.load(conv_id).messages) == 4
        text = to_json(store.load(fork_id))
    data = json.loads(text)
    assert data["forked_from"] == conv_id and data["messages"][1]["opening"] == "It is"
    markdown = to_markdown(fork)
    assert f"- Forked from conversation {conv_id} at message {reply.id}" in markdown
    assert "*The start of this reply was written by the user: “It is”*" in markdown
    assert "2 parts: 1 + 2" in markdown
    back = conversation_from_json(text)
    with ChatStore(tmp_path / "b.sqlite3") as other:
        new_id = other.import_conversation(back.info, back.messages, back.branches)
        again = other.load(new_id)
    assert [(m.content, m.opening, m.reply_ids) for m in again.messages] == \
        [(m.content, m.opening, m.reply_ids) for m in fork.messages] + [("Dogs?", "", None)]
    # the link names the rows of the database the fork was made in, as exported
    assert (again.info.forked_from, again.info.forked_at) == (conv_id, reply.id)
    # a stored message comes back as the session's message, opening and ids included
    chat = again.messages[1].to_chat_message()
    assert (chat.opening, chat.reply_ids, chat.stats.opening_tokens) == ("It is", (40, 41, 42, 43, 2), 2)


def test_an_import_with_bad_reply_ids_is_one_clear_error(tmp_path):
    with ChatStore(tmp_path / "a.sqlite3") as store:
        data = json.loads(to_json(store.load(_stored_chat(store))))
    data["messages"][1]["reply_ids"] = [1, "two"]
    with pytest.raises(Exception, match="reply_ids' must be a list of token ids"):
        conversation_from_json(json.dumps(data))


def test_a_schema_4_database_upgrades_and_keeps_its_chats(tmp_path):
    path = tmp_path / "history.sqlite3"
    conn = sqlite3.connect(path)
    for step in _MIGRATIONS[:4]:
        for statement in step:
            conn.execute(statement)
    conn.execute("INSERT INTO conversations (title, created_at, updated_at) VALUES ('old', 1, 2)")
    conn.execute("INSERT INTO messages (conversation_id, role, content, created_at) VALUES (1, 'user', 'Hi', 1)")
    conn.execute("INSERT INTO messages (conversation_id, role, content, finish_reason, created_at, parent_id) "
                 "VALUES (1, 'assistant', 'Hello', 'length', 2, 1)")
    conn.execute("UPDATE conversations SET tip_id = 2")
    conn.execute("PRAGMA user_version = 4")
    conn.commit()
    conn.close()
    with ChatStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION == 5
        conv = store.load(1)
        assert [(m.content, m.opening, m.reply_ids) for m in conv.messages] == [("Hi", "", None), ("Hello", "", None)]
        assert conv.info.forked_from is None
    # and the read-only path (export, --list) reads the upgraded file
    with ChatStore(path, readonly=True) as store:
        assert [m.content for m in store.load(1).messages] == ["Hi", "Hello"]


@pytest.mark.parametrize("argv, says", [
    (["--continue"], "--continue continues a stored reply: give --resume ID"),
    (["--resume", "3", "--continue", "--prompt", "x"], "--continue continues a stored reply"),
    (["--reasoning-budget", "-5", "--prompt", "x"], "must be at least -1"),
])
def test_bad_steering_flags_are_one_line_and_exit_2(argv, says, capsys, tmp_path, monkeypatch):
    from app.cli import main

    monkeypatch.setenv("TOKCHAT_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TOKCHAT_CONFIG_DIR", str(tmp_path))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]
    assert not (tmp_path / "history.sqlite3").exists()


def test_resume_of_a_missing_conversation_is_one_line(smollm_path, tmp_path):
    db = tmp_path / "history.sqlite3"
    with ChatStore(db):
        pass
    status, out, err = _run(_options(smollm_path, resume=99, continue_reply=True, max_tokens=8), db)
    assert status == 2 and out == ""
    assert err.strip().splitlines()[-1].startswith("tokchat: --resume 99: no conversation 99 in the history")


def test_headless_applies_what_the_tui_remembered_for_the_model_unless_a_flag_says(smollm_path, tmp_path,
                                                                                    monkeypatch):
    from app.settings.model_memory import remember
    from backends.scripted import ScriptedBackend
    from tokenizer import load_tokenizer

    monkeypatch.setenv("TOKCHAT_CONFIG_DIR", str(tmp_path))
    remember("scripted-model", thinking=False, reasoning_budget=5)
    tok = load_tokenizer(smollm_path)
    prompts = []

    def backend():
        scripted = ScriptedBackend(lambda p: (prompts.append(tok.decode(p)), tok.encode("Four.") + [tok.eos_id])[1])
        scripted.info.model_name = "scripted-model"
        return scripted

    options = _options(smollm_path, prompt="2+2?", max_tokens=16, template="chatml-think", history=False)
    out, err = io.StringIO(), io.StringIO()
    assert run_headless(options, backend=backend(), out=out, err=err) == 0
    assert prompts[-1].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    flagged = _options(smollm_path, prompt="2+2?", max_tokens=16, template="chatml-think", history=False, think=True)
    assert run_headless(flagged, backend=backend(), out=out, err=err) == 0
    assert prompts[-1].endswith("<|im_start|>assistant\n")
