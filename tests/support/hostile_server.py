"""A local HTTP server that misbehaves on purpose, one fault per endpoint, chosen per test.

The network boundary keeps producing the same class of defect (a 305 s hang, then 6 GB
of memory, issue 34): a real server misbehaves in ways a well-behaved llama-server never
shows.  :class:`HostileServer` stands in front of a real ``llama-server`` (the test
asset, :mod:`remote_servers`): every endpoint without a fault is passed through to it
unchanged, so tokchat's connect sequence and chats are the real ones, and the chosen
endpoints misbehave instead (:data:`FAULTS`).

Safe by construction: it listens on 127.0.0.1 only, every loop it runs is bounded in
bytes (``limit_bytes``) and in time (``limit_s``) and ends by itself, and :meth:`stop`
ends every connection still open.
"""
from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

#: a fault for any endpoint, in words (what a test may name)
FAULTS: dict[str, str] = {
    "endless": "200 JSON that never ends: '{\"a\": \"xxxx...' for as long as the server's limits allow",
    "huge": "200 JSON declared 8 GiB long (Content-Length), sent until the limits",
    "slow_body": "200 with its headers at once, then one byte a second of body",
    "slow_headers": "the status line, then one header byte a second (slowloris)",
    "huge_headers": "200 with 4 MiB of headers",
    "invalid_json": "200 application/json that is not JSON",
    "truncated_json": "200 application/json declared 4096 bytes long, cut after 20",
    "nested_json": "200 JSON nested 1,000,000 lists deep (4 MB)",
    "wrong_shape": "200 JSON of the wrong shape: a list where an object belongs",
    "wrong_type": "200 text/html",
    "status_500": "500 with a JSON error",
    "not_found": "404, as a server of another kind answers an endpoint it does not have",
    "status_429": "429 with Retry-After: 3600",
    "empty": "200 with an empty body",
    "close": "the connection closed without an answer",
    "tls_reply": "a TLS alert record instead of HTTP, as a TLS port answers plain HTTP",
}
#: faults only a streamed reply (``/completion``) can have
STREAM_FAULTS: dict[str, str] = {
    "cut_mid_event": "two events with ids, then half of a third, then the connection closes",
    "ids_outside_vocab": "an event carrying id 10,000,000",
    "endless_line": "'data: {\"tokens\": [' and digits without end, never a newline",
    "empty_events": "events with no ids and no progress, 100 a second, without end",
    "endless_ids": "events with one valid id each, without end",
    "held_open": "one event with a valid id, then nothing while the connection stays open",
    "not_json_event": "an event whose data is not JSON",
    "list_event": "an event whose data is a JSON list",
    "error_event": "an event carrying llama-server's error object",
}

#: an id every test vocabulary has (SmolLM2, Qwen): the stream faults' ids
VALID_ID = 28


class _Limits:
    """The bounds of one answer: bytes written and seconds spent, and the server's stop."""

    def __init__(self, server: "HostileServer") -> None:
        self.server = server
        self.sent = 0
        self.until = time.monotonic() + server.limit_s

    def more(self, n: int = 0) -> bool:
        self.sent += n
        return (self.sent < self.server.limit_bytes and time.monotonic() < self.until
                and not self.server.stopping.is_set())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # close-delimited bodies: an endless one needs no chunk framing
    timeout = 30.0  # a client that stops reading without hanging up blocks a write at most this long
    server: "_Server"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests assert on tokchat's output, not on this server's."""

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def _answer(self) -> None:
        hostile = self.server.hostile
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(min(length, 64 << 20)) if length else b""
        with hostile.lock:
            hostile.hits[path] = hostile.hits.get(path, 0) + 1
        fault = hostile.faults.get(path)
        try:
            if fault is None:
                self._proxy(path, body)
            elif fault in STREAM_FAULTS:
                self._stream_fault(fault)
            else:
                self._fault(fault)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            return  # the client hung up: which is what tokchat should do with such a server

    # -- the real server behind -------------------------------------------------------------------

    def _proxy(self, path: str, body: bytes) -> None:
        hostile = self.server.hostile
        if hostile.upstream is None:
            self._plain(404, b'{"error": {"message": "no upstream"}}')
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")}
        with httpx.stream(self.command, hostile.upstream + self.path, content=body or None, headers=headers,
                          timeout=120.0) as resp:
            self.send_response(resp.status_code)
            self.send_header("Content-Type", resp.headers.get("content-type", "application/json"))
            self.end_headers()
            for chunk in resp.iter_raw():
                self.wfile.write(chunk)
                self.wfile.flush()

    # -- faults --------------------------------------------------------------------------------------

    def _plain(self, status: int, payload: bytes, content_type: str = "application/json",
               extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _fault(self, fault: str) -> None:
        limits = _Limits(self.server.hostile)
        if fault in ("endless", "huge"):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if fault == "huge":
                self.send_header("Content-Length", str(8 << 30))
            self.end_headers()
            self.wfile.write(b'{"build_info": "hostile", "a": "')
            chunk = b"x" * (64 << 10)
            while limits.more(len(chunk)):
                self.wfile.write(chunk)
        elif fault == "slow_body":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self._drip(b'{"build_info": "hostile", "a": "' + b"x" * 100000, limits)
        elif fault == "slow_headers":
            self.wfile.write(b"HTTP/1.0 200 OK\r\n")
            self._drip(b"X-Slow: " + b"a" * 100000, limits)
        elif fault == "huge_headers":
            self.send_response(200)
            for n in range(512):
                self.send_header(f"X-Huge-{n}", "h" * 8192)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b"{}")
        elif fault == "invalid_json":
            self._plain(200, b"{this is not json")
        elif fault == "truncated_json":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "4096")
            self.end_headers()
            self.wfile.write(b'{"build_info": "hos')
        elif fault == "nested_json":
            self._plain(200, b"[" * 1_000_000 + b"]" * 1_000_000)
        elif fault == "wrong_shape":
            self._plain(200, b'[{"build_info": "hostile"}, 1, "two"]')
        elif fault == "wrong_type":
            self._plain(200, b"<html><body>It works!</body></html>", content_type="text/html")
        elif fault == "not_found":
            self._plain(404, b'{"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}')
        elif fault == "status_500":
            self._plain(500, b'{"error": {"code": 500, "message": "hostile failure", "type": "server_error"}}')
        elif fault == "status_429":
            self._plain(429, b'{"error": {"code": 429, "message": "too many requests", "type": "rate_limit"}}',
                        extra={"Retry-After": "3600"})
        elif fault == "empty":
            self._plain(200, b"")
        elif fault == "tls_reply":
            self.close_connection = True
            self.wfile.write(b"\x15\x03\x03\x00\x02\x02\x46")  # alert, TLS 1.2, fatal unknown_ca-like
        elif fault == "close":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        else:
            raise ValueError(f"unknown fault {fault!r}")

    def _drip(self, data: bytes, limits: _Limits) -> None:
        """``data`` one byte a second, until the limits."""
        for n in range(len(data)):
            if not limits.more(1):
                return
            self.wfile.write(data[n:n + 1])
            self.wfile.flush()
            if self.server.hostile.stopping.wait(1.0):
                return

    def _event(self, payload: Any) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.wfile.write(b"data: " + data + b"\n\n")
        self.wfile.flush()

    def _stream_fault(self, fault: str) -> None:
        limits = _Limits(self.server.hostile)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

        def event(n: int, ids: list[int]) -> dict[str, Any]:
            return {"content": "x", "tokens": ids, "stop": False, "tokens_predicted": n, "tokens_evaluated": 10}

        if fault == "cut_mid_event":
            self._event(event(1, [VALID_ID]))
            self._event(event(2, [VALID_ID]))
            self.wfile.write(b'data: {"content": "x", "tokens": [2')
            self.wfile.flush()
        elif fault == "ids_outside_vocab":
            self._event(event(1, [VALID_ID]))
            self._event(event(2, [10_000_000]))
        elif fault == "endless_line":
            self.wfile.write(b'data: {"tokens": [')
            chunk = b"1" * (64 << 10)
            while limits.more(len(chunk)):
                self.wfile.write(chunk)
        elif fault == "empty_events":
            while limits.more(1) and not self.server.hostile.stopping.wait(0.01):
                self._event(event(0, []))
        elif fault == "endless_ids":
            n = 0
            while limits.more(1):
                n += 1
                self._event(event(n, [VALID_ID]))
        elif fault == "held_open":
            self._event(event(1, [VALID_ID]))
            self.server.hostile.stopping.wait(self.server.hostile.limit_s)
        elif fault == "not_json_event":
            self._event(b"{not json")
        elif fault == "list_event":
            self._event(b"[1, 2, 3]")
        elif fault == "error_event":
            self._event({"error": {"code": 500, "message": "hostile failure mid-reply", "type": "server_error"}})
        else:
            raise ValueError(f"unknown stream fault {fault!r}")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    hostile: "HostileServer"


class HostileServer:
    """A hostile server on a free loopback port; ``faults`` maps a path to a fault's name.

    ``upstream``: the URL of the real server every other path is passed to (None: they answer 404).
    ``limit_bytes`` / ``limit_s``: the most any one answer sends, and for how long.
    """

    def __init__(self, upstream: str | None, faults: dict[str, str] | None = None, *,
                 limit_bytes: int = 256 << 20, limit_s: float = 60.0) -> None:
        unknown = set((faults or {}).values()) - set(FAULTS) - set(STREAM_FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}")
        self.upstream = upstream.rstrip("/") if upstream else None
        self.faults = dict(faults or {})
        self.limit_bytes = limit_bytes
        self.limit_s = limit_s
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        #: requests per path, so a test can tell that the faulty endpoint was reached
        self.hits: dict[str, int] = {}
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.hostile = self
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="hostile-server", daemon=True)

    def start(self) -> "HostileServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, end every loop still writing (they check ``stopping``), close the socket."""
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def __enter__(self) -> "HostileServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
