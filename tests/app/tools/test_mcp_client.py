"""The MCP client against real servers: mcp-server-time and an SDK-written test server.

Faults: a server that cannot start, one that exits at once, a tool that
errors, one that hangs, one that kills its server mid-call, a 1 MB result;
and the streamable-HTTP transport against the test server on a loopback port.
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone

import pytest
from support.tool_helpers import hub, TEST_SERVER, sdk_server_config, time_server_config  # noqa: F401 (hub: a fixture)

from app.settings.tools import ServerConfig
from app.tools.mcp_client import McpHub


def test_tools_are_listed_with_their_schemas(hub):
    tools = {(t.server, t.name): t for t in hub.tools()}
    assert {("time", "get_current_time"), ("time", "convert_time"), ("test", "add"), ("test", "hang")} <= set(tools)
    add = tools[("test", "add")].schema()
    assert add["type"] == "function" and add["function"]["name"] == "add"
    assert add["function"]["parameters"]["required"] == ["a", "b"]
    assert "timezone" in tools[("time", "get_current_time")].input_schema["properties"]


def test_mcp_server_time_answers(hub):
    result = hub.call("time", "get_current_time", {"timezone": "Asia/Tokyo"})
    assert not result.is_error
    data = json.loads(result.text)
    assert data["timezone"] == "Asia/Tokyo"
    when = datetime.fromisoformat(data["datetime"])
    assert when.utcoffset().total_seconds() == 9 * 3600
    assert abs((when - datetime.now(timezone.utc)).total_seconds()) < 600


def test_a_tool_error_is_an_error_result(hub):
    result = hub.call("test", "fail", {"reason": "nope"})
    assert result.is_error and "fail" in result.text
    assert hub.call("test", "add", {"a": 2, "b": 3}).text == "5"  # the server is fine


def test_a_hanging_tool_is_abandoned(hub):
    result = hub.call("test", "hang", {"seconds": 600}, timeout_s=1.0)
    assert result.is_error and "did not answer within 1 s" in result.text
    assert hub.call("test", "echo", {"text": "still here"}).text == "still here"


def test_a_1mb_result_arrives_whole(hub):
    result = hub.call("test", "big", {"size": 1_000_000})
    assert not result.is_error and len(result.text) == 1_000_000


def test_a_crashing_server_is_one_line_and_restarts():
    with McpHub([sdk_server_config("crashy"), time_server_config()], call_timeout_s=20) as hub:
        assert hub.start() == {}
        result = hub.call("crashy", "crash", {})
        assert result.is_error and "stopped during the call" in result.text
        assert "\n" not in hub.failures["crashy"]
        assert not json.loads(hub.call("time", "get_current_time", {"timezone": "UTC"}).text)["is_dst"]
        assert hub.call("crashy", "add", {"a": 1, "b": 1}).text == "2"  # started again on demand
        assert "crashy" not in hub.failures


def test_servers_that_cannot_start_are_isolated():
    bad_command = ServerConfig("missing", command="/nonexistent/mcp-server")
    exits = ServerConfig("exits", command=sys.executable,
                         args=("-c", "import sys; print('no config file', file=sys.stderr); sys.exit(1)"))
    with McpHub([bad_command, exits, time_server_config()], start_timeout_s=20) as hub:
        failures = hub.start()
        assert set(failures) == {"missing", "exits"}
        assert "command not found" in failures["missing"] and "no config file" in failures["exits"]
        assert all("\n" not in line for line in failures.values())
        assert [t.server for t in hub.tools()] == ["time", "time"]
        result = hub.call("missing", "anything", {})
        assert result.is_error and "command not found" in result.text


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_streamable_http_server():
    port = _free_port()
    process = subprocess.Popen([sys.executable, str(TEST_SERVER), "http", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None, "the HTTP test server exited"
                time.sleep(0.2)
        config = ServerConfig("web", url=f"http://127.0.0.1:{port}/mcp", headers={"X-Test": "1"})
        with McpHub([config]) as hub:
            assert hub.start() == {}
            assert "add" in [t.name for t in hub.tools()]
            assert hub.call("web", "add", {"a": 20, "b": 22}).text == "42"
    finally:
        process.terminate()
        process.wait(10)


def test_an_http_server_that_is_not_there():
    with McpHub([ServerConfig("gone", url=f"http://127.0.0.1:{_free_port()}/mcp")], start_timeout_s=10) as hub:
        failures = hub.start()
        assert list(failures) == ["gone"] and "\n" not in failures["gone"]
