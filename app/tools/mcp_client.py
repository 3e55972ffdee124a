"""MCP servers through the official ``mcp`` SDK: started on demand, each one's failure its own.

tokchat's chat loop is synchronous (it runs in a worker thread) while the
SDK is asyncio.  :class:`McpHub` owns one event loop in a daemon thread;
every server is one long-lived task that holds its ``mcp.Client`` open
(``async with``: a context manager owns every connection, and closing it
is how the server is stopped), and calls are submitted to that loop with
a timeout.

* stdio servers (``command``/``args``/``env``) run as subprocesses whose
  stderr goes to a log file, never to the terminal the TUI draws on;
* streamable-HTTP servers (``url``/``headers``) through the SDK's httpx
  client;
* a server that fails to start, dies, or times out is reported in one line
  (:attr:`McpHub.failures`) and the others go on; a server that died is
  started again on its next call;
* a stdio server that prints something other than JSON-RPC on stdout (a banner,
  a debug print) is named for it in that line; the SDK's own log of it (a
  pydantic traceback per line) is kept off the terminal, as are asyncio's
  warnings about a start that was given up;
* a tool that hangs is abandoned after ``call_timeout_s``; its error comes
  back as the result.

Not handled here: token budgets (the loop truncates results), approval.
"""
from __future__ import annotations

import asyncio
import json
import tempfile
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Iterable

from app.settings.tools import ServerConfig
from app.tools.schemas import function_tool

START_TIMEOUT_S = 30.0
#: how long a server that printed something other than JSON-RPC on stdout still gets to answer: a banner
#: line before a working server costs nothing, a server that only prints text is given up in seconds, not 30
STDOUT_FAULT_GRACE_S = 3.0
CALL_TIMEOUT_S = 60.0
#: after a server's stdout fault: what the fix is
_STDOUT_HINT = "; an MCP stdio server writes only protocol messages there, its logs to stderr"


@dataclass(frozen=True)
class ToolInfo:
    """A tool one server offers."""

    server: str
    name: str
    description: str
    input_schema: dict

    def schema(self) -> dict:
        """The tool as templates take it (``{"type": "function", "function": {...}}``)."""
        return function_tool(self.name, self.description, self.input_schema)


@dataclass(frozen=True)
class ToolResult:
    """What a call returned, as text for the model; ``is_error`` for tool errors and failures."""

    text: str
    is_error: bool = False


class _Server:
    """The state of one server inside the hub (touched only on the hub's loop)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.client: Any = None
        self.tools: list[ToolInfo] = []
        self.stop: asyncio.Event | None = None
        self.task: asyncio.Task | None = None
        self.errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
        #: the first thing it printed on stdout that is not a JSON-RPC message, in words
        self.stdout_fault = ""
        #: when (the hub loop's clock) it printed that
        self.fault_at = 0.0

    async def on_transport_error(self, message: Any) -> None:
        """The client's message handler: notifications pass, the transport's exceptions (a line on stdout
        that is not JSON-RPC) are kept for the failure line instead of only being logged by the SDK."""
        if isinstance(message, Exception) and not self.stdout_fault:
            self.stdout_fault = _stdout_fault(message)
            self.fault_at = asyncio.get_running_loop().time()

    def last_log_line(self) -> str:
        try:
            self.errlog.seek(0)
            lines = [line.strip() for line in self.errlog.read().splitlines() if line.strip()]
        except (OSError, ValueError):
            return ""
        return lines[-1][:200] if lines else ""


class McpHub:
    """Every configured MCP server, started when first needed."""

    def __init__(self, servers: Iterable[ServerConfig], *, start_timeout_s: float = START_TIMEOUT_S,
                 call_timeout_s: float = CALL_TIMEOUT_S) -> None:
        _quiet_sdk_log()
        self.configs = {s.name: s for s in servers}
        self.start_timeout_s = start_timeout_s
        self.call_timeout_s = call_timeout_s
        #: server name -> one line saying why it is not available
        self.failures: dict[str, str] = {}
        self._servers: dict[str, _Server] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------
    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="tokchat-mcp", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def _submit(self, coro: Any) -> Future:
        return asyncio.run_coroutine_threadsafe(coro, self._ensure_loop())

    def start(self, names: Iterable[str] | None = None) -> dict[str, str]:
        """Start the named servers (default: all) that are not running; returns the failures."""
        wanted = list(self.configs) if names is None else [n for n in names if n in self.configs]
        pending = {name: self._submit(self._start(name)) for name in wanted}
        for name, future in pending.items():
            try:
                future.result(self.start_timeout_s + 5)
            except FutureTimeout:
                self.failures[name] = f"MCP server {name}: did not start within {self.start_timeout_s:g} s"
        return {n: self.failures[n] for n in wanted if n in self.failures}

    def close(self) -> None:
        """Stop every server and the loop (idempotent)."""
        loop = self._loop
        if loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._stop_all(), loop).result(15)
        except (FutureTimeout, RuntimeError):
            pass  # a server that will not stop is killed with the process; nothing to keep
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5)
        self._loop = None

    def __enter__(self) -> McpHub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what is offered -------------------------------------------------------------------------
    def tools(self, names: Iterable[str] | None = None) -> list[ToolInfo]:
        """The tools of the running servers among ``names`` (default: all), in config order."""
        wanted = list(self.configs) if names is None else list(names)
        out: list[ToolInfo] = []
        for name in wanted:
            server = self._servers.get(name)
            if server is not None and server.client is not None:
                out.extend(server.tools)
        return out

    def running(self) -> list[str]:
        return [n for n, s in self._servers.items() if s.client is not None]

    # -- calls ---------------------------------------------------------------------------------
    def call(self, server: str, tool: str, arguments: dict, timeout_s: float | None = None) -> ToolResult:
        """Run one tool; every failure (server down, timeout, crash) is an error result, never a raise."""
        timeout = self.call_timeout_s if timeout_s is None else timeout_s
        if server not in self.configs:
            return ToolResult(f"error: no MCP server named {server!r}", True)
        future = self._submit(self._call(server, tool, arguments, timeout))
        try:
            return future.result(timeout + self.start_timeout_s + 5)
        except FutureTimeout:
            future.cancel()
            return ToolResult(f"error: the tool {tool} did not answer within {timeout:g} s", True)

    # -- on the loop -----------------------------------------------------------------------------
    async def _start(self, name: str) -> None:
        server = self._servers.get(name)
        if server is not None and server.client is not None:
            return
        server = self._servers[name] = _Server(self.configs[name])
        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        server.stop = asyncio.Event()
        server.task = asyncio.create_task(self._serve(server, ready))
        try:
            await self._until_ready(server, ready)
        except asyncio.TimeoutError:
            ready.cancel()  # nobody waits any more: the task's end must not set an exception no one reads
            server.stop.set()
            server.task.cancel()
            if server.stdout_fault:
                self.failures[name] = (f"MCP server {name}: {server.stdout_fault} and did not answer "
                                       f"(gave up after {STDOUT_FAULT_GRACE_S:g} s){_STDOUT_HINT}")
            else:
                self.failures[name] = f"MCP server {name}: did not start within {self.start_timeout_s:g} s"
        except Exception as exc:  # noqa: BLE001 - any failure of one server is reported, never raised
            fault = (f"{server.stdout_fault} ({_reason(exc, server)}){_STDOUT_HINT}" if server.stdout_fault
                     else _reason(exc, server))
            self.failures[name] = f"MCP server {name}: {fault}"
            server.client = None
        else:
            self.failures.pop(name, None)

    async def _until_ready(self, server: _Server, ready: asyncio.Future) -> None:
        """Wait for ``ready``; TimeoutError after ``start_timeout_s``, or ``STDOUT_FAULT_GRACE_S`` after the
        server printed something other than JSON-RPC on stdout (whichever comes first)."""
        clock = asyncio.get_running_loop().time
        deadline = clock() + self.start_timeout_s
        while True:
            if server.stdout_fault:
                deadline = min(deadline, server.fault_at + STDOUT_FAULT_GRACE_S)
            left = deadline - clock()
            if left <= 0:
                raise asyncio.TimeoutError
            try:
                await asyncio.wait_for(asyncio.shield(ready), min(left, 0.25))
                return
            except asyncio.TimeoutError:
                continue

    async def _serve(self, server: _Server, ready: asyncio.Future) -> None:
        """Hold one server's connection open until asked to stop (or the server goes away)."""
        from mcp import Client

        try:
            async with Client(self._transport(server), mode="auto", message_handler=server.on_transport_error) \
                    as client:
                listing = await client.list_tools()
                server.tools = [_tool_info(server.config.name, t) for t in listing.tools]
                server.client = client
                if not ready.done():
                    ready.set_result(None)
                assert server.stop is not None  # set before this task starts
                await server.stop.wait()
        except BaseException as exc:  # the task's end: report it once, to whoever waits
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError("stopped"))
            elif not isinstance(exc, asyncio.CancelledError):
                self.failures[server.config.name] = f"MCP server {server.config.name}: {_reason(exc, server)}"
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
        finally:
            server.client = None

    def _transport(self, server: _Server) -> Any:
        config = server.config
        if config.url:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            return streamable_http_client(config.url, http_client=create_mcp_http_client(headers=config.headers or None))
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(command=config.command, args=list(config.args), env=config.env or None,
                                       cwd=config.cwd or None)
        return stdio_client(params, errlog=server.errlog)

    async def _call(self, name: str, tool: str, arguments: dict, timeout: float) -> ToolResult:
        server = self._servers.get(name)
        if server is None or server.client is None:
            await self._start(name)  # on demand, and again after a crash
            server = self._servers.get(name)
            if server is None or server.client is None:
                return ToolResult(f"error: {self.failures.get(name, f'MCP server {name} is not running')}", True)
        try:
            result = await asyncio.wait_for(server.client.call_tool(tool, arguments), timeout)
        except asyncio.TimeoutError:
            return ToolResult(f"error: the tool {tool} did not answer within {timeout:g} s", True)
        except Exception as exc:  # noqa: BLE001 - a failed call is a result the model reads
            # the connection is gone (the server died mid-call): close it, so the next call starts it again
            reason = _reason(exc)
            await self._stop(server)
            self.failures[name] = f"MCP server {name}: stopped during a call ({reason}); it restarts on the next call"
            return ToolResult(f"error: the MCP server {name} stopped during the call ({reason})", True)
        return _result_text(result)

    async def _stop(self, server: _Server) -> None:
        if server.stop is not None:
            server.stop.set()
        if server.task is not None and not server.task.done():
            try:
                await asyncio.wait_for(asyncio.shield(server.task), 10)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - it is being discarded anyway
                server.task.cancel()
        server.client = None

    async def _stop_all(self) -> None:
        for server in self._servers.values():
            if server.stop is not None:
                server.stop.set()
        tasks = [s.task for s in self._servers.values() if s.task is not None and not s.task.done()]
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=10)
            for task in pending:
                task.cancel()
        for server in self._servers.values():
            server.errlog.close()


def _tool_info(server: str, tool: Any) -> ToolInfo:
    schema = getattr(tool, "input_schema", None) or getattr(tool, "inputSchema", None) or {}
    return ToolInfo(server, tool.name, tool.description or "", dict(schema))


def _result_text(result: Any) -> ToolResult:
    """The result's content as text: text blocks joined, other blocks named, structured content as JSON."""
    parts: list[str] = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        else:
            parts.append(f"[{kind or 'unknown'} content not shown to the model]")
    if not parts and getattr(result, "structured_content", None) is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return ToolResult("\n".join(parts), bool(getattr(result, "is_error", False)))


def _quiet_sdk_log() -> None:
    """Keep the SDK's log records off the terminal: it logs a traceback for every line a server prints on
    stdout that is not JSON-RPC, and with no handler configured Python prints them to stderr (through the
    TUI's screen).  What they say reaches the user as the server's failure line instead."""
    import logging

    sdk = logging.getLogger("mcp")
    if not any(isinstance(h, logging.NullHandler) for h in sdk.handlers):
        sdk.addHandler(logging.NullHandler())
    sdk.propagate = False


def _stdout_fault(exc: Exception) -> str:
    """What a server's line on stdout was, when the SDK could not read it as JSON-RPC (pydantic says why)."""
    errors = getattr(exc, "errors", None)
    try:
        first = errors()[0] if callable(errors) else None
    except (TypeError, IndexError, ValueError):
        first = None
    if not isinstance(first, dict):
        return f"sent something the client could not read ({_reason(exc)})"
    shown = first.get("input")
    shown = shown if isinstance(shown, str) else json.dumps(shown, ensure_ascii=False, default=str)
    shown = " ".join(shown.split())
    shown = shown if len(shown) <= 80 else shown[:79] + "…"
    return f"printed something other than JSON-RPC on stdout: {shown!r}"


def _reason(exc: BaseException, server: _Server | None = None) -> str:
    """One line for an exception (exception groups unwrapped), with the server's last log line."""
    while inner := getattr(exc, "exceptions", None):  # an exception group (anyio task groups raise them; 3.10 too)
        exc = inner[0]
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, FileNotFoundError):
        text = f"command not found: {exc.filename or text}"
    log = server.last_log_line() if server is not None else ""
    return f"{text[:300]}" + (f" (server log: {log})" if log and log not in text else "")
