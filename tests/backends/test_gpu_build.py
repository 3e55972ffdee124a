"""The engine built for the accelerator present, offload fitted to VRAM, a GPU never left idle without a word.

Only the hardware facts are faked here (``nvidia-smi``, ``nvcc``, ``rocminfo``
as scripts on a fake PATH, the probe's machine files): the choosing, keying,
fitting and reporting code is the real one, and the engine that loads is the
real llama.cpp build of this machine.  The CUDA build itself ran on an H100
(``bench/gpu_check.sh``, docs/engine.md, "The GPU check"); its engine log is the
fixture ``data/h100-load.log``, llama.cpp's own words.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
from pathlib import Path

import pytest
from support.backend_fakes import NVIDIA_PROC, ROCMINFO, RTX_4090_SMI, fake_machine, llama_runtime, nvidia_smi, write_tool

from backends import LoadOptions, gpu_inventory, open_backend
from backends.accelerator import Accelerator, choose
from backends.engine_build import build_dir, build_key, read_build_info
from backends.offload import (
    MIB, ModelSizes, model_sizes, out_of_memory_message, plan_offload, read_load_report,
)

H100_SMI = nvidia_smi(("NVIDIA H100 80GB HBM3", "9.0", 81559, 81000))
DATA = Path(__file__).parent / "data"


@pytest.fixture
def fake_path(tmp_path, monkeypatch):
    """A PATH holding only the fake tools a test writes, and no CUDA or ROCm in their default places.

    (This project's own machines carry a CUDA compiler in /usr/local/cuda without a GPU.)
    """
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr("backends.accelerator._CUDA_DEFAULT", tmp_path / "no-cuda")
    monkeypatch.setattr("backends.accelerator._ROCM_DEFAULT", tmp_path / "no-rocm")
    gpu_inventory.forget()  # the process reads its GPUs once: these tests change them
    yield bin_dir
    gpu_inventory.forget()


def test_an_nvidia_gpu_with_nvcc_gets_a_cuda_build_for_its_own_architecture_only(fake_path):
    write_tool(fake_path, "nvidia-smi", H100_SMI)
    write_tool(fake_path, "nvcc", "")
    acc = choose(env={}, system="Linux", machine="x86_64")
    assert (acc.kind, acc.arch, acc.gpu) == ("cuda", "90", "NVIDIA H100 80GB HBM3")
    assert "-DGGML_CUDA=ON" in acc.cmake_flags and "-DCMAKE_CUDA_ARCHITECTURES=90" in acc.cmake_flags
    assert acc.compiler == str(fake_path / "nvcc") and not acc.missing
    assert acc.tag == "cuda90" and "compute capability 9.0" in acc.label


def test_nvcc_is_found_under_cuda_home_when_it_is_not_on_path(fake_path, tmp_path):
    write_tool(fake_path, "nvidia-smi", RTX_4090_SMI)
    home = tmp_path / "cuda-12"
    write_tool(home / "bin", "nvcc", "")
    acc = choose(env={"CUDA_HOME": str(home)}, system="Linux", machine="x86_64")
    assert acc.kind == "cuda" and acc.arch == "89" and acc.compiler == str(home / "bin" / "nvcc")


def test_a_gpu_without_its_toolkit_builds_for_the_cpu_and_says_what_is_missing_in_one_line(fake_path):
    write_tool(fake_path, "nvidia-smi", H100_SMI)
    acc = choose(env={"CUDA_HOME": "/nonexistent"}, system="Linux", machine="x86_64")
    assert acc.kind == "cpu" and acc.cmake_flags == ()
    assert "NVIDIA GPU (NVIDIA H100 80GB HBM3)" in acc.missing and "nvcc" in acc.missing
    assert "CUDA toolkit" in acc.missing and "\n" not in acc.missing


def test_an_amd_gpu_with_hipcc_gets_a_hip_build_for_its_target(fake_path):
    write_tool(fake_path, "rocminfo", ROCMINFO)
    write_tool(fake_path, "hipcc", "")
    acc = choose(env={}, system="Linux", machine="x86_64")
    assert (acc.kind, acc.arch) == ("hip", "gfx1100") and "-DGGML_HIP=ON" in acc.cmake_flags
    write_tool(fake_path, "hipcc", "")
    (fake_path / "hipcc").unlink()
    no_hip = choose(env={"ROCM_PATH": "/nonexistent"}, system="Linux", machine="x86_64")
    assert no_hip.kind == "cpu" and "hipcc" in no_hip.missing


def test_apple_silicon_is_metal_and_the_cpu_can_be_forced(fake_path):
    assert choose(env={}, system="Darwin", machine="arm64").kind == "metal"
    write_tool(fake_path, "nvidia-smi", H100_SMI)
    write_tool(fake_path, "nvcc", "")
    assert choose(env={"TOKCHAT_ACCELERATOR": "cpu"}, system="Linux", machine="x86_64").kind == "cpu"
    (fake_path / "nvidia-smi").unlink()
    with pytest.raises(ValueError, match="no such GPU"):
        choose(env={"TOKCHAT_ACCELERATOR": "cuda"}, system="Linux", machine="x86_64")


def test_the_build_key_names_the_cpu_the_accelerator_and_the_patches():
    cpu, cuda = Accelerator("cpu"), Accelerator("cuda", "90", cmake_flags=("-DGGML_CUDA=ON",))
    assert build_key(cpu) != build_key(cuda)
    assert "-cuda90-" in build_key(cuda) and "-cpu-" in build_key(cpu)
    from backends.cpu import build_fingerprint
    from backends.engine_patches import patches_digest

    assert f"cpu{build_fingerprint()}" in build_key(cpu) and build_key(cpu).endswith(f"patches{patches_digest()}")


def test_a_build_folder_with_another_key_is_not_taken_for_this_one(tmp_path):
    folder = tmp_path / "0.3.36-cpuX-cpu-patchesNEW"
    folder.mkdir()
    (folder / "build.json").write_text(json.dumps({"key": "0.3.36-cpuX-cpu-patchesOLD"}))
    assert read_build_info(folder) is None  # built with other patches: stale, rebuilt beside it
    (folder / "build.json").write_text(json.dumps({"key": folder.name}))
    assert read_build_info(folder) == {"key": folder.name}


def test_the_engine_and_llama_server_are_one_build():
    """The libllama the engine loads is the build folder's, and llama-server links that same file."""
    from support.assets import asset_path

    acc = choose()
    folder = build_dir(acc)
    info = read_build_info(folder)
    assert info is not None, f"no finished build in {folder}"
    spec = importlib.util.find_spec("llama_cpp")
    loaded = Path(next(iter(spec.submodule_search_locations))) / "lib" / "libllama.so"
    assert hashlib.sha256(loaded.read_bytes()).hexdigest() == info["libllama_sha256"]
    server = asset_path("llama-server") / "llama-server"
    assert server.resolve().parent == folder.resolve()
    linked = subprocess.run(["ldd", str(server)], capture_output=True, text=True, check=True).stdout
    libllama = next(line for line in linked.splitlines() if "libllama.so" in line and "=>" in line)
    assert Path(libllama.split("=>")[1].split()[0]).resolve().parent == folder.resolve()
    version = subprocess.run([str(server), "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and "version" in (version.stdout + version.stderr)


def test_offload_takes_every_layer_when_it_fits_and_whole_blocks_when_it_does_not(smollm_path):
    sizes = model_sizes(smollm_path)
    assert len(sizes.blocks) == 30 and sizes.total <= smollm_path.stat().st_size
    assert sizes.output > 0  # SmolLM2 ties its output head to the embeddings
    kv = 2 * MIB
    everything = sizes.total + kv * 30 + 768 * MIB
    plan = plan_offload(sizes, kv, everything)
    assert plan.n_gpu_layers == -1 and plan.all_on_gpu and plan.total_layers == 31
    half = plan_offload(sizes, kv, 768 * MIB + 10 * (sizes.blocks[0] + kv) + 1)
    assert half.n_gpu_layers == 10 and half.layers_on_gpu == 10 and not half.all_on_gpu
    assert plan_offload(sizes, kv, 100 * MIB).n_gpu_layers == 0


def test_what_llama_cpp_did_on_the_h100_is_read_from_its_own_log():
    report = read_load_report((DATA / "h100-load.log").read_text())
    assert (report.offloaded, report.total) == (29, 29)
    assert report.gpu_mib("model") == pytest.approx(934.70)
    assert report.gpu_mib("KV") == pytest.approx(224.0)
    assert report.gpu_mib("compute") == pytest.approx(299.75)  # the CUDA_Host buffer is host memory
    assert report.summary() == "29/29 layers on the GPU · VRAM 935 MiB model + 224 MiB KV cache + 300 MiB compute"


def test_out_of_memory_is_one_line_with_the_numbers_and_a_setting_that_fits():
    sizes = ModelSizes(blocks=[900 * MIB] * 28, other=300 * MIB, output=200 * MIB)
    plan = plan_offload(sizes, 64 * MIB, 8 * 1024 * MIB)
    line = out_of_memory_message("big.gguf", plan, 32768, "loading the model")
    assert "\n" not in line and f"{plan.layers_on_gpu}/29 layers" in line and "8192 MiB were free" in line
    assert "--ctx 16384" in line and f"--gpu-layers {plan.layers_on_gpu // 2}" in line


@pytest.mark.slow
def test_a_gpu_left_idle_is_named_in_the_load_notes_and_the_model_bar(smollm_path, tmp_path):
    """An NVIDIA GPU is here, the engine was built without CUDA: the chat runs on the CPU and says why."""
    from app.tui.format import model_bar_text

    probe = fake_machine(tmp_path, files={"/proc/driver/nvidia/version": NVIDIA_PROC},
                         tools={"nvidia-smi": RTX_4090_SMI},
                         runtime=llama_runtime())
    backend = open_backend(smollm_path, LoadOptions(backend="auto", n_ctx=512, log_path=tmp_path / "e.log"), probe)
    try:
        info = backend.info
        assert info.device == "CPU" and info.offloaded_layers == 0
        assert info.caveat.startswith("GPU unused: NVIDIA GPU found") and "built without CUDA" in info.caveat
        assert any("the CUDA GPU is unused" in n and "python3 dev.py run" in n for n in info.notes)
        bar = model_bar_text(info.model_name, info.quantization, info.backend, info.device, "chatml", 512,
                             info.caveat)
        assert bar.endswith(f"⚠ {info.caveat}")
    finally:
        backend.close()
