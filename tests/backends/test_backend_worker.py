"""The generation worker: one engine thread, a queue to the caller, prompt cancel."""
from __future__ import annotations

import threading
import time

import pytest

from backends.base import BackendError
from backends.mlx_gguf import map_name
from backends.worker import GenerationWorker


def slow_job(n: int, delay: float, log: list[str]):
    def job(emit, cancelled):
        for i in range(n):
            if cancelled():
                log.append("engine saw cancel")
                return
            time.sleep(delay)
            emit(i)
        log.append("engine finished")

    return job


def test_ids_flow_in_order_on_one_thread():
    worker = GenerationWorker("test")
    threads = set()

    def job(emit, cancelled):
        threads.add(threading.current_thread().name)
        for i in range(5):
            emit(i)

    assert list(worker.stream(job)) == [0, 1, 2, 3, 4]
    assert list(worker.stream(job)) == [0, 1, 2, 3, 4]
    assert threads == {"tokchat-test"}
    worker.close()


def test_cancel_ends_the_callers_iteration_while_the_engine_is_busy():
    worker = GenerationWorker("test")
    log: list[str] = []

    def stuck(emit, cancelled):
        emit(1)
        while not cancelled():  # an engine call that checks only now and then
            time.sleep(0.3)
        log.append("engine stopped")

    got = []
    for token in worker.stream(stuck):
        got.append(token)
        threading.Thread(target=worker.cancel).start()
    assert got == [1]
    # the next job waits for the engine to finish the cancelled one
    assert list(worker.stream(slow_job(2, 0, log))) == [0, 1]
    assert log == ["engine stopped", "engine finished"]
    worker.close()


def test_breaking_out_of_the_loop_stops_the_engine():
    worker = GenerationWorker("test")
    log: list[str] = []
    for token in worker.stream(slow_job(1000, 0.001, log)):
        if token == 3:
            break
    assert worker.wait_idle(10)
    assert log == ["engine saw cancel"]
    worker.close()


def test_engine_errors_reach_the_caller_as_backend_errors():
    worker = GenerationWorker("test")

    def broken(emit, cancelled):
        emit(7)
        raise ValueError("decode failed: -3")

    got = []
    with pytest.raises(BackendError, match="decode failed: -3"):
        for token in worker.stream(broken):
            got.append(token)
    assert got == [7]
    assert worker.call(lambda: 42) == 42
    with pytest.raises(KeyError):
        worker.call(lambda: {}["missing"])
    worker.close()
    with pytest.raises(BackendError, match="closed"):
        list(worker.stream(slow_job(1, 0, [])))


def test_gguf_tensor_names_map_to_mlx_lm_modules():
    assert map_name("blk.3.attn_q.scales") == "model.layers.3.self_attn.q_proj.scales"
    assert map_name("blk.0.ffn_norm.weight") == "model.layers.0.post_attention_layernorm.weight"
    assert map_name("blk.11.attn_k.bias") == "model.layers.11.self_attn.k_proj.bias"
    assert map_name("token_embd.biases") == "model.embed_tokens.biases"
    assert map_name("output.weight") == "lm_head.weight"
    with pytest.raises(BackendError, match="unexpected tensor 'blk.0.ssm_conv1d.weight'"):
        map_name("blk.0.ssm_conv1d.weight")


def test_close_joins_the_thread_after_releasing_on_it():
    worker = GenerationWorker("test")
    released_on: list[str] = []
    log: list[str] = []
    for token in worker.stream(slow_job(1000, 0.001, log)):
        if token == 2:
            break
    assert worker.close(lambda: released_on.append(threading.current_thread().name))
    assert released_on == ["tokchat-test"]
    assert log == ["engine saw cancel"]
    assert "tokchat-test" not in {t.name for t in threading.enumerate()}


def test_a_worker_left_open_is_joined_before_the_interpreter_exits(tmp_path):
    """The exit hook cancels and joins a worker whose job is still running (an error path)."""
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "left_open.py"
    script.write_text(
        "import sys, time\n"
        "from backends.worker import GenerationWorker\n"
        "worker = GenerationWorker('left-open')\n"
        "def job(emit, cancelled):\n"
        "    emit(1)\n"
        "    while not cancelled():\n"
        "        time.sleep(0.01)\n"
        "    print('engine saw cancel', flush=True)\n"
        "ids = worker.stream(job)\n"
        "assert next(ids) == 1\n"
        "sys.exit(0)  # never closed: the exit hook must cancel the job and join the thread\n"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                            cwd=tmp_path, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "engine saw cancel\n"


# -- the engine process's way: the job runs on the caller's thread and pushes its ids --------------------------

def test_an_inline_worker_runs_the_job_on_the_callers_thread_and_drive_hands_over_each_id():
    from backends.base import Generation
    from backends.worker import InlineWorker

    worker = InlineWorker("test")
    threads, got = set(), []

    def job(emit, cancelled):
        threads.add(threading.current_thread())
        for i in range(5):
            emit(i)

    generation = Generation(worker.stream(job), stop_ids={4}, max_tokens=10)
    generation.drive(got.append)
    assert got == [0, 1, 2, 3, 4] and threads == {threading.current_thread()}
    assert generation.stats.finish_reason == "stop"
    counted = Generation(worker.stream(job), max_tokens=3)
    counted.drive(lambda _token: None)
    assert counted.stats.finish_reason == "length"
    with pytest.raises(TypeError, match="drive"):
        next(iter(Generation(worker.stream(job))))  # pushed ids cannot be pulled
    worker.close()


def test_a_cancel_from_another_thread_stops_an_inline_job_at_its_next_check():
    """The engine process's reader thread cancels while the main thread generates."""
    from backends.base import Generation
    from backends.worker import InlineWorker

    worker = InlineWorker("test")
    log: list[str] = []
    got: list[int] = []

    def endless(emit, cancelled):
        i = 0
        while not cancelled():
            emit(i)
            i += 1
            time.sleep(0.01)
        log.append("engine saw cancel")

    def sink(token):
        got.append(token)
        if token == 2:
            threading.Thread(target=worker.cancel).start()

    generation = Generation(worker.stream(endless))
    generation.drive(sink)
    assert log == ["engine saw cancel"] and 3 <= len(got) < 50
    assert generation.stats.finish_reason == "cancelled"
    # the next job runs: a cancel stops one job, not the worker
    fresh = Generation(worker.stream(slow_job(2, 0, log)))
    again: list[int] = []
    fresh.drive(again.append)
    assert again == [0, 1]
    worker.close()


def test_an_inline_engines_own_error_is_one_backend_error_and_the_reply_says_error():
    from backends.base import Generation
    from backends.worker import InlineWorker

    worker = InlineWorker("test")

    def broken(emit, cancelled):
        emit(7)
        raise RuntimeError("llama_decode returned -3")

    generation = Generation(worker.stream(broken))
    got: list[int] = []
    with pytest.raises(BackendError, match="the engine failed while generating: llama_decode returned -3"):
        generation.drive(got.append)
    assert got == [7] and generation.stats.finish_reason == "error"
    released: list[str] = []
    worker.close(lambda: released.append(threading.current_thread().name))
    assert released == [threading.current_thread().name]
    with pytest.raises(BackendError, match="closed"):
        worker.stream(broken)
