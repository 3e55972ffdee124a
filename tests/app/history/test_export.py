"""Export: Markdown for reading, JSON with everything, and JSON back into the history."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.history.export import ImportFormatError, conversation_from_json, to_dict, to_json, to_markdown
from app.conversation.session import ChatMessage, TurnStats
from app.history.store import ChatStore

ROOT = Path(__file__).resolve().parents[3]


def _stats(**over) -> TurnStats:
    values = dict(new_prompt_tokens=9, prompt_tokens=25, completion_tokens=11, reasoning_tokens=4,
                  ttft_s=0.125, tokens_per_s=52.5, context_used=36, context_limit=4096,
                  finish_reason="stop", dropped_turns=0, backend="llama.cpp", device="CPU")
    values.update(over)
    return TurnStats(**values)


@pytest.fixture
def store(tmp_path) -> ChatStore:
    return ChatStore(tmp_path / "history.sqlite3")


@pytest.fixture
def conv_id(store) -> int:
    conv = store.new_conversation("/m/qwen3.gguf", "chatml-think", "You are terse.",
                                  {"temperature": 0.6, "top_k": 20, "seed": None}, model_name="Qwen3 0.6B",
                                  settings={"ctx": 4096, "think": True})
    store.add_message(conv, ChatMessage("user", "Why is the sky blue?"))
    reply = store.begin_reply(conv)
    store.finish_message(reply, ChatMessage("assistant", "Rayleigh scattering.", reasoning="Short answer <b>wins</b>.",
                                            stats=_stats(), finish_reason="stop"))
    store.add_message(conv, ChatMessage("user", "And sunsets? 🌅"))
    reply = store.begin_reply(conv)
    store.finish_message(reply, ChatMessage("assistant", "Longer path", stats=_stats(finish_reason="cancelled"),
                                            finish_reason="cancelled"))
    return conv


def _comparable(conv) -> dict:
    """The export without database ids: message ids become their order, parents follow them."""
    return _without_ids(to_dict(conv))


def _without_ids(data: dict) -> dict:
    data.pop("id", None)
    order = {m["id"]: n for n, m in enumerate(sorted(data["messages"] + data["branches"], key=lambda m: m["id"]))}
    for m in data["messages"] + data["branches"]:
        m["id"], m["parent"] = order[m["id"]], order.get(m["parent"])
    return data


def test_json_round_trip_gives_the_same_conversation(store, conv_id):
    original = store.load(conv_id)
    text = to_json(original)
    data = json.loads(text)
    assert data["format"] == "tokchat-conversation" and data["version"] == 1
    assert data["messages"][1]["stats"]["tokens_per_s"] == 52.5
    assert data["messages"][1]["created"].endswith("Z")
    parsed = conversation_from_json(text)
    new_id = store.import_conversation(parsed.info, parsed.messages)
    assert new_id != conv_id
    copy = store.load(new_id)
    assert _comparable(copy) == _comparable(original)
    assert copy.chat_messages() == original.chat_messages()
    assert copy.chat_messages()[1] == ChatMessage("assistant", "Rayleigh scattering.",
                                                  reasoning="Short answer <b>wins</b>.", stats=_stats(),
                                                  finish_reason="stop")


def test_markdown_collapses_reasoning_and_shows_stats(store, conv_id):
    md = to_markdown(store.load(conv_id))
    assert md.startswith("# Why is the sky blue?\n")
    assert "- Model: Qwen3 0.6B (`/m/qwen3.gguf`)" in md
    assert "## System\n\nYou are terse." in md
    details = md.index("<details>")
    assert md.index("<summary>Reasoning</summary>") > details
    assert md.index("Short answer <b>wins</b>.") < md.index("</details>") < md.index("Rayleigh scattering.")
    assert "*11 tokens · 4 reasoning · 0.12 s to first token · 52.5 tokens/s*" in md
    assert "cancelled" in md.split("Longer path", 1)[1]
    assert md.count("<details>") == 1  # the reply without reasoning gets no block


@pytest.mark.parametrize("text, problem", [
    ("[1, 2", "not JSON"),
    ('{"format": "something-else"}', "not a tokchat conversation export"),
    ('{"format": "tokchat-conversation", "version": 99}', "export version 99"),
])
def test_import_rejects_what_is_not_an_export(text, problem):
    with pytest.raises(ImportFormatError, match=problem):
        conversation_from_json(text, source="x.json")


def test_import_names_the_bad_field(store, conv_id):
    data = json.loads(to_json(store.load(conv_id)))
    data["messages"][1]["completion_tokens"] = "eleven"
    with pytest.raises(ImportFormatError, match=r"x.json: messages\[1\]: 'completion_tokens' must be int or null"):
        conversation_from_json(json.dumps(data), source="x.json")


def _tokchat(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, env=env, capture_output=True, text=True)


def test_export_command_round_trip(tmp_path, store, conv_id):
    env = {**os.environ, "TOKCHAT_DATA_DIR": str(tmp_path)}
    listing = _tokchat("export", "--list", "--search", "sunsets", env=env)
    assert listing.returncode == 0, listing.stderr
    assert f"{conv_id}" in listing.stdout and "Why is the sky blue?" in listing.stdout

    out = tmp_path / "chat.json"
    done = _tokchat("export", "--last", "-o", str(out), env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["messages"][3]["finish_reason"] == "cancelled"
    md = _tokchat("export", str(conv_id), "--format", "md", env=env)
    assert md.stdout.startswith("# Why is the sky blue?")

    imported = _tokchat("export", "--import", str(out), env=env)
    assert imported.returncode == 0, imported.stderr
    new_id = int(imported.stdout.split("conversation ")[1].split()[0])
    again = _tokchat("export", str(new_id), "--format", "json", env=env)
    first, second = json.loads(out.read_text()), json.loads(again.stdout)
    assert first["id"] == conv_id and second["id"] == new_id
    assert _without_ids(first) == _without_ids(second)

    missing = _tokchat("export", "999", env=env)
    assert missing.returncode == 2 and missing.stderr.strip() == \
        "tokchat: no conversation 999 in the history (see `tokchat export --list`)"
    neither = _tokchat("export", env=env)
    assert neither.returncode == 2 and "give an ID or --last" in neither.stderr
