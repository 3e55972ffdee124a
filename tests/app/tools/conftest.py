"""Fixtures for the tool tests: real MCP servers run as subprocesses through the real client."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tool_helpers import sdk_server_config, time_server_config  # noqa: E402

from app.tools.mcp_client import McpHub  # noqa: E402


@pytest.fixture(scope="module")
def hub():
    """The test server and mcp-server-time, started once per module."""
    with McpHub([sdk_server_config(), time_server_config()], call_timeout_s=20) as hub:
        assert hub.start() == {}
        yield hub
