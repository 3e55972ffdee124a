"""Branches in the history database: the parent-link migration, siblings kept, the shown branch stored.

A real SQLite file in tmp_path.  The migration test writes a database the
way the previous schemas (user_version 2, and 3 with tool calls) did, then
opens it with this one.
"""
from __future__ import annotations

import json
import sqlite3

import pytest

from app.conversation.branches import from_links
from app.history.export import conversation_from_json, to_json, to_markdown
from app.conversation.session import ChatMessage
from app.history.store import _MIGRATIONS, SCHEMA_VERSION, ChatStore, StoreError


def _old_database(path, version: int) -> None:
    """A history file exactly as schema ``version`` wrote it: two turns, no parent links."""
    conn = sqlite3.connect(path)
    for step in _MIGRATIONS[:version]:
        for statement in step:
            conn.execute(statement)
    conn.execute("INSERT INTO conversations (title, created_at, updated_at) VALUES ('old chat', 1, 2)")
    for n, (role, text) in enumerate([("user", "Hi"), ("assistant", "Hello."), ("user", "2+2?"),
                                      ("assistant", "4")]):
        conn.execute("INSERT INTO messages (conversation_id, role, content, finish_reason, created_at) "
                     "VALUES (1, ?, ?, ?, ?)", (role, text, "stop" if role == "assistant" else None, n))
    conn.execute(f"PRAGMA user_version = {version}")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("version", [2, 3])
def test_an_older_database_is_upgraded_in_place(tmp_path, version):
    path = tmp_path / "history.sqlite3"
    _old_database(path, version)
    store = ChatStore(path)
    assert store.schema_version == SCHEMA_VERSION == 5  # 5: reply openings, ids and fork links
    conv = store.load(1)
    assert [m.content for m in conv.messages] == ["Hi", "Hello.", "2+2?", "4"] and conv.branches == []
    assert [m.parent_id for m in conv.messages] == [None, 1, 2, 3]
    # the upgraded chat goes on, and a regenerate keeps the old reply as a sibling
    store.truncate(1, 3)
    store.add_message(1, ChatMessage("assistant", "Four.", finish_reason="stop"))
    conv = store.load(1)
    assert [m.content for m in conv.messages] == ["Hi", "Hello.", "2+2?", "Four."]
    assert [(m.content, m.parent_id) for m in conv.branches] == [("4", 3)]
    assert store.integrity_check() == "ok"
    store.close()
    assert ChatStore(path).load(1).messages[-1].content == "Four."  # reopening migrates nothing again


def test_siblings_the_shown_branch_and_the_tree_in_exports(tmp_path):
    store = ChatStore(tmp_path / "h.sqlite3")
    conv = store.new_conversation()
    q = store.add_message(conv, ChatMessage("user", "Capital of France?"))
    first = store.add_message(conv, ChatMessage("assistant", "Paris.", finish_reason="stop"))
    store.truncate(conv, 1)
    second = store.begin_reply(conv)
    store.finish_message(second, ChatMessage("assistant", "It is Paris.", finish_reason="stop"))
    store.show_branch(conv, first)
    more = store.add_message(conv, ChatMessage("user", "Population?"))
    loaded = store.load(conv)
    assert [m.id for m in loaded.messages] == [q, first, more] and [m.id for m in loaded.branches] == [second]

    path, tree = from_links([(m.id, m.parent_id, m.to_chat_message()) for m in loaded.messages + loaded.branches],
                            [m.id for m in loaded.messages])
    assert [m.content for m in path] == ["Capital of France?", "Paris.", "Population?"]
    assert tree.position(1) == (1, 2)
    assert [m.content for m in tree.switch(path, 1, 1)] == ["Capital of France?", "It is Paris."]

    data = json.loads(to_json(loaded))
    assert [(m["content"], m["parent"]) for m in data["branches"]] == [("It is Paris.", q)]
    assert "It is Paris." not in to_markdown(loaded) and "Paris." in to_markdown(loaded)
    copy = conversation_from_json(to_json(loaded))
    again = store.load(store.import_conversation(copy.info, copy.messages, copy.branches))
    assert [m.content for m in again.messages] == ["Capital of France?", "Paris.", "Population?"]
    assert [m.content for m in again.branches] == ["It is Paris."]
    assert again.branches[0].parent_id == again.messages[0].id


def test_a_deleted_conversation_is_restored_with_its_ids_branches_and_fork_links(tmp_path):
    """Undo of a delete (ctrl+z in the history list): every id comes back the same, so forks that name
    it and a window still recording into it find it again; a reply still being written comes back
    interrupted."""
    store = ChatStore(tmp_path / "history.sqlite3")
    conv = store.new_conversation("m.gguf", "chatml", "Be brief.", {"temperature": 0.2}, title="kept")
    user = store.add_message(conv, ChatMessage("user", "Hi"))
    first = store.add_message(conv, ChatMessage("assistant", "Hello.", finish_reason="stop"), parent_id=user)
    second = store.add_message(conv, ChatMessage("assistant", "Hey.", finish_reason="stop"), parent_id=user)
    store.show_branch(conv, first)
    open_reply = store.begin_reply(conv, parent_id=first)
    fork = store.fork(conv, first)
    before = store.load(conv)
    store.delete(conv)
    assert not store.exists(conv) and store.load(fork).info.forked_from == conv
    store.restore(before)
    after = store.load(conv)
    assert store.exists(conv) and after.info == before.info
    assert [m.id for m in after.messages] == [user, first, open_reply]
    assert [m.id for m in after.branches] == [second] and after.branches[0].parent_id == user
    assert after.messages[-1].finish_reason == "interrupted"
    assert [(m.role, m.content) for m in after.messages[:2]] == [(m.role, m.content) for m in before.messages[:2]]
    with pytest.raises(StoreError, match="already there"):
        store.restore(before)
    store.close()
