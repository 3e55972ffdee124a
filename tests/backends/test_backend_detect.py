"""Detection against simulated machines: fake sysfs/proc/dev, fake tools, fake engine answers."""
from __future__ import annotations

import json

import pytest
from support.backend_fakes import NVIDIA_PROC, ROCMINFO, RTX_4090_SMI, fake_machine, llama_runtime

from backends.base import BackendError
from backends.detect import detect, plan
from backends.probe import RuntimeAnswers, gpu_libs_in


def names(candidates):
    return [c.name for c in candidates]


def test_apple_silicon_with_mlx_chooses_mlx(tmp_path):
    runtime = llama_runtime("metal", mlx_version="0.29.0", mlx_metal=True)
    report = detect(fake_machine(tmp_path, os_name="darwin", machine="arm64", runtime=runtime))
    assert report.facts.apple_silicon
    assert report.chosen.name == "mlx" and report.chosen.device == "Metal"
    # auto falls back to llama.cpp on Metal, then the CPU
    assert names(plan(report)) == ["mlx", "metal", "cpu"]
    assert "Apple Silicon" in report.text()


def test_apple_silicon_without_mlx_uses_llama_metal_and_says_how_to_get_mlx(tmp_path):
    report = detect(fake_machine(tmp_path, os_name="darwin", machine="arm64", runtime=llama_runtime("metal")))
    assert report.chosen.name == "metal"
    mlx = report.candidate("mlx")
    assert not mlx.runnable and mlx.fix == "pip install mlx-lm"
    with pytest.raises(BackendError, match="mlx-lm is not installed"):
        plan(report, "mlx")


def test_rosetta_python_is_not_apple_silicon(tmp_path):
    probe = fake_machine(tmp_path, os_name="darwin", machine="x86_64", tools={"sysctl": "1\n"},
                         runtime=llama_runtime("metal", mlx_version="0.29.0", mlx_metal=False))
    report = detect(probe)
    assert report.facts.rosetta and not report.facts.apple_silicon
    assert report.chosen.name == "cpu"
    assert "Rosetta" in report.text() and "arm64 Python" in report.text()


def nvidia_files():
    return {
        "/proc/driver/nvidia/version": NVIDIA_PROC,
        "/dev/nvidia0": "",
        "/dev/nvidiactl": "",
        "/sys/class/drm/card0/device/vendor": "0x10de\n",
    }


NVIDIA_SMI = RTX_4090_SMI


def test_nvidia_with_cuda_build_chooses_cuda(tmp_path):
    probe = fake_machine(tmp_path, files=nvidia_files(), tools={"nvidia-smi": NVIDIA_SMI},
                         runtime=llama_runtime("cuda"))
    report = detect(probe)
    assert report.facts.nvidia_driver == "580.82.07"
    assert report.facts.nvidia_dev_nodes == ["nvidia0"]
    assert report.facts.nvidia_smi == ["NVIDIA GeForce RTX 4090, 580.82.07, 24564 MiB"]
    assert report.chosen.name == "cuda" and report.chosen.engine == "llama.cpp"
    assert "RTX 4090" in report.chosen.reason and "goes to the GPU" in report.chosen.reason


def test_nvidia_without_cuda_build_explains_the_reinstall(tmp_path):
    probe = fake_machine(tmp_path, files=nvidia_files(), tools={"nvidia-smi": NVIDIA_SMI}, runtime=llama_runtime())
    report = detect(probe)
    assert report.chosen.name == "cpu"
    cuda = report.candidate("cuda")
    assert not cuda.runnable
    assert "driver 580.82.07" in cuda.reason and "built without CUDA" in cuda.reason
    # the fix is tokchat's own build for this GPU, never a pip reinstall that drops tokchat's patches
    assert cuda.fix.startswith("python3 dev.py run") and "nvcc" in cuda.fix and "pip install" not in cuda.fix
    with pytest.raises(BackendError, match="dev.py run"):
        plan(report, "cuda")
    assert cuda.fix in report.text()
    # the GPU that is here and left idle is named for the model bar and the load notes
    assert report.unused_gpu(report.chosen) is cuda
    assert report.unused_gpu(report.candidate("cuda")) is None


def test_nvidia_driver_without_nvidia_smi_is_still_found(tmp_path):
    report = detect(fake_machine(tmp_path, files=nvidia_files(), runtime=llama_runtime("cuda")))
    assert report.facts.nvidia_smi is None
    assert report.chosen.name == "cuda"


def test_amd_rocm(tmp_path):
    files = {
        "/dev/kfd": "",
        "/sys/class/kfd/kfd/topology/nodes/0/properties": "cpu_cores_count 16\ngfx_target_version 0\n",
        "/sys/class/kfd/kfd/topology/nodes/1/properties": "cpu_cores_count 0\ngfx_target_version 110000\n",
        "/sys/class/drm/card1/device/vendor": "0x1002\n",
        "/sys/class/drm/card1-DP-1/device/vendor": "0x1002\n",
    }
    report = detect(fake_machine(tmp_path, files=files, tools={"rocminfo": ROCMINFO}, runtime=llama_runtime("hip")))
    assert report.facts.amd_kfd and report.facts.amd_kfd_gpus == 1
    assert report.facts.rocminfo_gfx == ["gfx1100"]
    assert report.facts.drm_vendors == ["AMD"]  # the connector entry is not a second card
    assert report.chosen.name == "rocm" and report.chosen.device == "ROCm"
    # the same machine with a CPU-only llama-cpp-python: the HIP reinstall command
    report = detect(fake_machine(tmp_path / "b", files=files, tools={"rocminfo": ROCMINFO}, runtime=llama_runtime()))
    assert report.chosen.name == "cpu"
    assert "dev.py run" in report.candidate("rocm").fix and "hipcc" in report.candidate("rocm").fix


def test_intel_gpu_through_openvino(tmp_path):
    runtime = llama_runtime(openvino_version="2026.4.1", openvino_devices=["CPU", "GPU.0", "GPU.1"])
    report = detect(fake_machine(tmp_path, files={"/sys/class/drm/card0/device/vendor": "0x8086\n"}, runtime=runtime))
    assert report.chosen.name == "openvino" and report.chosen.device == "GPU"
    assert names(plan(report)) == ["openvino", "cpu"]
    assert names(plan(report, "openvino")) == ["openvino", "cpu"]


def test_intel_npu_through_openvino(tmp_path):
    runtime = llama_runtime(openvino_version="2026.4.1", openvino_devices=["CPU", "NPU"])
    report = detect(fake_machine(tmp_path, files={"/dev/accel/accel0": ""}, runtime=runtime))
    assert report.facts.npu_nodes == ["accel0"]
    assert report.chosen.name == "openvino" and report.chosen.device == "NPU"


def test_intel_gpu_that_openvino_cannot_see_says_what_to_install(tmp_path):
    runtime = llama_runtime(openvino_version="2026.4.1", openvino_devices=["CPU"])
    report = detect(fake_machine(tmp_path, files={"/sys/class/drm/card0/device/vendor": "0x8086\n"}, runtime=runtime))
    assert report.chosen.name == "cpu"
    assert "compute-runtime" in report.candidate("openvino").reason


def test_plain_cpu_machine(tmp_path):
    report = detect(fake_machine(tmp_path, runtime=llama_runtime()))
    assert report.chosen.name == "cpu"
    assert names(plan(report)) == ["cpu"]
    for explicit in ("cuda", "rocm", "vulkan", "metal", "mlx", "openvino"):
        with pytest.raises(BackendError, match=f"--backend {explicit} cannot run here"):
            plan(report, explicit)
    data = json.loads(json.dumps(report.to_dict()))
    assert data["chosen"] == "cpu"
    assert {c["name"] for c in data["candidates"]} == {"mlx", "metal", "cuda", "rocm", "openvino", "vulkan", "cpu"}


def test_vulkan_build_on_a_gpu_without_cuda_or_rocm(tmp_path):
    files = {"/sys/class/drm/card0/device/vendor": "0x1002\n"}  # AMD card, no /dev/kfd
    report = detect(fake_machine(tmp_path, files=files, runtime=llama_runtime("vulkan")))
    assert report.chosen.name == "vulkan"
    assert any("no ROCm kernel driver" in f for f in report.findings)


def test_no_llama_cpp_and_nothing_else_is_an_error(tmp_path):
    with pytest.raises(BackendError, match="pip install llama-cpp-python"):
        detect(fake_machine(tmp_path, runtime=RuntimeAnswers()))


def test_unknown_backend_name(tmp_path):
    report = detect(fake_machine(tmp_path, runtime=llama_runtime()))
    with pytest.raises(BackendError, match="unknown backend 'tpu'"):
        plan(report, "tpu")


def test_gpu_libs_found_by_file_name(tmp_path):
    for name in ("libllama.so", "libggml-base.so", "libggml-cpu.so", "libggml-cuda.so.0", "libggml-vulkan.so"):
        (tmp_path / name).write_text("")
    assert gpu_libs_in(tmp_path) == ["cuda", "vulkan"]
    assert gpu_libs_in(tmp_path / "missing") == []
