"""A loopback server in front of a real ``llama-server`` whose chosen paths answer as a test scripts them.

:mod:`hostile_server` breaks endpoints (sizes, times, malformed bodies); this one keeps them
well formed and changes what they *say*: ``/props`` naming a model file that is not on this
machine, a ``/completion`` stream whose ids decode to escape sequences, a redirect.  Every
path without a script is passed through to the real server unchanged, so the connect
sequence and the vocabulary check are the real ones.

A script is a function of the request's JSON body (``{}`` for a GET) and the upstream's
answer to the same request (fetched only when the script asks for it) that returns a
:class:`Reply`.  Loopback only; :meth:`ScriptedProxy.stop` ends it.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import httpx


@dataclass
class Reply:
    """What a scripted path answers: a status, headers and a JSON body, or server-sent ``events``."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    #: when set, the answer is ``text/event-stream``: one ``data:`` line per event
    events: list[dict] | None = None


#: (the request's JSON body, a call that fetches the upstream's JSON answer to it) -> the reply
Script = Callable[[dict, Callable[[], Any]], Reply]


def token_stream(ids: list[int], pieces: list[str], prompt_len: int) -> list[dict]:
    """llama-server's ``/completion`` events for a reply of ``ids`` (one event per id, then the stop event)."""
    events = [{"content": piece, "tokens": [tid], "stop": False, "tokens_predicted": n, "tokens_evaluated": prompt_len}
              for n, (tid, piece) in enumerate(zip(ids, pieces), start=1)]
    events.append({"content": "", "tokens": [], "stop": True, "stop_type": "eos", "tokens_predicted": len(ids),
                   "tokens_evaluated": prompt_len,
                   "timings": {"prompt_n": prompt_len, "cache_n": 0, "predicted_per_second": 100.0}})
    return events


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server: "_Server"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests assert on tokchat's output."""

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def _answer(self) -> None:
        proxy = self.server.proxy
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        with proxy.lock:
            proxy.requests.append((path, json.loads(raw) if raw else {}))
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")}

        def upstream() -> Any:
            resp = httpx.request(self.command, proxy.upstream + self.path, content=raw or None, headers=headers,
                                 timeout=120.0)
            return resp.json()

        script = proxy.scripts.get(path)
        try:
            if script is None:
                self._pass_through(raw, headers)
            else:
                self._send(script(json.loads(raw) if raw else {}, upstream))
        except (BrokenPipeError, ConnectionResetError):
            return  # the client hung up

    def _pass_through(self, raw: bytes, headers: dict[str, str]) -> None:
        with httpx.stream(self.command, self.server.proxy.upstream + self.path, content=raw or None,
                          headers=headers, timeout=120.0) as resp:
            self.send_response(resp.status_code)
            self.send_header("Content-Type", resp.headers.get("content-type", "application/json"))
            self.end_headers()
            for chunk in resp.iter_raw():
                self.wfile.write(chunk)
                self.wfile.flush()

    def _send(self, reply: Reply) -> None:
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if reply.events is not None:
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for event in reply.events:
                self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                self.wfile.flush()
            return
        payload = b"" if reply.body is None else json.dumps(reply.body).encode()
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    proxy: "ScriptedProxy"


class ScriptedProxy:
    """The proxy on a free loopback port; ``scripts`` maps a path to its :data:`Script`."""

    def __init__(self, upstream: str, scripts: dict[str, Script]) -> None:
        self.upstream = upstream.rstrip("/")
        self.scripts = dict(scripts)
        self.lock = threading.Lock()
        #: (path, JSON body) of every request, in order
        self.requests: list[tuple[str, dict]] = []
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="scripted-proxy", daemon=True)

    def __enter__(self) -> "ScriptedProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
