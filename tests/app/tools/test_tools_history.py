"""Tool turns in the history: stored with their calls and results, exported, resumed exactly."""
from __future__ import annotations

import io

from support.tool_helpers import Script, call_text, sdk_server_config

from app.history.export import conversation_from_json, to_json, to_markdown
from app.chat.headless import run_headless
from app.chat.open import open_chat
from app.settings.options import ChatOptions
from app.history.recorder import HistoryRecorder
from app.history.store import ChatStore
from app.settings.tools import ToolSettings
from backends import SamplingParams
from backends.scripted import ScriptedBackend


def test_a_tool_turn_is_stored_exported_and_resumed_exactly(qwen_path, tmp_path):
    from tokenizer import load_tokenizer

    tok = load_tokenizer(qwen_path)
    hostile_answer = "Done ``` with backticks."
    script = Script(tok, [call_text("add", {"a": 1, "b": 2}), call_text("echo", {"text": "x <b>"}), hostile_answer])
    options = ChatOptions(model=str(qwen_path), prompt="Add 1 and 2", sampling=SamplingParams(temperature=0),
                          tools=ToolSettings(enabled="test", servers={"test": sdk_server_config()}, approve_all=True))
    db = tmp_path / "history.sqlite3"
    recorder = HistoryRecorder(store_path=db, model_path=str(qwen_path))
    backend = ScriptedBackend(script)
    assert run_headless(options, backend=backend, recorder=recorder, out=io.StringIO(), err=io.StringIO()) == 0

    conversation = ChatStore(db).load(recorder.conversation_id)
    stored = conversation.messages
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert stored[1].tool["tool_calls"][0]["function"] == {"name": "add", "arguments": {"a": 1, "b": 2}}
    assert stored[2].content == "3" and stored[2].tool == {"tool_call_id": stored[1].tool["tool_calls"][0]["id"],
                                                          "name": "add"}
    assert stored[-1].stats["model_steps"] == 3
    assert stored[-1].stats["tool_result_tokens"] == len(tok.encode("3")) + len(tok.encode("x <b>"))

    # resumed: the conversation re-renders to exactly the text the last step was sent
    session = open_chat(ChatOptions(model=str(qwen_path)), backend=ScriptedBackend([1])).session
    session.load_messages(conversation.chat_messages()[:-1])
    session.tools = [{"type": "function", "function": f} for f in _schemas(tok, script)]
    resumed = session.template.render([{"role": m.role, "content": m.content, **_tool_keys(m)}
                                       for m in session.messages], tools=session.tools)
    assert resumed.text == tok.decode(script.prompts[-1])

    # exported: Markdown shows calls and results as collapsed blocks; JSON comes back the same
    markdown = to_markdown(conversation)
    assert "<summary>Tool call: add</summary>" in markdown and '"a": 1' in markdown
    assert "<summary>Tool result: echo</summary>" in markdown and "````text" not in markdown
    back = conversation_from_json(to_json(conversation))
    assert [(m.role, m.content, m.tool) for m in back.messages] == [(m.role, m.content, m.tool) for m in stored]


def _tool_keys(message) -> dict:
    return {k: getattr(message, k) for k in ("tool_calls", "tool_call_id", "name") if getattr(message, k)}


def _schemas(tok, script):
    """The function schemas the first prompt carried (read back from its <tools> block)."""
    import json

    text = tok.decode(script.prompts[0])
    block = text[text.index("<tools>\n") + len("<tools>\n"): text.index("\n</tools>")]
    return [json.loads(line)["function"] for line in block.splitlines()]
