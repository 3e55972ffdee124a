"""Helpers shared by the tool tests (kept out of conftest.py so they import by a unique name)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from app.settings.tools import ServerConfig

TEST_SERVER = Path(__file__).resolve().parent / "mcp_test_server.py"


def sdk_server_config(name: str = "test") -> ServerConfig:
    """The SDK-written test server (tests/support/mcp_test_server.py) over stdio."""
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


@pytest.fixture(scope="module")
def hub():
    """The test server and mcp-server-time, started once per module (import it into the test module:
    a conftest.py here would shadow the other test folders' ``from conftest import ...``)."""
    from app.tools.mcp_client import McpHub

    with McpHub([sdk_server_config(), time_server_config()], call_timeout_s=20) as started:
        assert started.start() == {}
        yield started
