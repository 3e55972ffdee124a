"""How many of a real model's tool calls are malformed, with ``[tools] constrain_arguments`` off and on (issue 46).

The tools are the ones the tool tests use, from the real MCP servers: tests/support/mcp_test_server.py
(``add``, ``echo``, ...) and ``mcp-server-time``.  Each prompt gets one model step (greedy) through the real
tool loop's session on tokchat's llama.cpp engine; the reply's calls are parsed by the loop's own parser
(:func:`app.tools.calls.parse_reply`) and their arguments checked against the tool's input schema with
``jsonschema``.  A call is *malformed* when the parser refuses it (bad JSON, no name, arguments not an
object) or its arguments do not validate.

    .venv/bin/python bench/bench_tool_arguments.py [--model PATH] [--max-tokens 96]
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "app" / "tools")]

#: prompts that ask for a call; several tempt a small model into arguments of the wrong type
PROMPTS = [
    "Use the add tool to add 2.5 and 3.",
    "Add forty and two with the add tool.",
    "Echo back this JSON exactly: {\"a\": [1, 2]}",
    "Convert 9:30 in New York to Tokyo time.",
    "What time is it in Tokyo right now?",
    "Add 1 and 2, and also add 3 and 4.",
]


def malformed(calls, tools) -> int:
    from jsonschema import Draft202012Validator

    bad = 0
    for call in calls:
        tool = tools.get(call.name)
        if call.error is not None or tool is None:
            bad += 1
        elif any(True for _ in Draft202012Validator(tool.input_schema or {}).iter_errors(call.arguments)):
            bad += 1
    return bad


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(Path.home() / ".cache/tokchat/test-assets/qwen2.5-coder-0.5b.gguf"))
    parser.add_argument("--max-tokens", type=int, default=96)
    args = parser.parse_args()
    from support.tool_helpers import sdk_server_config, time_server_config

    from app.conversation.session import ChatSession
    from app.tools.calls import hold_arguments, parse_reply, syntax_for
    from app.tools.mcp_client import McpHub
    from backends import LoadOptions, open_backend
    from backends.base import SamplingParams
    from templates import resolve_template
    from tokenizer import load_tokenizer

    tok = load_tokenizer(args.model)
    template, _ = resolve_template("auto", tok)
    syntax = syntax_for(template.source)
    backend = open_backend(Path(args.model), LoadOptions(backend="cpu", n_ctx=4096))
    with McpHub([sdk_server_config(), time_server_config()], call_timeout_s=20) as hub:
        assert hub.start() == {}
        infos = [t for t in hub.tools() if t.name in ("add", "echo", "get_current_time", "convert_time")]
        tools = {t.name: t for t in infos}
        counts = {False: [0, 0], True: [0, 0]}
        for prompt in PROMPTS:  # free and held side by side, so a cut run still compares pairs
            for held in (False, True):
                session = ChatSession(tok, template, backend=backend, context_size=4096,
                                      sampling=SamplingParams(temperature=0.0, max_tokens=args.max_tokens))
                session.tools = [t.schema() for t in infos]
                if held:
                    assert hold_arguments(session, syntax, infos) == ""
                list(session.send(prompt))
                reply = session.messages[-1]
                parsed = parse_reply(tok, syntax, reply.reply_ids, reply.content, tools)
                bad = malformed(parsed.calls, tools)
                counts[held][0] += len(parsed.calls)
                counts[held][1] += bad
                print(f"{'held' if held else 'free'} | {prompt} | {len(parsed.calls)} call(s), {bad} malformed | "
                      f"{reply.finish_reason} | {json.dumps(tok.decode(reply.reply_ids))[:200]}", flush=True)
        totals = {held: tuple(c) for held, c in counts.items()}
    backend.close()
    for held, (calls_n, bad_n) in totals.items():
        print(f"{'held' if held else 'free'}: {calls_n} calls, {bad_n} malformed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
