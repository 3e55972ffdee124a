"""The engine log: llama.cpp's own log callback writes a real load into a file, without its debug lines.

The load is the real llama.cpp loading SmolLM2 in this process: it proves the
levels (``enum ggml_log_level`` in the vendored ggml.h: DEBUG 1, INFO 2, WARN 3,
ERROR 4, CONT 5; llama-cpp-python's own comment on them is stale) are read right.
"""
from __future__ import annotations

from pathlib import Path

from backends.engine_log import _CONT, _DEBUG, _write, capture_llama_log
from backends.llama_engine import EngineParams, LlamaEngine


def test_a_real_load_logs_its_buffers_but_not_a_line_per_tensor(smollm_path, tmp_path):
    log = capture_llama_log(tmp_path / "engine.log")
    engine = LlamaEngine(Path(smollm_path), EngineParams(n_ctx=512, n_threads=1))
    engine.close()
    text = log.read_text()
    # the lines a crash diagnosis reads (the AMX check looks for "AMX" in the buffer lines)
    assert "llama_model_loader: loaded meta data" in text
    assert "model buffer size" in text and "KV buffer size" in text
    # llama.cpp's debug lines (one per tensor: llama-server shows them only with -v) stay out
    assert "create_tensor: loading tensor" not in text
    assert len(text.splitlines()) < 400


INFO, WARN, ERROR = 2, 3, 4


def test_a_continuation_follows_the_level_of_the_line_it_continues(tmp_path):
    log = capture_llama_log(tmp_path / "engine.log")
    _write(INFO, "info starts ")
    _write(_CONT, "and goes on\n")
    _write(_DEBUG, "debug starts ")
    _write(_CONT, "and goes on too\n")
    _write(ERROR, "an error\n")
    assert log.read_text() == "info starts and goes on\nan error\n"


def test_the_log_follows_the_latest_load(tmp_path):
    first = capture_llama_log(tmp_path / "first.log")
    _write(WARN, "one\n")
    second = capture_llama_log(tmp_path / "second.log")
    _write(WARN, "two\n")
    assert first.read_text() == "one\n" and second.read_text() == "two\n"
