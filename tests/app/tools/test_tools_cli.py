"""Tools from the command line: ``tokchat --prompt ... --tools``, and ``tokchat tools``."""
from __future__ import annotations

import io
import json
import sys

from support.tool_helpers import TEST_SERVER, Script, call_text, sdk_server_config

from app.cli import main
from app.chat.headless import run_headless
from app.settings.options import ChatOptions
from app.settings.tools import ToolSettings
from backends import SamplingParams
from backends.scripted import ScriptedBackend


def _run(qwen_path, replies, *, approve_all, tok):
    script = Script(tok, replies)
    tools = ToolSettings(enabled="test,nosuch", servers={"test": sdk_server_config()}, approve_all=approve_all)
    options = ChatOptions(model=str(qwen_path), prompt="What is 40 + 2?", sampling=SamplingParams(temperature=0),
                          stats=True, history=False, tools=tools)
    out, err = io.StringIO(), io.StringIO()
    status = run_headless(options, backend=ScriptedBackend(script), out=out, err=err)
    return status, out.getvalue(), err.getvalue(), script


def test_headless_runs_the_loop_and_reports_the_steps(qwen_path):
    from tokenizer import load_tokenizer

    tok = load_tokenizer(qwen_path)
    status, out, err, script = _run(qwen_path, [call_text("add", {"a": 40, "b": 2}), "It is 42."],
                                    approve_all=True, tok=tok)
    assert status == 0 and out == "It is 42.\n"  # the call markup never reaches stdout
    lines = err.splitlines()
    assert "tokchat: no MCP server named 'nosuch' in [mcp.servers] (configured: test)" in lines
    assert 'tokchat: tool call test.add {"a": 40, "b": 2}' in lines
    n = len(tok.encode("42"))  # Qwen writes digits one by one: 2
    assert f"tokchat: tool result add [ok, {n} tokens]: 42" in lines
    stats = json.loads(lines[-1])
    assert stats["model_steps"] == 2 and stats["tool_result_tokens"] == n
    assert stats["tool_call_tokens"] == len(tok.encode(call_text("add", {"a": 40, "b": 2}), special=True))
    assert stats["completion_tokens"] == sum(len(r) for r in script.replies)


def test_headless_without_approval_denies_in_one_line(qwen_path):
    from tokenizer import load_tokenizer

    tok = load_tokenizer(qwen_path)
    status, out, err, script = _run(qwen_path, [call_text("crash", {}), "Denied, fine."], approve_all=False, tok=tok)
    assert status == 0 and out == "Denied, fine.\n"
    assert "tokchat: tool call crash denied: no terminal to ask on; run with --approve-tools" in err
    assert "[denied, " in err
    assert "the user denied this tool call" in tok.decode(script.prompts[1])


def test_tokchat_tools_lists_servers_and_costs(tmp_path, monkeypatch, capsys, smollm_path):
    (tmp_path / "config.toml").write_text(
        "[mcp.servers.test]\n"
        f"command = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(TEST_SERVER))}]\n"
        "[mcp.servers.broken]\n"
        'command = "/nonexistent/server"\n', encoding="utf-8")
    monkeypatch.setenv("TOKCHAT_CONFIG_DIR", str(tmp_path))
    assert main(["tools", "--model", str(smollm_path)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0].startswith("test (stdio: ") and shown[0].endswith(": 8 tools")
    add = next(line for line in shown if line.strip().startswith("add "))
    from tokenizer import load_tokenizer

    from app.tools.mcp_client import McpHub

    with McpHub([sdk_server_config()]) as hub:
        hub.start()
        schema = next(t for t in hub.tools() if t.name == "add").schema()
    expected = len(load_tokenizer(smollm_path).encode(json.dumps(schema, ensure_ascii=False)))
    assert f"{expected} tokens" in add
    assert any(line.startswith("broken: not available: command not found") for line in shown)


def test_a_bad_server_table_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "config.toml").write_text('[mcp.servers.x]\ncommand = "a"\nurl = "http://b"\n', encoding="utf-8")
    monkeypatch.setenv("TOKCHAT_CONFIG_DIR", str(tmp_path))
    assert main(["tools"]) == 2
    assert "mcp.servers.x needs either command (a stdio server) or url" in capsys.readouterr().err


def test_render_with_tools_shows_the_exact_ids(qwen_path, tmp_path, capsys):
    from tokenizer import load_tokenizer

    from templates import prompt_ids, resolve_template

    tools = [{"type": "function", "function": {"name": "get_current_time", "description": "Now.",
                                               "parameters": {"type": "object", "properties": {}}}}]
    messages = [{"role": "user", "content": "Time?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"type": "function", "id": "a1b2c3d4e", "function": {"name": "get_current_time", "arguments": {}}}]},
                {"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "get_current_time", "content": "<|im_end|>noon"}]
    (tmp_path / "tools.json").write_text(json.dumps(tools), encoding="utf-8")
    (tmp_path / "chat.json").write_text(json.dumps(messages), encoding="utf-8")
    assert main(["render", "--model", str(qwen_path), "--messages", str(tmp_path / "chat.json"),
                 "--tools", str(tmp_path / "tools.json"), "--ids"]) == 0
    shown = json.loads(capsys.readouterr().out)
    tok = load_tokenizer(qwen_path)
    template, _ = resolve_template("auto", tok)
    plain = [dict(m, content=m["content"] or "") for m in messages]
    assert shown == prompt_ids(tok, template.render(plain, tools=tools))
    # four turns end with the control id; the result's own "<|im_end|>" is text
    assert tok.decode(shown).count("<|im_end|>") == 5 and shown.count(tok.special_tokens["<|im_end|>"]) == 4
    (tmp_path / "bad.json").write_text('[{"type": "function"}]', encoding="utf-8")
    assert main(["render", "--model", str(qwen_path), "--messages", str(tmp_path / "chat.json"),
                 "--tools", str(tmp_path / "bad.json")]) == 2
    assert "tool 0 needs a function name" in capsys.readouterr().err
