"""The remote backend: our prompt ids to an inference server over HTTP, its ids back.

The same contract as the local engines (:class:`backends.base.Backend`): ids in, ids
out, no text.  One adapter per server kind (:mod:`backends.remote_llamacpp`,
:mod:`backends.remote_vllm`, :mod:`backends.remote_sglang`) knows the JSON; this
module owns the connection (one ``httpx.Client`` per server, streamed server-sent
events read line by line with a cap), the timeouts, the faults and the accounting.

* **Streaming and cancel.**  A reader thread reads the event stream and queues the ids;
  :meth:`RemoteBackend.generate` yields them.  Cancelling, one of our stop ids, the
  ``max_tokens`` limit or a timeout shuts the socket down under the reader, which closes
  the connection: every one of these servers stops generating when its client goes.
* **Timeouts.**  ``connect_timeout_s`` to reach the server and for every answer that
  is not generation (``/health``, ``/props``, the ``/tokenize`` probe: a frozen server
  fails the connect in that time), ``first_token_timeout_s`` for the first id (a big
  prompt on a busy server takes a while), ``idle_timeout_s`` between ids.  Each ends the
  turn with one line; the partial reply is kept by the session.  Only an event with ids or
  new prompt progress holds those deadlines off: endless empty events do not.
* **Caps** (:mod:`backends.remote_http`): an answer that is not streamed is read whole
  within its deadline (headers included) and at most 16 MiB; a stream's lines and events
  are capped too, and an id outside our vocabulary ends the turn.  A server that keeps
  sending cannot take the memory or the time (issue 34).
* **Exact accounting.**  Every turn compares the ids received with the server's own count
  (``tokens_predicted``, ``usage.completion_tokens``, ``meta_info.completion_tokens``)
  and our prompt length with the server's; the generation's ``stats.verified`` is False
  when they differ or when an id could not be recovered (``stats.note`` says why), and the
  session marks that turn's counts "unverified".  ``stats.prompt_evaluated`` is the
  server's number (``timings.prompt_n``, prompt minus ``cached_tokens``); its prompt
  progress, speculation counts, speed and finish reason go in the same stats.
* **What the server keeps.**  ``state`` (a :class:`backends.remote_protocol.ServerState`, set at
  connect by :func:`backends.remote_slots.server_state`) is asked before every turn and told after
  it: llama-server's slots saved to and restored from its disk, or one line saying what the server
  keeps (``stats.state``).

Not handled here: choosing the tokenizer and checking the vocabulary at connect
(:mod:`backends.remote_connect`), TLS client certificates, HTTP/2 (httpx can, once the
``h2`` package is installed).
"""
from __future__ import annotations

import json
import queue
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Generator, Iterator, Sequence

from backends.base import (
    BackendError, BackendInfo, Generation, GenerationStats, LoadOptions, ProgressListener, PromptProgress,
    SamplingParams, checked_prompt, resolve_seed,
)
from backends.handoff import ENDED, Failed, drain
from backends.remote_protocol import (
    Adapter, RecoveringAdapter, Request, SaidOnce, ServerCounts, ServerInfo, ServerState, error_message
)
from backends.timeouts import REMOTE_CONNECT_S, REMOTE_FIRST_TOKEN_S, REMOTE_IDLE_S


@dataclass
class RemoteSettings:
    """Where the server is and how patient to be with it."""

    url: str
    kind: str = "auto"  # auto | llamacpp | vllm | sglang
    api_key: str | None = None
    connect_timeout_s: float = REMOTE_CONNECT_S
    first_token_timeout_s: float = REMOTE_FIRST_TOKEN_S
    idle_timeout_s: float = REMOTE_IDLE_S
    verify_tls: bool = True
    #: skip the vocabulary check at connect (the ids may then mean other text on the server)
    trust_server_vocab: bool = False
    headers: dict[str, str] = field(default_factory=dict)


def _http_error(response: Any, url: str) -> BackendError:
    """One line for an HTTP error status, with the server's own message."""
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    message = error_message(body) or response.reason_phrase or "no message"
    status = response.status_code
    if status in (401, 403):
        return BackendError(
            f"the server at {url} refused the request ({status}: {message}): "
            "pass its API key with --api-key or TOKCHAT_API_KEY"
        )
    if status == 404:
        return BackendError(f"the server at {url} has no {response.request.url.path} ({message}): "
                            "is it the kind of server --server-kind says?")
    if status == 503:
        return BackendError(f"the server at {url} is not ready (503: {message}); try again when it is")
    if status == 429:
        # not waited for here: a Retry-After of an hour would be a hang; the user decides
        after = str(response.headers.get("retry-after", "")).strip()[:40]
        when = f"it asks to wait {after} s" if after.isdigit() else f"it asks to wait until {after}" if after \
            else "try again later"
        return BackendError(f"the server at {url} is busy (429: {message}); {when}")
    return BackendError(f"the server at {url} answered {status}: {message}")


def _speaks_plain_http(url: str, timeout_s: float) -> bool:
    """True when ``url`` (an https:// one) answers plain HTTP on the same host and port."""
    import httpx

    from backends.remote_http import bounded_request

    plain = "http://" + url.split("://", 1)[1]
    patience = min(timeout_s, 5.0)
    try:
        with httpx.Client(base_url=plain.rstrip("/"), timeout=patience) as client:
            bounded_request(client, Request("GET", "/health"), url=plain, total_s=patience, max_bytes=1 << 20)
    except (httpx.HTTPError, BackendError):
        return False  # no plain-HTTP answer in time either: say it cannot be reached
    return True


def _transport_error(exc: Exception, url: str, *, streaming: bool, path: str = "",
                     timeout_s: float | None = None) -> BackendError:
    """One line for a failed request; ``path`` and ``timeout_s`` name a connect-time request."""
    import httpx

    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        tls = "SSL" in str(exc) or "TLS" in str(exc) or isinstance(exc, httpx.ConnectTimeout)
        if url.startswith("https://") and tls and _speaks_plain_http(url, timeout_s or 5.0):
            return BackendError(f"the server at {url} does not speak TLS (it answers plain HTTP): "
                                f"use {'http://' + url.split('://', 1)[1]}")
        return BackendError(f"cannot reach the server at {url} ({exc}): is it running? (--server URL)")
    if isinstance(exc, httpx.TimeoutException) and path and timeout_s is not None:
        return BackendError(f"the server at {url} accepted the connection but did not answer {path} within "
                            f"{timeout_s:g} s (server.connect_timeout): is it paused, hung or overloaded?")
    if isinstance(exc, httpx.TimeoutException):
        return BackendError(f"the server at {url} did not answer in time ({type(exc).__name__})")
    if streaming:
        return BackendError(f"the connection to {url} broke mid-reply ({type(exc).__name__}: {exc}); "
                            "the server may have stopped")
    where = f" on {path}" if path else ""
    hint = ""
    if url.startswith("http://") and isinstance(exc, httpx.RemoteProtocolError) and "illegal" in str(exc):
        hint = f": not HTTP; if it speaks TLS, use {'https://' + url.split('://', 1)[1]}"
    return BackendError(f"the connection to {url} failed{where} ({type(exc).__name__}: {exc}){hint}")


#: how long closing waits for a slot save under way (the bound issue 45 sets on quitting); the server finishes a
#: save it was sent whether tokchat still waits or not
CLOSE_WAIT_S = 1.0

#: a kept-alive connection the server closed meanwhile fails before any answer, like this
_STALE = ("RemoteProtocolError", "ReadError", "WriteError")


def _send(client: Any, request: Request, url: str, total_s: float, timeout: Any = None,
          what: str = "server.connect_timeout") -> Any:
    """One bounded request (:func:`backends.remote_http.bounded_request`: its whole answer within
    ``total_s`` and a size cap), sent once more when a pooled connection turned out to be closed.

    The server never saw the first attempt (it failed before any byte of an answer),
    so sending again is safe; servers close idle kept-alive connections whenever they like.
    ``timeout`` (an ``httpx.Timeout``) replaces the client's short connect-time one.
    """
    from backends.remote_http import bounded_request

    for attempt in (1, 2):
        try:
            return bounded_request(client, request, url=url, total_s=total_s, timeout=timeout, what=what)
        except Exception as exc:
            if attempt == 2 or type(exc).__name__ not in _STALE:
                raise
    raise AssertionError("unreachable: the second attempt returns or raises")


@contextmanager
def _open_stream(client: Any, request: Request, timeout: Any, trace: Any,
                 aborted: threading.Event) -> Iterator[Any]:
    """``client.stream`` with the same one retry as :func:`_send`, before any answer only and not
    after an abort (which fails the request the same way); ``trace`` (httpcore's trace extension)
    is handed the socket of a new connection."""
    for attempt in (1, 2):
        stream = client.stream(request.method, request.path, json=request.body, timeout=timeout,
                               headers={"Accept-Encoding": "identity"}, extensions={"trace": trace})
        try:
            resp = stream.__enter__()
        except Exception as exc:
            if attempt == 2 or type(exc).__name__ not in _STALE or aborted.is_set():
                raise
            continue
        try:
            yield resp
        finally:
            stream.__exit__(None, None, None)
        return


@dataclass(frozen=True)
class _Ids:
    """What one server event carried: its ids, the server's count of ids so far, and whether it moved the
    turn on (ids or new prompt progress; only that holds off the first-token and idle deadlines)."""

    ids: list[int]
    count: int | None
    advanced: bool


class _Stream:
    """One turn's HTTP stream read on its own thread; :meth:`abort` ends it from any thread."""

    def __init__(self, backend: "RemoteBackend", request: Request, parser: Any, report: ProgressListener) -> None:
        #: :class:`_Ids`, then the end marker (:mod:`backends.handoff`): ``ENDED`` or ``Failed(error)``
        self.events: queue.Queue[object] = queue.Queue()
        self._backend = backend
        self._request = request
        self.parser = parser
        #: called on this reader thread with the server's every new prompt progress
        self._report = report
        self._aborted = threading.Event()
        from backends.remote_http import SocketTrap

        self._trap = SocketTrap()  # the connection's socket, as soon as it is opened
        self.thread = threading.Thread(target=self._run, name="tokchat-remote-stream", daemon=True)

    def _run(self) -> None:
        import httpx

        from backends.remote_http import METADATA_MAX_BYTES, held_response, iter_sse_data, read_capped

        backend = self._backend
        url, path = backend.settings.url, self._request.path
        try:
            with _open_stream(backend.client, self._request, backend.generation_timeout, self._trap.trace,
                              self._aborted) as resp:
                self._trap.add_response(resp)
                if self._aborted.is_set():
                    return
                if resp.status_code >= 400:
                    def too_large() -> BackendError:
                        return BackendError(f"the server at {url} answered {path} with {resp.status_code} "
                                            f"and an error body over {METADATA_MAX_BYTES >> 20} MiB")

                    body = read_capped(resp.iter_bytes(), METADATA_MAX_BYTES, too_large, lambda: False, too_large)
                    raise _http_error(held_response(resp, body), url)
                for data in iter_sse_data(resp, url=url, path=path):
                    if self._aborted.is_set():
                        return
                    data = data.strip()
                    if not data:
                        continue  # a keep-alive ping
                    if data == "[DONE]":
                        break
                    event = json.loads(data)
                    if isinstance(event, dict) and "error" in event:
                        raise BackendError(f"the server at {url} failed mid-reply: {error_message(event)}")
                    if not isinstance(event, dict):
                        raise BackendError(f"the server at {url} sent an event on {path} that is not a JSON object")
                    progress_before = self.parser.counts.progress
                    try:
                        ids = self.parser.feed(event)
                    except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:
                        raise BackendError(f"the server at {url} sent an event on {path} that tokchat cannot "
                                           f"read ({type(exc).__name__}: {str(exc)[:120]})") from None
                    progress = self.parser.counts.progress
                    if progress is not None and progress != progress_before:
                        done, total, seconds = progress
                        self._report(PromptProgress(done, total, time.monotonic() - seconds))
                    # an event moves the turn on when it carries ids or new prompt progress: only then does
                    # it hold off the first-token and idle deadlines (an endless run of empty events does not)
                    advanced = bool(ids) or progress != progress_before
                    self.events.put(_Ids(ids, self.parser.counts.completion_tokens, advanced))
                    # read on after the finish event: vLLM's last chunk carries the usage
        except BackendError as exc:
            self.events.put(Failed(exc))
        except (json.JSONDecodeError, RecursionError) as exc:
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deep"
            self.events.put(Failed(BackendError(f"the server at {url} sent an event that is not JSON ({why})")))
        except (httpx.HTTPError, OSError) as exc:
            if not self._aborted.is_set():
                self.events.put(Failed(_transport_error(exc, url, streaming=True)))
        except RuntimeError as exc:  # httpx: the client was closed (the chat ended) before this request began
            if not self._aborted.is_set():
                self.events.put(Failed(BackendError(f"the connection to {url} was closed ({exc})")))
        finally:
            self.events.put(ENDED)

    def start(self) -> None:
        self.thread.start()

    def abort(self) -> None:
        """Close the connection under the reader (the server then stops generating), even one still
        waiting for the answer's headers."""
        self._aborted.set()
        self._trap.close()


class RemoteBackend:
    """A model served by llama-server, vLLM or SGLang; see the module docstring."""

    def __init__(self, settings: RemoteSettings, adapter: Adapter) -> None:
        import httpx

        self.settings = settings
        self.adapter = adapter
        headers = dict(settings.headers)
        if settings.api_key:
            headers["Authorization"] = f"Bearer {settings.api_key}"
        # every request but generation answers within the connect timeout (a frozen server
        # fails the connect in that time); generation waits as long as the turn's deadlines
        patience = max(settings.first_token_timeout_s, settings.idle_timeout_s) + 5.0
        self.generation_timeout = httpx.Timeout(connect=settings.connect_timeout_s, read=patience,
                                                write=30.0, pool=30.0)
        self.client = httpx.Client(
            base_url=settings.url.rstrip("/"), headers=headers, verify=settings.verify_tls,
            timeout=httpx.Timeout(settings.connect_timeout_s),
        )
        self.server: ServerInfo | None = None
        self.info = BackendInfo(backend="remote", device=adapter.kind, model_name="", quantization="",
                                context_size=0)
        self._stream: _Stream | None = None
        self._cancel = threading.Event()
        #: the size of our tokenizer's vocabulary (set at connect): an id outside it is the server's error
        self.vocab_size = 0
        #: what tokchat does with what the server keeps between runs (set at connect: backends.remote_slots)
        self.state: ServerState = SaidOnce("")

    # -- plain requests ---------------------------------------------------------------------

    def request_json(self, request: Request, *, allow_missing: bool = False, generation: bool = False) -> Any:
        """Send one non-streamed request; its JSON, or None for a 404 when ``allow_missing``.

        The whole answer within the connect timeout, unless ``generation`` (the model runs to
        answer it: the first-token patience); never more than a size cap (:mod:`backends.remote_http`).
        """
        import httpx

        if generation:
            total_s, what = self.settings.first_token_timeout_s + self.settings.idle_timeout_s, \
                "server.first_token_timeout + server.idle_timeout"
        else:
            total_s, what = self.settings.connect_timeout_s, "server.connect_timeout"
        try:
            resp = _send(self.client, request, self.settings.url, total_s,
                         self.generation_timeout if generation else None, what)
        except httpx.HTTPError as exc:
            if generation:
                raise _transport_error(exc, self.settings.url, streaming=False) from exc
            raise _transport_error(exc, self.settings.url, streaming=False, path=request.path,
                                   timeout_s=self.settings.connect_timeout_s) from exc
        if allow_missing and resp.status_code in (404, 405):
            return None
        if resp.status_code >= 400:
            raise _http_error(resp, self.settings.url)
        try:
            return resp.json()
        except (ValueError, RecursionError) as exc:
            raise BackendError(f"the server at {self.settings.url} answered {request.path} "
                               "with something that is not JSON") from exc

    def describe(self) -> ServerInfo:
        """Ask the server what it is and serves (its info endpoints); sets ``info``."""
        replies = {r.path: self.request_json(r, allow_missing=True) for r in self.adapter.info_requests()}
        try:
            server = self.adapter.server_info(self.settings.url, replies)
            context_size = int(server.context_size or 0)
        except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:
            paths = " and ".join(replies)
            raise BackendError(f"the server at {self.settings.url} answered {paths} with JSON tokchat cannot read "
                               f"({type(exc).__name__}: {str(exc)[:120]}): is it the kind of server "
                               "--server-kind says?") from None
        self.server = server
        from urllib.parse import urlsplit

        self.info = BackendInfo(
            backend="remote", device=f"{server.kind} at {urlsplit(server.url).netloc}",
            model_name=Path(server.model).name or server.model, quantization="served",
            context_size=context_size,
            notes=[f"remote: {server.kind} {server.version} at {server.url}".replace("  ", " ")],
        )
        return server

    def tokenize(self, text: str) -> list[int]:
        """The server's own ids for ``text`` (special tokens parsed, nothing added)."""
        request = self.adapter.tokenize(text)
        try:
            return self.adapter.tokenized_ids(self.request_json(request))
        except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:
            raise BackendError(f"the server at {self.settings.url} answered {request.path} with JSON tokchat "
                               f"cannot read ({type(exc).__name__}: {str(exc)[:120]})") from None

    # -- the Backend protocol ---------------------------------------------------------------

    def load(self, model_path: Path, options: LoadOptions) -> None:
        """Nothing to load: the server holds the weights.  ``n_ctx`` may only narrow its context."""
        if options.n_ctx and self.info.context_size and options.n_ctx < self.info.context_size:
            self.info.context_size = options.n_ctx

    def generate(
        self, prompt_ids: Sequence[int], sampling: SamplingParams, stop_ids: Collection[int],
        on_progress: ProgressListener | None = None,
    ) -> Generation:
        """The server's ids; its own counts, prompt progress (llama-server's ``return_progress``; called
        on the stream's reader thread) and speculation numbers in ``stats``."""
        prompt = checked_prompt(prompt_ids, self.info.context_size or 1 << 30)
        seed = resolve_seed(sampling)
        self._cancel.clear()
        stats = GenerationStats()
        stops = frozenset(stop_ids)

        def report(progress: PromptProgress) -> None:
            stats.progress = progress
            if on_progress is not None:
                on_progress(progress)

        return Generation(self._turn(prompt, sampling, stops, seed, stats, report), stats,
                          stop_ids=stops, max_tokens=sampling.max_tokens)

    def _turn(self, prompt: list[int], sampling: SamplingParams, stops: frozenset[int], seed: int,
              stats: GenerationStats, report: ProgressListener) -> Generator[int, None, None]:
        parser = self.adapter.parser(prompt)
        # a saved slot restored here, before the prompt is sent, counts in the time to the first id
        request = self.state.prepare(prompt, self.adapter.completion(prompt, sampling, stops, seed), stats)
        stream = _Stream(self, request, parser, report)
        self._stream = stream
        received: list[int] = []
        expected: int | None = None  # the server's count at the last id we passed on
        ended = False  # the server finished the reply (as opposed to us stopping it)
        stopped = False
        failed = False  # the turn ended in an error: the server's cache is nothing to keep
        last = time.monotonic()
        stream.start()

        def silence() -> None:
            self._check_patience(time.monotonic() - last, bool(received))

        try:
            for event in drain(stream.events, self._cancel.is_set, on_silence=silence):
                assert isinstance(event, _Ids)
                if not event.advanced:
                    # an event that moves nothing on counts against the deadline as silence does (a server
                    # sending empty events faster than the poll never leaves the queue empty)
                    silence()
                else:
                    last = time.monotonic()
                ids, count = event.ids, event.count
                for n, token in enumerate(ids):
                    if self.vocab_size and not 0 <= token < self.vocab_size:
                        raise BackendError(f"the server at {self.settings.url} sent token id {token}, outside "
                                           f"the vocabulary (ids 0 to {self.vocab_size - 1}): is it serving "
                                           "another model? The reply so far is kept")
                    if count is not None:
                        expected = count - (len(ids) - n - 1)  # the server's count up to this id
                    received.append(token)
                    yield token  # the consumer may close us here: the accounting is already right
                    last = time.monotonic()  # the consumer's time with the id is not the server's silence
                    if token in stops or len(received) >= sampling.max_tokens or self._cancel.is_set():
                        stopped = True
                        break
                if stopped:
                    break
                if not ids and count is not None:
                    expected = count
            ended = not stopped  # the stream ran out: the server finished (or the cancel below ended it)
            if self._cancel.is_set():
                return  # cancel() closed the stream: its end is ours, not the server's
            if ended and parser.finished():
                expected = parser.counts.completion_tokens
                yield from self._recover_tail(prompt, sampling, seed, received, parser.counts.completion_tokens,
                                              stats)
                if not received:
                    raise BackendError(f"the server at {self.settings.url} ended the reply without sending a "
                                       "single token id: is it the kind of server --server-kind says?")
            elif ended:
                raise BackendError(f"the server at {self.settings.url} closed the stream before the reply "
                                   "finished; the reply so far is kept")
            if ended:
                self._said_cut(parser.counts, len(received), sampling.max_tokens, stats)
        except BackendError:
            failed = True
            raise
        finally:
            stream.abort()
            self._account(prompt, received, expected, parser, stats)
            if received and not failed:
                self.state.after(prompt + received, parser.counts)

    def _said_cut(self, counts: ServerCounts, received: int, max_tokens: int, stats: GenerationStats) -> None:
        """A reply the server ended itself, short of the end of text and of ``max_tokens``: an abort
        (SGLang's and vLLM's ``abort``) fails the turn in one line; the server's own cap (llama-server's
        ``stop_type "limit"`` from its ``-n``, or its context) is a "length" the turn reports as cut,
        in ``stats.notice``'s words."""
        ids = f"{received} id{'s' if received != 1 else ''}"
        said = f" ({counts.said})" if counts.said else ""
        if counts.finish == "error":
            raise BackendError(f"the server at {self.settings.url} aborted the reply after {ids}{said}; the reply "
                               "so far is kept as cut and can be continued")
        if counts.finish == "length" and received < max_tokens:
            stats.notice = (f"the server at {self.settings.url} ended the reply after {ids}, before the {max_tokens} "
                            f"asked for{said}: a limit of its own (its -n / --n-predict, or its context); the "
                            "reply so far is kept as cut and can be continued")

    def _check_patience(self, waited: float, received: bool) -> None:
        """One line when the server has moved nothing on for longer than the turn's deadline allows."""
        limit = self.settings.idle_timeout_s if received else self.settings.first_token_timeout_s
        if waited > limit:
            what = "the next token" if received else "the first token"
            raise BackendError(f"the server at {self.settings.url} sent nothing for {waited:.0f} s "
                               f"while tokchat waited for {what}; the reply so far is kept")

    def _recover_tail(self, prompt: list[int], sampling: SamplingParams, seed: int, received: list[int],
                      total: int | None, stats: GenerationStats) -> Iterator[int]:
        """Ids the server generated but the stream never carried (a reply ending mid-character).

        Only llama-server holds ids back (see :mod:`backends.remote_llamacpp`); its
        non-streamed ``return_tokens`` answer for the same seeded turn has them all.
        They are used only when that answer starts with the ids already shown.
        """
        adapter = self.adapter
        if total is None or total <= len(received) or not isinstance(adapter, RecoveringAdapter):
            return
        body = self.request_json(adapter.recovery(prompt, sampling, seed, total), generation=True)
        ids = adapter.recovered_ids(body)
        if len(ids) != total or ids[: len(received)] != received:
            return  # the accounting marks the turn unverified
        tail = ids[len(received):]
        stats.note = f"{len(tail)} id(s) the stream held back were fetched again without streaming"
        for token in tail:
            received.append(token)
            yield token

    def _account(self, prompt: list[int], received: list[int], expected: int | None, parser: Any,
                 stats: GenerationStats) -> None:
        """The server's own numbers for this turn into ``stats``, checked against what was received."""
        counts = parser.counts
        if counts.evaluated_tokens is not None:
            stats.prompt_evaluated = counts.evaluated_tokens
        elif counts.cached_tokens is not None:
            stats.prompt_evaluated = len(prompt) - counts.cached_tokens
        else:
            stats.prompt_evaluated = len(prompt)
        stats.draft, stats.counted, stats.tokens_per_s = counts.draft, counts.completion_tokens, counts.tokens_per_s
        if counts.finish and not self._cancel.is_set():
            stats.end(counts.finish)
        problems = []
        if expected is not None and expected != len(received):
            problems.append(f"the server counted {expected} generated ids, tokchat received {len(received)}")
        if counts.prompt_tokens is not None and counts.prompt_tokens != len(prompt):
            problems.append(f"the server counted {counts.prompt_tokens} prompt ids, tokchat sent {len(prompt)}")
        if parser.unrecovered:
            problems.append(f"{parser.unrecovered} id(s) held back by the stream could not be recovered exactly")
        if received and expected is None:
            problems.append("the server reported no count to check against")
        if problems:
            stats.verified = False
            stats.note = "; ".join(problems)

    def cancel(self) -> None:
        self._cancel.set()
        if self._stream is not None:
            self._stream.abort()

    def close(self) -> None:
        """Cancel, wait a bounded while for a slot save under way (:data:`CLOSE_WAIT_S`), close the connection."""
        self.cancel()
        self.state.flush(CLOSE_WAIT_S)
        self.client.close()
