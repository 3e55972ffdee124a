"""Fixtures for the tool tests: real MCP servers run as subprocesses through the real client."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app.tools.mcp_client import McpHub, ServerConfig

TEST_SERVER = Path(__file__).resolve().parent / "mcp_test_server.py"


def sdk_server_config(name: str = "test") -> ServerConfig:
    """The SDK-written test server (tests/app/tools/mcp_test_server.py) over stdio."""
    return ServerConfig(name=name, command=sys.executable, args=(str(TEST_SERVER),))


def time_server_config(name: str = "time") -> ServerConfig:
    """The real ``mcp-server-time`` package, with a fixed local timezone."""
    return ServerConfig(name=name, command=sys.executable, args=("-m", "mcp_server_time", "--local-timezone", "UTC"))


@pytest.fixture(scope="module")
def hub():
    """The test server and mcp-server-time, started once per module."""
    with McpHub([sdk_server_config(), time_server_config()], call_timeout_s=20) as hub:
        assert hub.start() == {}
        yield hub
