"""llama.cpp's AMX path: it runs where the CPU has AMX, and its crash is recognised where it does not hold.

``test_the_amx_kernel_answers_on_an_amx_cpu`` is the proof on real hardware
and runs only where ``/proc/cpuinfo`` lists ``amx_tile`` (a skip elsewhere,
reported as such).  The recovery test runs everywhere: a real engine is
killed with a real SIGSEGV while it evaluates the prompt; what cannot run on
a CPU without AMX is only the CPU's answer, so the test says "this CPU has
AMX" (``has_amx``) and writes the line llama.cpp logs when it repacks
weights for AMX.
"""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from backends.base import LoadOptions, SamplingParams
from backends.cpu import has_amx
from backends.engine_client import HostedBackend, amx_fault_record

GREEDY = SamplingParams(temperature=0, max_tokens=16, repeat_penalty=1.0)


@pytest.mark.skipif(not has_amx(), reason="this CPU has no AMX (grep -c amx_tile /proc/cpuinfo is 0)")
def test_the_amx_kernel_answers_on_an_amx_cpu(qwen_path, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no remembered fault from earlier runs
    log = tmp_path / "engine.log"
    backend = HostedBackend("llama.cpp")
    backend.load(qwen_path, LoadOptions(n_ctx=1024, log_path=log))
    try:
        from tokenizer import load_tokenizer

        tok = load_tokenizer(qwen_path)
        prompt = tok.encode("<|im_start|>user\nWrite a Python function that adds two numbers.<|im_end|>\n"
                            "<|im_start|>assistant\n", special=True)
        first_pid = backend.pid
        ids = list(backend.generate(prompt, GREEDY, tok.eog_ids))
        assert len(ids) == GREEDY.max_tokens or ids[-1] in tok.eog_ids
        assert "AMX" in log.read_text()  # the weights were repacked for the AMX kernel ...
        assert backend.pid == first_pid and backend.info.caveat == ""  # ... and it ran without a restart
        assert not amx_fault_record().exists()
    finally:
        backend.close()


def test_an_amx_fault_restarts_the_engine_with_repacking_off_and_is_remembered(
        smollm_path, tmp_path, monkeypatch):
    import backends.engine_client as engine_client

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(engine_client, "has_amx", lambda: True)
    log = tmp_path / "engine.log"
    backend = HostedBackend("llama.cpp")
    backend.load(smollm_path, LoadOptions(n_ctx=4096, log_path=log))
    from tokenizer import load_tokenizer

    tok = load_tokenizer(smollm_path)
    prompt = tok.encode("<|im_start|>user\n" + "The sea is wide and deep. " * 120 + "<|im_end|>\n"
                        "<|im_start|>assistant\n", special=True)
    crashed_pid = backend.pid

    generation = backend.generate(prompt, GREEDY, tok.eog_ids)

    def crash_in_the_prompt() -> None:
        # what llama.cpp logs on an AMX CPU, then the fault, while the prompt is evaluated
        while generation.stats.progress is None:
            time.sleep(0.005)
        with open(log, "a") as fh:
            fh.write("load_tensors:          AMX model buffer size =    60.00 MiB\n")
        os.kill(crashed_pid, signal.SIGSEGV)

    killer = threading.Thread(target=crash_in_the_prompt)
    killer.start()
    try:
        ids = list(generation)
        killer.join()
        # the reply was retried on a fresh engine with repacking off: the caller saw no error
        assert ids and backend.pid != crashed_pid
        assert backend.info.caveat == "AMX repacking off (llama.cpp #20824)"
        assert any("AMX kernel crashed" in note for note in backend.info.notes)
        assert amx_fault_record().exists()
    finally:
        backend.close()
    # the next start begins with repacking off at once
    again = HostedBackend("llama.cpp")
    again.load(smollm_path, LoadOptions(n_ctx=512, log_path=log))
    try:
        assert "weight repacking off" in " ".join(again.info.notes)
        assert again.info.caveat == "AMX repacking off (llama.cpp #20824)"
    finally:
        again.close()


def test_a_sigsegv_without_amx_is_not_taken_for_the_amx_fault(smollm_path, tmp_path, monkeypatch):
    import backends.engine_client as engine_client

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(engine_client, "has_amx", lambda: False)
    backend = HostedBackend("llama.cpp")
    backend.load(smollm_path, LoadOptions(n_ctx=4096, log_path=tmp_path / "engine.log"))
    from tokenizer import load_tokenizer

    tok = load_tokenizer(smollm_path)
    prompt = tok.encode("<|im_start|>user\n" + "The sea is wide and deep. " * 120 + "<|im_end|>\n"
                        "<|im_start|>assistant\n", special=True)
    pid = backend.pid

    generation = backend.generate(prompt, GREEDY, tok.eog_ids)

    def crash_in_the_prompt() -> None:
        # while it works on the request, before any id: the fault must come mid-request to be one
        while generation.stats.progress is None:
            time.sleep(0.005)
        os.kill(pid, signal.SIGSEGV)

    killer = threading.Thread(target=crash_in_the_prompt)
    killer.start()
    try:
        # dead before it answered anything: a fresh engine answers the same request (issue 33, item 6), but
        # as a plain crash: repacking stays on, nothing is remembered, no AMX caveat
        reply = list(generation)
        killer.join()
        assert reply and backend.pid != pid
        notice = generation.stats.notice
        assert notice and "died of SIGSEGV" in notice and "while evaluating the prompt" in notice
        assert backend._options.repack and not amx_fault_record().exists() and backend.info.caveat == ""
    finally:
        backend.close()
