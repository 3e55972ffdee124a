"""Every remote code path against every fault of :mod:`hostile_server` (issue 34, item 4 and its harness).

The connect sequence (``/health``, ``/props``, ``/v1/models``, the ``/tokenize`` probe), the
streamed ``/completion`` and ``doctor --server``'s report run in this process against a
:class:`HostileServer` in front of a real ``llama-server``; each must end in bounded time
(a guard thread: a call still running after :data:`GUARD_S` fails the test) and bounded
memory (tracemalloc's peak over the call), with one :class:`BackendError` line, naming the
endpoint when only a cap could stop the fault.  The command-line tests run real tokchat
processes (:mod:`test_remote_hostile_cli`).
"""
from __future__ import annotations

import threading
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import pytest
from support.hostile_server import FAULTS, STREAM_FAULTS, VALID_ID, HostileServer
from support.remote_servers import LlamaServer

from backends.base import BackendError, SamplingParams
from backends.remote import RemoteSettings
from backends.remote_connect import connect
from tokenizer import load_tokenizer

pytestmark = pytest.mark.slow

#: every request of the connect sequence, in its order
CONNECT_PATHS = ("/health", "/props", "/v1/models", "/tokenize")
#: faults only a size or time cap ends: each must fail, and say which endpoint
UNBOUNDED = ("endless", "huge", "slow_body", "slow_headers")
#: the connect timeout given to tokchat, so a slow fault costs seconds, not the default ten
PATIENCE_S = 2.0
#: a guard against a hang, not a measurement: a call still running after this fails the test
GUARD_S = 60.0
#: the most memory one call may take (tokchat's caps are 16 MiB); an unbounded read takes the hostile
#: server's 256 MiB
MEMORY_BOUND = 64 << 20


@pytest.fixture(scope="module")
def upstream(smollm_path: Path, tmp_path_factory: pytest.TempPathFactory):
    server = LlamaServer(smollm_path, tmp_path_factory.mktemp("upstream")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tokenizer(smollm_path: Path) -> Any:
    return load_tokenizer(smollm_path)


def bounded(call: Callable[[], Any]) -> tuple[Any, BaseException | None, int]:
    """``call()`` on a thread under tracemalloc: (its result, its exception, the peak bytes allocated)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except BaseException as exc:  # handed to the test, which asserts on it
            outcome["error"] = exc

    crashed: list[str] = []  # a reader thread that died of an exception (its traceback would reach the terminal)
    hook = threading.excepthook
    threading.excepthook = lambda args: crashed.append(f"{args.thread.name}: {args.exc_type.__name__}: "
                                                         f"{args.exc_value}")
    tracemalloc.start()
    try:
        thread = threading.Thread(target=run, name="bounded-call", daemon=True)
        thread.start()
        thread.join(GUARD_S)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        threading.excepthook = hook
    assert not thread.is_alive(), f"still running after {GUARD_S:g} s: a hang"
    assert not crashed, crashed
    return outcome.get("result"), outcome.get("error"), peak


def settings(url: str, **timeouts: float) -> RemoteSettings:
    values = {"connect_timeout_s": PATIENCE_S, "first_token_timeout_s": 5.0, "idle_timeout_s": 5.0, **timeouts}
    return RemoteSettings(url=url, **values)


def one_line(error: BaseException | None) -> str:
    assert isinstance(error, BackendError), f"not a one-line BackendError: {error!r}"
    message = str(error)
    assert message and "\n" not in message and "Traceback" not in message, message
    return message


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("path", CONNECT_PATHS)
def test_every_connect_request_survives_every_fault(path, fault, upstream, tokenizer, smollm_path):
    with HostileServer(upstream.url, {path: fault}) as hostile:
        backend, error, peak = bounded(lambda: connect(settings(hostile.url), tokenizer, str(smollm_path)))
        assert hostile.hits.get(path), f"{path} was never asked"
    if backend is not None:
        backend.close()
        # a fault the connect may shrug off: a /health that answers 200 with any body, say
        assert fault not in UNBOUNDED, f"{fault} on {path} connected"
    else:
        message = one_line(error)
        if fault in UNBOUNDED:
            assert path in message, message
        if fault == "status_429":
            assert "busy (429" in message and "wait 3600 s" in message, message
        if fault == "tls_reply":
            assert "if it speaks TLS, use https://" in message, message
    assert peak < MEMORY_BOUND, f"{fault} on {path}: {peak >> 20} MiB allocated"


@pytest.mark.parametrize("fault", UNBOUNDED + ("wrong_shape", "nested_json", "truncated_json"))
@pytest.mark.parametrize("path", CONNECT_PATHS)
def test_doctor_server_report_survives_every_fault(path, fault, upstream, smollm_path):
    from app.chat.remote_doctor import server_report

    with HostileServer(upstream.url, {path: fault}) as hostile:
        report, error, peak = bounded(lambda: server_report(settings(hostile.url), str(smollm_path)))
    if report is not None:
        rows, _ok = report
        # a fault the report may shrug off: a /health that answers 200 with any body, say
        assert fault not in UNBOUNDED, rows
    else:
        message = one_line(error)
        if fault in UNBOUNDED:
            assert path in message, message
    assert peak < MEMORY_BOUND, f"{fault} on {path}: {peak >> 20} MiB allocated"


def _turn(backend: Any, prompt: list[int]) -> tuple[list[int], BaseException | None]:
    """One turn's ids and its error; the backend is closed and its reader thread waited for (a reader
    that crashes after the turn must fail the test too)."""
    received: list[int] = []
    error: BaseException | None = None
    try:
        for token in backend.generate(prompt, SamplingParams(temperature=0.0, max_tokens=16), {2}):
            received.append(token)
    except BackendError as exc:
        error = exc
    finally:
        backend.close()
        if backend._stream is not None:
            backend._stream.thread.join()
    return received, error


@pytest.mark.parametrize("fault", sorted(STREAM_FAULTS) + sorted(FAULTS))
def test_a_streamed_reply_survives_every_fault(fault, upstream, tokenizer, smollm_path):
    prompt = tokenizer.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", special=True)
    with HostileServer(upstream.url, {"/completion": fault}) as hostile:
        backend = connect(settings(hostile.url, first_token_timeout_s=3.0, idle_timeout_s=3.0), tokenizer,
                          str(smollm_path))
        result, failure, peak = bounded(lambda: _turn(backend, prompt))
    assert failure is None, repr(failure)
    received, error = result
    assert peak < MEMORY_BOUND, f"{fault}: {peak >> 20} MiB allocated"
    if fault == "endless_ids":
        assert error is None and received == [VALID_ID] * 16  # max_tokens ends an endless reply
        return
    message = one_line(error)
    if fault == "ids_outside_vocab":
        assert received == [VALID_ID] and "token id 10000000, outside the vocabulary" in message, message
    elif fault == "cut_mid_event":
        assert received == [VALID_ID, VALID_ID], received
    elif fault == "endless_line":
        assert "/completion" in message and received == [], message
    elif fault == "held_open":
        # the event is handed on as it arrives (not when a buffer fills or the stream ends), then the idle
        # deadline ends the silence
        assert received == [VALID_ID] and "while tokchat waited for the next token" in message, message
    elif fault == "empty_events":
        assert "sent nothing for" in message and received == [], message
    elif fault == "status_429":
        assert "wait 3600 s" in message, message
    else:
        assert received == [], received


#: each adapter's info endpoint and streamed reply; llama-server's /props answers 404 so the kind given is trusted
OTHER_KINDS = [("vllm", "/v1/models", "/v1/completions"), ("sglang", "/get_model_info", "/generate")]


@pytest.mark.parametrize("fault", UNBOUNDED)
@pytest.mark.parametrize(("kind", "info_path", "_stream_path"), OTHER_KINDS)
def test_the_vllm_and_sglang_info_requests_are_capped(kind, info_path, _stream_path, fault, upstream, tokenizer,
                                                      smollm_path):
    with HostileServer(upstream.url, {"/props": "not_found", info_path: fault}) as hostile:
        remote = RemoteSettings(url=hostile.url, kind=kind, connect_timeout_s=PATIENCE_S, trust_server_vocab=True)
        backend, error, peak = bounded(lambda: connect(remote, tokenizer, str(smollm_path), 512))
        assert hostile.hits.get(info_path)
    assert backend is None, f"{fault} on {info_path} connected"
    message = one_line(error)
    assert info_path in message, message
    assert peak < MEMORY_BOUND, f"{fault} on {info_path}: {peak >> 20} MiB allocated"


@pytest.mark.parametrize("fault", ["endless_line", "cut_mid_event", "slow_headers", "status_429"])
@pytest.mark.parametrize(("kind", "_info_path", "stream_path"), OTHER_KINDS)
def test_the_vllm_and_sglang_streams_are_bounded(kind, _info_path, stream_path, fault, upstream, tokenizer,
                                                 smollm_path):
    prompt = tokenizer.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", special=True)
    with HostileServer(upstream.url, {"/props": "not_found", stream_path: fault}) as hostile:
        remote = RemoteSettings(url=hostile.url, kind=kind, connect_timeout_s=PATIENCE_S, first_token_timeout_s=3.0,
                                idle_timeout_s=3.0, trust_server_vocab=True)
        backend = connect(remote, tokenizer, str(smollm_path), 512)
        result, failure, peak = bounded(lambda: _turn(backend, prompt))
        assert hostile.hits.get(stream_path)
    assert failure is None, repr(failure)
    _received, error = result
    one_line(error)
    assert peak < MEMORY_BOUND, f"{fault} on {stream_path}: {peak >> 20} MiB allocated"


def test_a_slow_consumer_is_not_the_servers_silence(upstream, tokenizer, smollm_path):
    """The idle deadline measures the server: a consumer that holds an id longer than it (a paused pager,
    a slow terminal) must not end the turn, whatever the server sent meanwhile."""
    import time

    prompt = tokenizer.encode("<|im_start|>user\nCount to ten<|im_end|>\n<|im_start|>assistant\n", special=True)
    backend = connect(settings(upstream.url, idle_timeout_s=1.0), tokenizer, str(smollm_path))
    try:
        ids = backend.generate(prompt, SamplingParams(temperature=0.0, max_tokens=8), {2})
        first = next(ids)
        time.sleep(2.5)  # the consumer's pause, not a measurement
        rest = list(ids)
    finally:
        backend.close()
    assert len([first, *rest]) == 8
