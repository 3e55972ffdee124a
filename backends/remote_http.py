"""Bounded reads from a server: every answer tokchat reads has a size cap and a deadline.

A server is not trusted to end what it sends.  httpx's timeouts are per read: a server
that keeps sending (an endless ``/props``, one byte a second) never trips them, and
``response.json()`` / ``iter_lines()`` keep whatever arrives in memory (issue 34: 6 GB
in 40 s).  So:

* :func:`bounded_request` (every answer that is not a streamed reply: ``/health``,
  ``/props``, ``/v1/models``, the ``/tokenize`` probe, a non-streamed recovery) reads
  at most :data:`METADATA_MAX_BYTES` and gives up after ``total_s`` in all, headers
  included: a watchdog shuts the socket down under the blocked read when the time is up.
  It asks with ``Connection: close`` so it always gets a fresh connection whose socket the
  watchdog knows (httpcore's documented ``trace`` extension hands it over at connect).
* :func:`iter_sse_data` reads a server-sent event stream line by line with at most
  :data:`STREAM_MAX_LINE` bytes per line (and per event), instead of httpx-sse's
  unbounded line buffer.

Each failure is one :class:`backends.base.BackendError` line naming the endpoint.
Not handled here: which timeouts apply (:mod:`backends.remote`), the stream's own
deadlines between ids (:meth:`backends.remote.RemoteBackend.generate`).
"""
from __future__ import annotations

import socket
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from backends.base import BackendError
from backends.remote_protocol import Request

#: the most a metadata answer may hold: llama-server's ``/props`` carries the chat template (tens of KiB),
#: a ``return_tokens`` recovery a few ids; 16 MiB is far beyond any real one and still harmless in memory
METADATA_MAX_BYTES = 16 << 20
#: the most one line (and one event) of a stream may hold: llama-server's last event repeats the prompt's
#: text and its settings, a few MiB for the longest contexts
STREAM_MAX_LINE = 16 << 20


class ResponseTooLarge(BackendError):
    """The server sent more than tokchat reads from that endpoint."""


def _shutdown(sock: Any) -> None:
    """End the connection under a blocked reader (closing the file descriptor would not wake it)."""
    if isinstance(sock, socket.socket):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            return  # already closed by the server: nothing is blocked on it


class SocketTrap:
    """The sockets a request opened, from httpcore's ``trace`` extension, so another thread can end them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: list[Any] = []
        self.closed = False

    def trace(self, event: str, info: dict[str, Any]) -> None:
        if event == "connection.connect_tcp.complete":
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            self.add(sock)

    def add(self, sock: Any) -> None:
        with self._lock:
            self._sockets.append(sock)
            closed = self.closed
        if closed:
            _shutdown(sock)

    def add_response(self, response: Any) -> None:
        """The socket under ``response`` (a pooled connection opened by an earlier request)."""
        stream = response.extensions.get("network_stream")
        self.add(stream.get_extra_info("socket") if stream is not None else None)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)


@contextmanager
def deadline(total_s: float) -> Iterator[SocketTrap]:
    """A :class:`SocketTrap` whose sockets are shut down once ``total_s`` has passed."""
    trap = SocketTrap()
    timer = threading.Timer(total_s, trap.close)
    timer.daemon = True
    timer.start()
    try:
        yield trap
    finally:
        timer.cancel()


def read_capped(chunks: Iterator[bytes], limit: int, too_large: Callable[[], BackendError],
                expired: Callable[[], bool], too_slow: Callable[[], BackendError]) -> bytes:
    """The whole body from ``chunks``; raises ``too_large()`` past ``limit`` bytes, ``too_slow()`` once expired."""
    parts: list[bytes] = []
    size = 0
    for chunk in chunks:
        if expired():
            raise too_slow()
        size += len(chunk)
        if size > limit:
            raise too_large()
        parts.append(chunk)
    if expired():  # the watchdog's shutdown looks like the end of a body sent without a length: it is not one
        raise too_slow()
    return b"".join(parts)


def bounded_request(client: Any, request: Request, *, url: str, total_s: float, timeout: Any = None,
                    max_bytes: int = METADATA_MAX_BYTES, what: str = "server.connect_timeout") -> Any:
    """Send ``request`` and read its whole answer within ``total_s`` and ``max_bytes``.

    Returns an ``httpx.Response`` holding the body.  Raises httpx's errors for a failed
    connection (the caller words them) and a :class:`BackendError` line for an answer too
    large or too slow; ``what`` names the setting behind ``total_s`` in that line.
    """
    import httpx

    extra: dict[str, Any] = {"timeout": timeout} if timeout is not None else {}
    path = request.path

    def too_slow() -> BackendError:
        return BackendError(f"the server at {url} accepted the connection but did not answer {path} within "
                            f"{total_s:g} s ({what}): is it paused, hung, overloaded or sending on and on?")

    def too_large() -> BackendError:
        return ResponseTooLarge(f"the server at {url} sent more than {max_bytes >> 20} MiB for {path}, far more "
                                "than any real answer: tokchat stopped reading (is it the server you meant?)")

    with deadline(total_s) as trap:
        try:
            with client.stream(request.method, path, json=request.body,
                               headers={"Connection": "close", "Accept-Encoding": "identity"},
                               extensions={"trace": trap.trace}, **extra) as resp:
                trap.add_response(resp)
                declared = resp.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > max_bytes:
                    raise too_large()
                body = read_capped(resp.iter_bytes(), max_bytes, too_large, lambda: trap.closed, too_slow)
                return held_response(resp, body)
        except (httpx.ConnectError, httpx.ConnectTimeout):
            raise  # the connection itself (TCP, TLS) failed: the caller says why (plain HTTP on a TLS port...)
        except (httpx.HTTPError, OSError):
            if trap.closed:
                raise too_slow() from None
            raise


def held_response(resp: Any, body: bytes) -> Any:
    """An ``httpx.Response`` holding ``body`` (already read and decoded) and the headers tokchat reads."""
    import httpx

    kept = {k: v for k, v in resp.headers.items() if k.lower() in ("content-type", "retry-after", "location")}
    return httpx.Response(resp.status_code, headers=kept, content=body, request=resp.request)


def _lines(chunks: Iterator[bytes], limit: int, too_long: Callable[[], BackendError]) -> Iterator[bytes]:
    """Lines of a byte stream without their LF or CRLF, none longer than ``limit`` (the servers tokchat
    speaks to end lines with LF; SSE's lone-CR endings are not used by any of them)."""
    buffer = bytearray()
    for chunk in chunks:
        start, scanned = 0, len(buffer)  # the bytes kept from before hold no line end: never scanned twice
        buffer += chunk
        while (cut := buffer.find(b"\n", scanned)) >= 0:
            line = bytes(buffer[start:cut])
            start = scanned = cut + 1
            yield line[:-1] if line.endswith(b"\r") else line
        del buffer[:start]
        if len(buffer) > limit:
            raise too_long()
    if buffer:
        yield bytes(buffer)


def iter_sse_data(response: Any, *, url: str, path: str, limit: int = STREAM_MAX_LINE) -> Iterator[str]:
    """The ``data`` of each event of a server-sent event stream, every line and event capped at ``limit``.

    Only ``data`` matters to tokchat (no server it speaks to names events); comments and
    other fields are skipped.  A body that is not ``text/event-stream`` is refused.
    """
    content_type = response.headers.get("content-type", "").partition(";")[0].strip()
    if content_type != "text/event-stream":
        raise BackendError(f"the server at {url} did not answer {path} with an event stream "
                           f"(it sent {content_type or 'no content type'})")

    def too_long() -> BackendError:
        return ResponseTooLarge(f"the server at {url} sent an event longer than {limit >> 20} MiB on {path}: "
                                "tokchat stopped reading (is it the server you meant?)")

    data: list[bytes] = []
    size = 0
    for line in _lines(response.iter_bytes(), limit, too_long):
        if not line:
            if data:
                yield b"\n".join(data).decode("utf-8", errors="replace")
            data, size = [], 0
            continue
        field, _, value = line.partition(b":")
        if field != b"data":
            continue  # a comment (": ping"), event, id or retry line
        value = value[1:] if value.startswith(b" ") else value
        size += len(value) + 1
        if size > limit:
            raise too_long()
        data.append(value)
    if data == [b"[DONE]"]:
        yield "[DONE]"  # an end marker without its blank line: nothing is lost
    elif data:  # a stream cut after a data line but before its blank line: the event never completed
        raise BackendError(f"the server at {url} cut the stream on {path} in the middle of an event")

