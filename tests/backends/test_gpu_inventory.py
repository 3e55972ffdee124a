"""One GPU inventory (backends/gpu_inventory.py) for detection, the build choice and the offload plan.

Only the hardware is faked (``nvidia-smi``, ``nvcc``, ``rocminfo`` as
scripts on a fake PATH, as in test_gpu_build.py); the reading, choosing,
planning and the llama.cpp load are the real ones.
"""
from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from support.backend_fakes import NVIDIA_PROC, ROCMINFO, fake_machine, llama_runtime, nvidia_smi, write_tool

from backends import LoadOptions, gpu_inventory, open_backend
from backends.accelerator import Accelerator, choose
from backends.detect import detect
from backends.engine_build import build_dir, build_key, read_build_info
from backends.fit import default_offload
from backends.model_meta import read_model_meta
from backends.offload import MIB, RESERVE_BYTES

ROOT = Path(__file__).resolve().parents[2]
#: a machine with two architectures: an RTX A5000 (8.6) and two H100s (9.0)
MIXED_SMI = nvidia_smi(("NVIDIA RTX A5000", "8.6", 24564, 20000), ("NVIDIA H100 80GB HBM3", "9.0", 81559, 70000),
                       ("NVIDIA H100 80GB HBM3", "9.0", 81559, 80000))


@pytest.fixture
def fake_path(tmp_path, monkeypatch):
    """Only the fake tools on PATH, no CUDA or ROCm in their default places, nothing kept from another test."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr("backends.accelerator._CUDA_DEFAULT", tmp_path / "no-cuda")
    monkeypatch.setattr("backends.accelerator._ROCM_DEFAULT", tmp_path / "no-rocm")
    gpu_inventory.forget()
    yield bin_dir
    gpu_inventory.forget()


def counting_tool(bin_dir: Path, name: str, stdout: str, calls: Path, exit_code: int = 0) -> None:
    """A fake ``name`` that prints ``stdout``, adds a line to ``calls`` each time it runs, exits ``exit_code``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / name
    body = stdout.replace("'", "'\\''")
    script.write_text(f"#!/bin/sh\necho \"$0 $*\" >> '{calls}'\nprintf '%s' '{body}'\nexit {exit_code}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def test_every_gpu_is_read_with_its_architecture_and_free_memory(fake_path):
    write_tool(fake_path, "nvidia-smi", MIXED_SMI)
    gpus = gpu_inventory.read()
    assert [(g.index, g.name, g.arch) for g in gpus.nvidia] == [
        (0, "NVIDIA RTX A5000", "86"), (1, "NVIDIA H100 80GB HBM3", "90"), (2, "NVIDIA H100 80GB HBM3", "90")]
    assert gpus.free_vram_per_gpu() == [20000 * MIB, 70000 * MIB, 80000 * MIB]
    assert gpus.architectures("nvidia") == ("86", "90")
    write_tool(fake_path, "rocminfo", ROCMINFO)
    amd = gpu_inventory.read().amd
    assert [(g.name, g.arch) for g in amd] == [("Radeon RX 7900 XTX", "gfx1100")]  # the CPU agent is no GPU


def test_the_cuda_build_compiles_for_every_distinct_architecture_present(fake_path):
    """It used to take the first GPU's compute capability only: the H100s of this machine would get a build
    for 8.6 that their 9.0 cannot run as well as its own."""
    write_tool(fake_path, "nvidia-smi", MIXED_SMI)
    write_tool(fake_path, "nvcc", "")
    acc = choose(env={}, system="Linux", machine="x86_64")
    assert acc.kind == "cuda" and "-DCMAKE_CUDA_ARCHITECTURES=86;90" in acc.cmake_flags
    assert acc.tag == "cuda86_90" and "-cuda86_90-" in build_key(acc)
    assert acc.label == "CUDA (compute capability 8.6 and 9.0, NVIDIA RTX A5000, 2 x NVIDIA H100 80GB HBM3)"


def test_detection_and_the_fit_read_the_same_gpus(fake_path, tmp_path, smollm_path):
    """doctor's lines and the free VRAM of every GPU come from the one read of the probe."""
    probe = fake_machine(tmp_path, files={"/proc/driver/nvidia/version": NVIDIA_PROC}, tools={"nvidia-smi": MIXED_SMI},
                         runtime=llama_runtime("cuda"))
    facts = detect(probe).facts
    assert facts.nvidia_smi == ["NVIDIA RTX A5000, 580.82.07, 24564 MiB", "NVIDIA H100 80GB HBM3, 580.82.07, 81559 MiB",
                                "NVIDIA H100 80GB HBM3, 580.82.07, 81559 MiB"]
    assert facts.gpus.free_vram_per_gpu() == [20000 * MIB, 70000 * MIB, 80000 * MIB]
    meta = read_model_meta(smollm_path)
    # two GPUs hold what one does not: their free memory together, less llama.cpp's reserve on each
    one = default_offload(smollm_path, meta, 2048, parse_f16(), [100 * MIB + RESERVE_BYTES])
    two = default_offload(smollm_path, meta, 2048, parse_f16(), [100 * MIB + RESERVE_BYTES, 100 * MIB + RESERVE_BYTES])
    assert not one.all_on_gpu and two.layers_on_gpu > one.layers_on_gpu
    assert two.free_bytes == 200 * MIB + 2 * RESERVE_BYTES and two.need_bytes <= two.free_bytes
    assert default_offload(smollm_path, meta, 2048, parse_f16(), []) is None  # no GPU: no plan


def test_tokchat_fit_plans_the_offload_over_every_gpu(tmp_path, smollm_path):
    """``tokchat fit`` on a machine with two small GPUs: the default offload counts both (it used to plan for
    GPU0 alone), as the load does."""
    from support.process_env import child_env

    free_mib = RESERVE_BYTES // MIB + 40
    tools = tmp_path / "tools"
    write_tool(tools, "nvidia-smi", nvidia_smi(*[("NVIDIA L4", "8.9", 23034, free_mib)] * 2))
    env = child_env(tmp_path) | {"PATH": f"{tools}:/usr/bin:/bin"}
    args = [sys.executable, "-m", "app", "fit", str(smollm_path), "--ctx", "2048"]
    data = json.loads(subprocess.run([*args, "--json"], capture_output=True, text=True, env=env, cwd=ROOT,
                                     timeout=120, check=True).stdout)
    assert data["free_vram"] == [free_mib * MIB, free_mib * MIB]
    meta = read_model_meta(smollm_path)
    alone = default_offload(smollm_path, meta, 2048, parse_f16(), free_mib * MIB)
    both = default_offload(smollm_path, meta, 2048, parse_f16(), [free_mib * MIB] * 2)
    assert alone.layers_on_gpu < both.layers_on_gpu
    assert data["gpu_layers"] == f"{both.layers_on_gpu}/{both.total_layers}"
    shown = subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120).stdout
    assert f"{both.layers_on_gpu}/{both.total_layers} layers on the GPUs" in shown


def parse_f16():
    from backends.kv_types import parse_kv_type

    return parse_kv_type("f16")


@pytest.mark.slow
def test_a_cuda_load_asks_nvidia_smi_once(fake_path, tmp_path, smollm_path, monkeypatch):
    """The chat's process reads the GPUs once (detection), and the fit check and the engine's offload plan (in
    the engine's process) take that read; the chat's process used to ask again for the fit, and the engine's
    once more for its plan."""
    calls = tmp_path / "calls"
    free_mib = RESERVE_BYTES // MIB + 40  # a small GPU: part of the model goes to it
    counting_tool(fake_path, "nvidia-smi", nvidia_smi(("NVIDIA GeForce RTX 4090", "8.9", 24564, free_mib)), calls)
    monkeypatch.setenv("PATH", f"{fake_path}:/usr/bin:/bin")
    probe = fake_machine(tmp_path, files={"/proc/driver/nvidia/version": NVIDIA_PROC},
                         runtime=llama_runtime("cuda"))  # its PATH: tmp_path/bin, which is fake_path
    backend = open_backend(smollm_path, LoadOptions(backend="auto", n_ctx=512, log_path=tmp_path / "e.log",
                                                    speculative="off"), probe)
    try:
        assert backend.info.device == "CUDA"
        assert any(note.startswith("CUDA: ") for note in backend.info.notes), backend.info.notes
        # the engine's plan is made with the free memory this process read
        assert any(f"MiB fit in {free_mib} MiB free" in note for note in backend.info.notes), backend.info.notes
    finally:
        backend.close()
    asked = [line for line in calls.read_text().splitlines() if "--query-gpu" in line]
    assert len(asked) == 1, asked


# -- a failed GPU build is tried again by the next dev.py run -----------------------------------------------------

FAKE_PYTHON = """#!/bin/sh
# the test's venv: the project's own Python, without the step that pip-installs the engine into a venv (the
# build it would install is the one engine_build prints, which is all dev.py records)
for a; do shift; [ "$a" = --install ] || set -- "$@" "$a"; done
exec '{python}' "$@"
"""


def ensure_engine(venv: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``dev.py``'s engine step (what ``python3 dev.py run`` does first) in a process of its own."""
    return subprocess.run([sys.executable, "-c", "import dev; dev.ensure_engine(engine_only=True)"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)


def test_a_failed_gpu_build_is_tried_again_by_the_next_dev_py_run(tmp_path):
    """An NVIDIA GPU and an nvcc that fails: the CPU build stands in, and dev.py records the CPU build's key,
    not the GPU build's, so the next ``dev.py run`` (what ``doctor`` advises) tries the GPU build again.  It
    used to record the GPU build's key: the next run found it and did nothing.  No compiler runs: the GPU
    build stops at the compiler check, and the CPU build is this machine's own, already built."""
    cpu_build = build_dir(Accelerator("cpu"))
    assert read_build_info(cpu_build) is not None, f"no CPU build in {cpu_build} (python3 dev.py test makes it)"
    cache = tmp_path / "cache"
    (cache / "tokchat" / "engine").mkdir(parents=True)
    (cache / "tokchat" / "engine" / cpu_build.name).symlink_to(cpu_build)
    tools = tmp_path / "tools"
    calls = tmp_path / "calls"
    counting_tool(tools, "nvidia-smi", nvidia_smi(("NVIDIA H100 80GB HBM3", "9.0", 81559, 81000)), calls)
    counting_tool(tools, "nvcc", "nvcc fatal   : the fake toolkit is broken\n", calls, exit_code=1)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(FAKE_PYTHON.format(python=sys.executable))
    (venv / "bin" / "python").chmod(0o755)
    env = {"PATH": f"{tools}:/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CACHE_HOME": str(cache),
           "TOKCHAT_VENV": str(venv), "PIP_NO_INDEX": "1"}

    first = ensure_engine(venv, env)
    assert first.returncode == 0, first.stderr
    assert "nvcc --version failed (1): nvcc fatal   : the fake toolkit is broken" in first.stderr
    assert "building for the CPU meanwhile" in first.stderr
    assert (venv / ".tokchat-engine").read_text() == cpu_build.name  # the build installed, not the one wanted

    second = ensure_engine(venv, env)
    assert second.returncode == 0, second.stderr
    assert "nvcc --version failed" in second.stderr  # the GPU build was tried again
    assert (venv / ".tokchat-engine").read_text() == cpu_build.name
