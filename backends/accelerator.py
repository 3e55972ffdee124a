"""Which llama.cpp build this machine should get: CUDA, ROCm/HIP, Metal or the CPU, and why.

Standard library only: ``dev.py`` asks before any virtual environment
exists, and the answer keys the engine build (``backends/engine_build.py``).

The rule is the one llama.cpp's own docs give a user, made automatic:

- an NVIDIA GPU (``nvidia-smi`` lists one) and a CUDA compiler (``nvcc`` on
  ``PATH``, under ``$CUDA_HOME``/``$CUDA_PATH`` or ``/usr/local/cuda``):
  ``-DGGML_CUDA=ON`` for the compute capabilities of the GPUs present only
  (each distinct one: a machine with an 8.6 and a 9.0 card gets
  ``CMAKE_CUDA_ARCHITECTURES=86;90``), so the build stays minutes, not an
  hour for every architecture;
- an AMD GPU (``rocminfo`` names a ``gfx`` target) and ``hipcc``:
  ``-DGGML_HIP=ON`` for the targets present only;
- Apple Silicon: llama.cpp's default build, which is Metal;
- otherwise the CPU build.

A GPU without its toolkit gets the CPU build and a ``missing`` sentence
that names what to install; ``doctor`` and the TUI's model bar repeat it,
so a GPU never sits idle without a word.

``TOKCHAT_ACCELERATOR=cpu`` forces the CPU build (a user who wants it, or a
test); ``cuda``/``hip`` insist on that build and fail when it cannot be had.

The GPUs come from :mod:`backends.gpu_inventory` (one parser per vendor,
shared with detection and the offload plan).
"""
from __future__ import annotations

import os
import platform
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from backends import gpu_inventory
from backends.gpu_inventory import Gpu, Runner

#: the places a CUDA toolkit is installed when ``nvcc`` is not on PATH
_CUDA_HOMES = ("CUDA_HOME", "CUDA_PATH")
_CUDA_DEFAULT = Path("/usr/local/cuda")
_ROCM_DEFAULT = Path("/opt/rocm")
KINDS = ("cpu", "cuda", "hip", "metal")


@dataclass(frozen=True)
class Accelerator:
    """The build llama.cpp gets here, with the facts that chose it."""

    kind: str  # cpu | cuda | hip | metal
    #: the GPU architectures compiled for, joined by "_": CUDA compute capabilities ("90", "86_90"), HIP
    #: targets ("gfx1100"); "" otherwise
    arch: str = ""
    #: the GPUs, as the driver names them ("NVIDIA H100 80GB HBM3", "2 x NVIDIA H100 80GB HBM3"); "" for the CPU
    gpu: str = ""
    #: the compiler used for the GPU code (nvcc/hipcc path); "" for the CPU and Metal
    compiler: str = ""
    #: a GPU is present but cannot be built for: what is missing and how to get it (one line)
    missing: str = ""
    cmake_flags: tuple[str, ...] = field(default=())

    @property
    def tag(self) -> str:
        """The build's name in cache keys and reports: ``cpu``, ``cuda90``, ``hipgfx1100``, ``metal``."""
        return f"{self.kind}{self.arch}"

    @property
    def archs(self) -> tuple[str, ...]:
        """Each architecture compiled for (``arch`` split)."""
        return tuple(self.arch.split("_")) if self.arch else ()

    @property
    def label(self) -> str:
        if self.kind == "cuda":
            caps = " and ".join(f"{a[:-1]}.{a[-1]}" for a in self.archs)
            return f"CUDA (compute capability {caps}, {self.gpu})"
        if self.kind == "hip":
            targets = " and ".join(self.archs)
            return f"ROCm/HIP ({targets}, {self.gpu})" if self.gpu else f"ROCm/HIP ({targets})"
        if self.kind == "metal":
            return "Metal (Apple Silicon)"
        return "CPU"


def find_nvcc(env: Mapping[str, str], which: Callable[[str], str | None] = shutil.which) -> str | None:
    """``nvcc`` on PATH, else under ``$CUDA_HOME``/``$CUDA_PATH``, else under /usr/local/cuda."""
    found = which("nvcc")
    if found:
        return found
    homes = [Path(env[k]) for k in _CUDA_HOMES if env.get(k)] + [_CUDA_DEFAULT]
    for home in homes:
        candidate = home / "bin" / "nvcc"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def find_hipcc(env: Mapping[str, str], which: Callable[[str], str | None] = shutil.which) -> str | None:
    found = which("hipcc")
    if found:
        return found
    home = Path(env.get("ROCM_PATH") or env.get("HIP_PATH") or str(_ROCM_DEFAULT))
    candidate = home / "bin" / "hipcc"
    return str(candidate) if candidate.is_file() else None


def _gpu_names(gpus: tuple[Gpu, ...]) -> str:
    """The GPUs by name, a count before a name that repeats: "2 x NVIDIA H100 80GB HBM3, NVIDIA L4"."""
    return ", ".join(name if n == 1 else f"{n} x {name}" for name, n in Counter(g.name for g in gpus).items())


def _apple_silicon(system: str, machine: str) -> bool:
    return system == "Darwin" and machine == "arm64"


def choose(
    env: Mapping[str, str] | None = None,
    run: Runner | None = None,
    which: Callable[[str], str | None] = shutil.which,
    system: str | None = None,
    machine: str | None = None,
) -> Accelerator:
    """The build for this machine: every hardware fact comes through ``run``/``which``/``system``.

    ``run`` asks the GPU tools (:func:`backends.gpu_inventory.read`); without
    it, this process's read of the machine (:func:`backends.gpu_inventory.current`,
    shared with detection: ``doctor`` asks ``nvidia-smi`` once).  Tests fake
    the tools on a ``PATH`` of their own (a faked ``nvidia-smi``); the build
    itself is never faked.
    """
    env = os.environ if env is None else env
    system = platform.system() if system is None else system
    machine = platform.machine() if machine is None else machine
    forced = env.get("TOKCHAT_ACCELERATOR", "").strip().lower()
    if forced and forced not in KINDS:
        raise ValueError(f"TOKCHAT_ACCELERATOR={forced!r}: use one of {', '.join(KINDS)}")
    if forced == "cpu":
        return Accelerator("cpu")
    if _apple_silicon(system, machine):
        return Accelerator("metal", cmake_flags=("-DGGML_METAL=ON",))
    inventory = gpu_inventory.read(run) if run is not None else gpu_inventory.current()
    gpus = inventory.nvidia
    missing = ""
    if gpus and forced in ("", "cuda"):
        caps = inventory.architectures("nvidia")
        nvcc = find_nvcc(env, which)
        if nvcc:
            flags = ("-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={';'.join(caps)}", f"-DCMAKE_CUDA_COMPILER={nvcc}")
            return Accelerator("cuda", "_".join(caps), _gpu_names(gpus), nvcc, cmake_flags=flags)
        missing = (f"an NVIDIA GPU ({_gpu_names(gpus)}) is here but no CUDA compiler: nvcc is not on PATH, in "
                   f"$CUDA_HOME or {_CUDA_DEFAULT}; install the CUDA toolkit (NVIDIA's cuda-toolkit package, or "
                   "'apt-get install nvidia-cuda-toolkit') and run 'python3 dev.py run' again")
    targets = inventory.architectures("amd")
    if targets and forced in ("", "hip") and not gpus:
        hipcc = find_hipcc(env, which)
        if hipcc:
            listed = ";".join(targets)
            flags = ("-DGGML_HIP=ON", f"-DAMDGPU_TARGETS={listed}", f"-DGPU_TARGETS={listed}")
            return Accelerator("hip", "_".join(targets), _gpu_names(inventory.amd), hipcc, cmake_flags=flags)
        missing = (f"an AMD GPU ({', '.join(targets)}) is here but no hipcc: install ROCm's HIP SDK "
                   "(AMD's rocm / hip-dev packages) and run 'python3 dev.py run' again")
    if forced in ("cuda", "hip"):
        raise ValueError(f"TOKCHAT_ACCELERATOR={forced}: {missing or 'no such GPU was found here'}")
    return Accelerator("cpu", missing=missing)
