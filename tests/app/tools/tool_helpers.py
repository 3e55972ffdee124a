"""Helpers shared by the tool tests (kept out of conftest.py so they import by a unique name)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from app.tools.mcp_client import ServerConfig

TEST_SERVER = Path(__file__).resolve().parent / "mcp_test_server.py"


def sdk_server_config(name: str = "test") -> ServerConfig:
    """The SDK-written test server (tests/app/tools/mcp_test_server.py) over stdio."""
    return ServerConfig(name=name, command=sys.executable, args=(str(TEST_SERVER),))


def time_server_config(name: str = "time") -> ServerConfig:
    """The real ``mcp-server-time`` package, with a fixed local timezone."""
    return ServerConfig(name=name, command=sys.executable, args=("-m", "mcp_server_time", "--local-timezone", "UTC"))


def call_text(name: str, arguments: dict) -> str:
    """A call as Qwen / Hermes write it."""
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


class Script:
    """Reply ids per model step (each ends with <|im_end|>), and the prompt ids each step was given."""

    def __init__(self, tok, replies: list[str]) -> None:
        end = tok.special_tokens["<|im_end|>"]
        self.replies = [tok.encode(text, special=True) + [end] for text in replies]
        self.prompts: list[list[int]] = []

    def __call__(self, prompt_ids):
        self.prompts.append(list(prompt_ids))
        return self.replies[len(self.prompts) - 1]
