"""Detection asks an engine only when its answer can change the choice; ``tokchat doctor`` asks all.

The simulated machines record which engines detection asked; the real
machine is checked in a fresh interpreter, where ``sys.modules`` shows
whether OpenVINO or MLX was imported.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.backend_fakes import fake_machine, llama_runtime

from backends.base import BackendError
from backends.detect import detect, plan
from backends.probe import RUNTIMES

ROOT = Path(__file__).resolve().parents[2]


def recording_probe(tmp_path, asked: list, **machine):
    """A simulated machine whose engines answer as installed, noting each question."""

    def runtime(engines):
        asked.append(sorted(engines))
        answers = llama_runtime(openvino_version="2026.4.1", openvino_devices=["CPU", "GPU.0"],
                                mlx_version="0.29.0", mlx_metal=machine.get("os_name") == "darwin")
        answers.asked = [e for e in RUNTIMES if e in engines]
        return answers

    return fake_machine(tmp_path, runtime=runtime, **machine)


def test_plain_cpu_machine_asks_only_llama_cpp(tmp_path):
    asked: list = []
    report = detect(recording_probe(tmp_path, asked), requested="auto")
    assert asked == [["llama_cpp"]]
    assert report.chosen.name == "cpu"
    # the candidates not asked say so, and say who asks them
    for name in ("openvino", "mlx"):
        candidate = report.candidate(name)
        assert not candidate.runnable and not candidate.in_auto
        assert candidate.reason.startswith("not asked") and "tokchat doctor" in candidate.reason
    assert "OpenVINO: not asked" in report.text()


def test_doctor_asks_every_engine(tmp_path):
    asked: list = []
    report = detect(recording_probe(tmp_path, asked))
    assert asked == [sorted(RUNTIMES)]
    assert report.candidate("openvino").runnable  # OpenVINO on the CPU, only when asked for
    assert "OpenVINO 2026.4.1" in report.text()


def test_intel_gpu_or_npu_asks_openvino(tmp_path):
    asked: list = []
    report = detect(recording_probe(tmp_path / "gpu", asked, files={"/sys/class/drm/card0/device/vendor": "0x8086\n"}),
                    requested="auto")
    assert asked[-1] == ["llama_cpp", "openvino"]
    assert report.chosen.name == "openvino" and report.chosen.device == "GPU"
    detect(recording_probe(tmp_path / "npu", asked, files={"/dev/accel/accel0": ""}), requested="auto")
    assert asked[-1] == ["llama_cpp", "openvino"]


def test_apple_silicon_asks_mlx(tmp_path):
    asked: list = []
    report = detect(recording_probe(tmp_path, asked, os_name="darwin", machine="arm64"), requested="auto")
    assert asked == [["llama_cpp", "mlx"]]
    assert report.chosen.name == "mlx"


def test_an_explicit_choice_or_an_mlx_model_asks_that_engine(tmp_path):
    asked: list = []
    report = detect(recording_probe(tmp_path / "a", asked), requested="openvino")
    assert asked[-1] == ["llama_cpp", "openvino"]
    assert [c.name for c in plan(report, "openvino")] == ["openvino", "cpu"]
    report = detect(recording_probe(tmp_path / "b", asked), requested="mlx")
    assert asked[-1] == ["llama_cpp", "mlx"]
    assert [c.name for c in plan(report, "mlx")] == ["mlx", "cpu"]
    report = detect(recording_probe(tmp_path / "c", asked), requested="auto", model_is_mlx=True)
    assert asked[-1] == ["llama_cpp", "mlx"]
    assert [c.name for c in plan(report, model_is_mlx=True)] == ["mlx"]


def test_a_choice_that_was_not_asked_is_never_run(tmp_path):
    asked: list = []
    report = detect(recording_probe(tmp_path, asked), requested="cpu")
    with pytest.raises(BackendError, match="--backend openvino cannot run here: not asked"):
        plan(report, "openvino")


def _modules_after(code: str) -> dict:
    script = code + "\nimport json, sys\nprint(json.dumps({m: m in sys.modules for m in ('openvino', 'mlx')}))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_loading_on_this_machine_imports_neither_openvino_nor_mlx(smollm_path):
    # the real path of `tokchat --model M`: auto detection, then a llama.cpp load
    loaded = _modules_after(
        "from backends import LoadOptions, open_backend\n"
        f"b = open_backend({str(smollm_path)!r}, LoadOptions(n_ctx=256))\n"
        "assert b.info.backend == 'llama.cpp', b.info\n"
        "b.close()"
    )
    assert loaded == {"openvino": False, "mlx": False}


def test_doctor_on_this_machine_asks_openvino_and_mlx():
    # both are installed with the test extras, so asking them imports them
    loaded = _modules_after("from backends.detect import detect\nreport = detect()\nassert report.chosen.name == 'cpu'")
    assert loaded == {"openvino": True, "mlx": True}
