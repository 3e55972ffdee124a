"""The engine host: llama.cpp in its own process, killed by real signals mid-reply.

The child is the real ``python -m backends.engine_process`` running the real
llama.cpp on SmolLM2; the crashes are real signals sent to it with
``os.kill``.  After each one the caller gets one line naming the signal, the
engine and its log, and the next reply comes from a fresh engine.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from backends.base import BackendError, LoadOptions, SamplingParams
from backends.engine_client import EngineCrashed, HostedBackend, SpareEngine, describe_exit
from backends.engine_wire import ENGINE_PROCESS_MODULE
from backends.model_meta import read_model_meta

GREEDY = SamplingParams(temperature=0, max_tokens=16, repeat_penalty=1.0)
LONG = SamplingParams(temperature=0, max_tokens=400, repeat_penalty=1.0)
STORY = "Write a very long story about a dragon who learns to cook, with many chapters."


@pytest.fixture
def hosted(smollm_path, tmp_path):
    backend = HostedBackend("llama.cpp")
    backend.load(smollm_path, LoadOptions(n_ctx=1024, log_path=tmp_path / "engine.log"))
    yield backend
    backend.close()


def _kill_after(backend, prompt, n, signum):
    """Stream a long reply, send ``signum`` to the engine after ``n`` ids; the ids and the error."""
    got: list[int] = []
    pid = backend.pid
    with pytest.raises(EngineCrashed) as crashed:
        for token in backend.generate(prompt, LONG, set()):
            got.append(token)
            if len(got) == n:
                os.kill(pid, signum)
    return got, crashed.value, pid


@pytest.mark.parametrize("signum", [signal.SIGSEGV, signal.SIGILL, signal.SIGABRT, signal.SIGKILL],
                         ids=["SIGSEGV", "SIGILL", "SIGABRT", "SIGKILL"])
def test_a_signal_mid_reply_is_one_line_and_the_next_reply_comes_from_a_fresh_engine(
        signum, hosted, vocab, tmp_path):
    got, error, pid = _kill_after(hosted, vocab.chat(STORY), 5, signum)
    assert 5 <= len(got) < LONG.max_tokens
    message = str(error)
    assert "\n" not in message
    assert f"died of {signal.Signals(signum).name}" in message and "llama.cpp" in message
    assert str(tmp_path / "engine.log") in message and "next message starts the engine again" in message
    assert error.returncode == -signum
    if signum == signal.SIGSEGV:
        # faulthandler in the engine leaves the Python side of the crash in the log
        assert "Fatal Python error: Segmentation fault" in (tmp_path / "engine.log").read_text()
    generation = hosted.generate(vocab.chat("What is the capital of France?"), GREEDY, {vocab.eos})
    again = list(generation)
    assert "Paris" in vocab.text(again)
    assert hosted.pid is not None and hosted.pid != pid
    # the fresh engine has an empty cache: the whole prompt was evaluated
    assert generation.stats.prompt_evaluated == len(vocab.chat("What is the capital of France?"))


def test_hosted_replies_equal_the_engine_in_this_process(hosted, vocab, smollm_path, tmp_path):
    from backends.llama_cpp import LlamaCppBackend

    local = LlamaCppBackend()
    local.load(smollm_path, LoadOptions(n_ctx=1024, log_path=tmp_path / "local.log"))
    try:
        for question in ("What is the capital of France?", "Name three colours."):
            prompt = vocab.chat(question)
            far, near = hosted.generate(prompt, GREEDY, {vocab.eos}), local.generate(prompt, GREEDY, {vocab.eos})
            assert list(far) == list(near)
            assert far.stats.prompt_evaluated == near.stats.prompt_evaluated
            assert far.stats.finish_reason == near.stats.finish_reason != ""
    finally:
        local.close()


def test_cancel_ends_the_iteration_and_late_ids_are_dropped(hosted, vocab):
    got = []
    for token in hosted.generate(vocab.chat(STORY), LONG, set()):
        got.append(token)
        if len(got) == 3:
            hosted.cancel()
    assert len(got) == 3  # nothing after the cancel reaches the caller
    again = list(hosted.generate(vocab.chat("What is the capital of France?"), GREEDY, {vocab.eos}))
    assert "Paris" in vocab.text(again)


def test_a_cancel_stops_the_engine_mid_prompt_while_its_main_thread_evaluates(smollm_path, vocab, tmp_path):
    """The engine runs on the engine process's main thread; the cancel is set from its reader thread and the
    prompt's evaluation stops at the next batch.  Proof from the cache: the same prompt asked again evaluates
    most of it, where an engine that had finished the cancelled prompt would evaluate one id."""
    from backends.llama_cpp import PREFILL_CHUNK

    backend = HostedBackend("llama.cpp")
    backend.load(smollm_path, LoadOptions(n_ctx=4096, log_path=tmp_path / "engine.log"))
    try:
        long_prompt = vocab.ids("<|im_start|>user\n" + "The sea is wide and deep. " * 160 + "<|im_end|>\n")
        long_prompt += vocab.chat("Summarise that.")
        assert len(long_prompt) > 4 * PREFILL_CHUNK
        one = SamplingParams(temperature=0, max_tokens=1)

        def cancel_at_first_progress(_progress) -> None:
            backend.cancel()

        assert list(backend.generate(long_prompt, one, set(), on_progress=cancel_at_first_progress)) == []
        again = backend.generate(long_prompt, one, set())
        assert len(list(again)) == 1
        assert again.stats.prompt_evaluated > len(long_prompt) // 2, again.stats.prompt_evaluated
    finally:
        backend.close()


def test_prompt_progress_comes_back_from_the_engine(hosted, vocab):
    from backends.llama_cpp import PREFILL_CHUNK

    long_prompt = vocab.ids("<|im_start|>user\n" + "The sea is wide and deep. " * 120 + "<|im_end|>\n")
    long_prompt += vocab.chat("Summarise that.")
    assert len(long_prompt) > 2 * PREFILL_CHUNK
    generation = hosted.generate(long_prompt, SamplingParams(temperature=0, max_tokens=1), set())
    list(generation)
    progress = generation.stats.progress
    assert progress is not None and progress.done == progress.total == len(long_prompt)


def test_a_model_that_fails_to_load_is_one_error_and_no_process_is_left(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    backend = HostedBackend("llama.cpp")
    with pytest.raises(BackendError) as failed:
        backend.load(bad, LoadOptions(log_path=tmp_path / "engine.log"))
    assert "\n" not in str(failed.value) and backend.pid is None


def test_a_fault_of_ours_while_loading_is_said_as_itself_and_the_engine_stays_up(smollm_path, tmp_path):
    """An exception that is no BackendError (here a Load with an option the engine does not know, as a chat of
    another version might send) used to end the engine, which the chat then read as "died of SIGABRT while
    loading MODEL", blaming the model.  Now the engine answers LoadFailed with the exception and goes on."""
    from backends.engine_wire import Close, Load, LoadFailed, decode, encode

    log = tmp_path / "engine.log"
    with log.open("wb") as err:
        child = subprocess.Popen([sys.executable, "-m", ENGINE_PROCESS_MODULE], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=err)
    try:
        child.stdin.write(encode(Load("llama.cpp", "CPU", str(smollm_path), {"n_ctx": 512, "no_such_option": 1})))
        child.stdin.flush()
        answer = decode(child.stdout.readline())
        assert isinstance(answer, LoadFailed), answer
        assert answer.error.startswith("TypeError: ") and "no_such_option" in answer.error
        assert "\n" not in answer.error and "engine log" in answer.error
        assert child.poll() is None  # still up, and ends when told to
        child.stdin.write(encode(Close()))
        child.stdin.flush()
        assert child.wait(30) == 0
        assert "Traceback" in log.read_text()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_closing_ends_the_engine_process(smollm_path, tmp_path):
    backend = HostedBackend("llama.cpp")
    backend.load(smollm_path, LoadOptions(n_ctx=512, log_path=tmp_path / "engine.log"))
    pid = backend.pid
    assert pid is not None and os.path.exists(f"/proc/{pid}")
    child = backend._child.proc
    started = time.monotonic()
    backend.close()
    closed_in = time.monotonic() - started
    assert backend.pid is None
    # a clean end, not the abort CPython gives a process whose daemon thread holds stdin at shutdown
    # (that abort came after a one-second wait for the lock: the log says so)
    assert child.returncode == 0, (child.returncode, closed_in)
    assert "Fatal Python error" not in (tmp_path / "engine.log").read_text()
    # reaped by close(): the pid no longer names our child
    assert not os.path.exists(f"/proc/{pid}") or ENGINE_PROCESS_MODULE not in open(f"/proc/{pid}/cmdline").read()


def test_the_engine_shares_the_chats_session_in_its_own_process_group(hosted):
    """Same session: the same scheduling autogroup as the chat (a session of its own made the engine compete
    with the chat's terminal as a stranger: 48 -> 3.6 tok/s beside nice-19 jobs). Own process group: Ctrl-C
    at the terminal reaches the chat only, and killpg ends whatever the engine forked."""
    pid = hosted.pid
    assert pid is not None
    assert os.getsid(pid) == os.getsid(0)
    assert os.getpgid(pid) == pid != os.getpgid(0)
    if os.path.exists(f"/proc/{pid}/autogroup"):
        assert open(f"/proc/{pid}/autogroup").read() == open("/proc/self/autogroup").read()


def test_the_engine_ends_when_its_parent_is_killed(smollm_path, tmp_path):
    script = (
        "import sys, time; from pathlib import Path; from backends.engine_client import HostedBackend; "
        "from backends.base import LoadOptions; b = HostedBackend('llama.cpp'); "
        "b.load(Path(sys.argv[1]), LoadOptions(n_ctx=512, log_path=Path(sys.argv[2]))); "
        "print(b.pid, flush=True); time.sleep(600)"
    )
    parent = subprocess.Popen([sys.executable, "-c", script, str(smollm_path), str(tmp_path / "engine.log")],
                              stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait(30)
    # the engine reads EOF on its request pipe and ends by itself
    for _ in range(300):
        if not os.path.exists(f"/proc/{child}") or open(f"/proc/{child}/stat").read().split()[2] == "Z":
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the engine outlived its parent by 30 s")


def test_exit_descriptions():
    assert describe_exit(-signal.SIGSEGV) == "died of SIGSEGV (segmentation fault)"
    assert describe_exit(-signal.SIGKILL) == "died of SIGKILL (killed, perhaps by the out-of-memory killer)"
    assert describe_exit(3) == "exited with status 3"


def _maps_libllama(pid: int, seconds: float = 30.0) -> bool:
    """Whether ``pid`` maps libllama within ``seconds`` (the warm import runs on the engine's own thread)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if "libllama" in open(f"/proc/{pid}/maps").read():
            return True
        time.sleep(0.02)
    return False


def test_a_prestarted_engine_imports_llama_cpp_before_any_request_and_is_the_one_that_loads(
        smollm_path, tmp_path, vocab):
    log = tmp_path / "engine.log"
    spare = SpareEngine(warm="llama.cpp", log_path=log)
    pid = spare.pid
    assert pid is not None
    # no request has been sent: only the warm import can have loaded the library
    assert _maps_libllama(pid), "the waiting engine never imported llama.cpp"
    backend = HostedBackend("llama.cpp", spare=spare)
    try:
        backend.load(smollm_path, LoadOptions(n_ctx=512, log_path=log))
        assert backend.pid == pid and spare.pid is None
        child = backend._child.proc
        assert list(backend.generate(vocab.chat("Hi"), GREEDY, {vocab.eos}))
    finally:
        backend.close()
    assert child.returncode == 0


def test_a_spare_that_logs_elsewhere_is_stopped_not_used(smollm_path, tmp_path):
    spare = SpareEngine(warm=None, log_path=tmp_path / "other.log")
    pid = spare.pid
    backend = HostedBackend("llama.cpp", spare=spare)
    try:
        backend.load(smollm_path, LoadOptions(n_ctx=512, log_path=tmp_path / "engine.log"))
        assert backend.pid is not None and backend.pid != pid
        assert spare.pid is None and _reaped(pid)
    finally:
        backend.close()


def test_discarding_the_spare_ends_its_process(tmp_path):
    spare = SpareEngine(warm=None, log_path=tmp_path / "engine.log")
    pid = spare.pid
    assert pid is not None and os.path.exists(f"/proc/{pid}")
    process = spare._child.proc
    spare.discard()
    assert spare.pid is None and _reaped(pid)
    assert process.returncode == 0, "a discarded spare ends cleanly, asked to close"


def _reaped(pid: int) -> bool:
    """The process is gone and reaped (not a zombie): its pid no longer names our engine."""
    try:
        return ENGINE_PROCESS_MODULE not in open(f"/proc/{pid}/cmdline").read()
    except OSError:
        return True


def test_the_engine_takes_the_chats_header_instead_of_reading_the_file_again(smollm_path, tmp_path):
    """The facts sent with the load are what the engine reports: it did not parse the header itself
    (a second parse of a 151,936-token vocabulary cost the engine tens of MiB at start)."""
    meta = replace(read_model_meta(smollm_path), name="the name the chat read")
    backend = HostedBackend("llama.cpp")
    try:
        backend.load(smollm_path, LoadOptions(n_ctx=512, log_path=tmp_path / "engine.log", model_meta=meta))
        assert backend.info.model_name == "the name the chat read"
    finally:
        backend.close()
    # a header of another file is not sent: the engine reads its own
    other = replace(meta, path=tmp_path / "elsewhere.gguf")
    backend = HostedBackend("llama.cpp")
    try:
        backend.load(smollm_path, LoadOptions(n_ctx=512, log_path=tmp_path / "engine.log", model_meta=other))
        assert backend.info.model_name == read_model_meta(smollm_path).name
    finally:
        backend.close()


def _dead(pid: int) -> bool:
    """The process has ended (a zombie not reaped yet, or gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_an_engine_that_died_while_idle_answers_the_next_request_from_a_fresh_one(hosted, vocab):
    """Found dead before anything was generated: the same request is answered, and said once."""
    pid = hosted.pid
    os.kill(pid, signal.SIGSEGV)
    deadline = time.monotonic() + 60
    while not _dead(pid):
        assert time.monotonic() < deadline, "the engine did not die"
        time.sleep(0.01)
    generation = hosted.generate(vocab.chat("What is the capital of France?"), GREEDY, {vocab.eos})
    again = list(generation)
    notice = generation.stats.notice  # before the first id (the session says it then), whichever path found it
    assert "Paris" in vocab.text(again)
    assert hosted.pid is not None and hosted.pid != pid
    assert notice and "\n" not in notice
    assert "died of SIGSEGV" in notice and "while idle" in notice and "started again" in notice
    next_reply = hosted.generate(vocab.chat("Hi"), GREEDY, {vocab.eos})
    assert list(next_reply) and next_reply.stats.notice == ""  # said once: for the reply it concerns
