"""This machine for real: detection, ``tokchat doctor``, explicit choices and fallback."""
from __future__ import annotations

import json

import pytest

from app.cli import main
from backends import open_backend
from backends.base import BackendError, LoadOptions, SamplingParams
from backends.detect import detect

GREEDY = SamplingParams(temperature=0, max_tokens=4, repeat_penalty=1.0)


def test_real_detection_reports_cpu_here():
    report = detect()
    assert report.chosen.name == "cpu" and report.chosen.label == "llama.cpp on CPU"
    assert not report.facts.apple_silicon
    assert report.facts.runtime.llama_cpp_version  # the installed llama-cpp-python answered
    assert not report.candidate("cuda").runnable


def test_doctor_explains_this_machine(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "--backend auto uses: cpu (llama.cpp on CPU)" in out
    assert "NVIDIA" in out and "AMD" in out and "llama-cpp-python" in out


def test_doctor_json(capsys):
    assert main(["doctor", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["chosen"] == "cpu"
    assert data["facts"]["runtime"]["llama_cpp_version"]


def test_explicit_cuda_says_why_it_cannot_run(smollm_path):
    with pytest.raises(BackendError) as err:
        open_backend(smollm_path, LoadOptions(backend="cuda"))
    message = str(err.value)
    assert message.startswith("--backend cuda cannot run here:")
    assert "NVIDIA" in message


def test_cuda_through_the_cli_is_one_clear_line(smollm_path, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    code = main(["--model", str(smollm_path), "--backend", "cuda", "--prompt", "hi", "--no-history"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("tokchat: ") and "--backend cuda cannot run here" in err
    assert len(err.strip().splitlines()) == 1


def test_auto_uses_llama_cpp_here(smollm_path, tmp_path):
    backend = open_backend(smollm_path, LoadOptions(log_path=tmp_path / "engine.log"))
    try:
        assert backend.info.backend == "llama.cpp" and backend.info.device == "CPU"
        assert backend.info.notes[0].startswith("--backend auto chose cpu (llama.cpp on CPU)")
        assert list(backend.generate([1, 4093, 198], GREEDY, set()))
    finally:
        backend.close()
    # llama.cpp's loading chatter went to the log file, not the terminal
    assert (tmp_path / "engine.log").stat().st_size > 0


def test_openvino_on_qwen_q4_k_m_falls_back_with_the_reason(qwen_path, tmp_path):
    backend = open_backend(qwen_path, LoadOptions(backend="openvino", log_path=tmp_path / "engine.log"))
    try:
        assert backend.info.backend == "llama.cpp"
        failure, fallback = backend.info.notes[0], backend.info.notes[1]
        assert failure.startswith("openvino on CPU could not load qwen2.5-coder-0.5b.gguf")
        assert "gguf_tensor_to_f16 failed" in failure and "Q4_K_M" in failure
        assert fallback.startswith("fell back to cpu (llama.cpp on CPU)")
        assert len(list(backend.generate([151644, 872, 198], GREEDY, set()))) == GREEDY.max_tokens
    finally:
        backend.close()


def test_mlx_refuses_k_quants_before_loading(qwen_path):
    from backends.mlx import MLXBackend

    with pytest.raises(BackendError, match="MLX reads GGUF weights only as .*this file is Q4_K_M"):
        MLXBackend().load(qwen_path, LoadOptions())


def test_missing_model_is_a_clear_error(tmp_path):
    with pytest.raises(BackendError, match="model not found"):
        open_backend(tmp_path / "nope.gguf", LoadOptions())


def test_not_a_gguf_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a model at all, just text")
    with pytest.raises(BackendError, match="bad.gguf is not a readable GGUF model"):
        open_backend(bad, LoadOptions())


def test_gpu_layers_on_the_cpu_is_said_and_not_counted(smollm_path, tmp_path):
    """``--gpu-layers 10`` where llama.cpp runs on the CPU: one note says nothing is offloaded, and the stats
    count no layer on a GPU (they said "10/31", a GPU that is not there, and the prompt went in GPU-sized
    batches)."""
    import subprocess
    import sys

    from support.process_env import child_env

    done = subprocess.run([sys.executable, "-m", "app", "--model", str(smollm_path), "--gpu-layers", "10",
                           "--prompt", "Say hi", "--max-tokens", "2", "--temperature", "0", "--ctx", "512",
                           "--stats", "--no-history"],
                          capture_output=True, text=True, env=child_env(tmp_path), cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert ("tokchat: --gpu-layers 10 has nothing to offload to: llama.cpp runs on the CPU here (`tokchat doctor` "
            "says why)") in done.stderr.splitlines()
    stats = json.loads([line for line in done.stderr.splitlines() if line.startswith("{")][-1])
    assert stats["device"] == "CPU" and stats["gpu_layers"] == "" and stats["vram_mib"] == 0
