"""Which llama.cpp build this machine should get: CUDA, ROCm/HIP, Metal or the CPU, and why.

Standard library only: ``dev.py`` asks before any virtual environment
exists, and the answer keys the engine build (``backends/engine_build.py``).

The rule is the one llama.cpp's own docs give a user, made automatic:

- an NVIDIA GPU (``nvidia-smi`` lists one) and a CUDA compiler (``nvcc`` on
  ``PATH``, under ``$CUDA_HOME``/``$CUDA_PATH`` or ``/usr/local/cuda``):
  ``-DGGML_CUDA=ON`` for that GPU's compute capability only, so the build
  stays minutes, not an hour for every architecture;
- an AMD GPU (``rocminfo`` names a ``gfx`` target) and ``hipcc``:
  ``-DGGML_HIP=ON`` for that target only;
- Apple Silicon: llama.cpp's default build, which is Metal;
- otherwise the CPU build.

A GPU without its toolkit gets the CPU build and a ``missing`` sentence
that names what to install; ``doctor`` and the TUI's model bar repeat it,
so a GPU never sits idle without a word.

``TOKCHAT_ACCELERATOR=cpu`` forces the CPU build (a user who wants it, or a
test); ``cuda``/``hip`` insist on that build and fail when it cannot be had.
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from backends.timeouts import TOOL_S

#: the places a CUDA toolkit is installed when ``nvcc`` is not on PATH
_CUDA_HOMES = ("CUDA_HOME", "CUDA_PATH")
_CUDA_DEFAULT = Path("/usr/local/cuda")
_ROCM_DEFAULT = Path("/opt/rocm")
KINDS = ("cpu", "cuda", "hip", "metal")


@dataclass(frozen=True)
class Accelerator:
    """The build llama.cpp gets here, with the facts that chose it."""

    kind: str  # cpu | cuda | hip | metal
    #: the GPU architecture compiled for: CUDA compute capability ("90"), HIP target ("gfx1100"); "" otherwise
    arch: str = ""
    #: the GPU, as the driver names it ("NVIDIA H100 80GB HBM3"); "" for the CPU
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
    def label(self) -> str:
        if self.kind == "cuda":
            return f"CUDA (compute capability {self.arch[:-1]}.{self.arch[-1]}, {self.gpu})"
        if self.kind == "hip":
            return f"ROCm/HIP ({self.arch}, {self.gpu})" if self.gpu else f"ROCm/HIP ({self.arch})"
        if self.kind == "metal":
            return "Metal (Apple Silicon)"
        return "CPU"


Runner = Callable[[list[str]], "str | None"]


def _run(cmd: list[str]) -> str | None:
    """A tool's stdout, or None when it is missing, fails or hangs (:data:`~backends.timeouts.TOOL_S`)."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=TOOL_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


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


def nvidia_gpus(run: Runner = _run) -> list[tuple[str, str]]:
    """(name, compute capability without the dot) of each NVIDIA GPU ``nvidia-smi`` lists."""
    out = run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"])
    gpus = []
    for line in (out or "").splitlines():
        name, _, cap = line.rpartition(",")
        cap = cap.strip().replace(".", "")
        if name.strip() and cap.isdigit():
            gpus.append((name.strip(), cap))
    return gpus


def amd_targets(run: Runner = _run) -> list[str]:
    """The ``gfx`` targets ``rocminfo`` lists for AMD GPUs (not the CPU agent)."""
    out = run(["rocminfo"]) or ""
    targets = []
    for line in out.splitlines():
        word = line.split(":", 1)[-1].strip()
        if line.strip().startswith("Name:") and word.startswith("gfx") and word not in targets:
            targets.append(word)
    return targets


def _apple_silicon(system: str, machine: str) -> bool:
    return system == "Darwin" and machine == "arm64"


def choose(
    env: Mapping[str, str] | None = None,
    run: Runner = _run,
    which: Callable[[str], str | None] = shutil.which,
    system: str | None = None,
    machine: str | None = None,
) -> Accelerator:
    """The build for this machine: every hardware fact comes through ``run``/``which``/``system``.

    Tests pass their own answers for those (a faked ``nvidia-smi``); the
    build itself is never faked.
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
    gpus = nvidia_gpus(run)
    missing = ""
    if gpus and forced in ("", "cuda"):
        name, cap = gpus[0]
        nvcc = find_nvcc(env, which)
        if nvcc:
            flags = ("-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={cap}", f"-DCMAKE_CUDA_COMPILER={nvcc}")
            return Accelerator("cuda", cap, name, nvcc, cmake_flags=flags)
        missing = (f"an NVIDIA GPU ({name}) is here but no CUDA compiler: nvcc is not on PATH, in $CUDA_HOME "
                   f"or {_CUDA_DEFAULT}; install the CUDA toolkit (NVIDIA's cuda-toolkit package, or "
                   "'apt-get install nvidia-cuda-toolkit') and run 'python3 dev.py run' again")
    targets = amd_targets(run)
    if targets and forced in ("", "hip") and not gpus:
        hipcc = find_hipcc(env, which)
        if hipcc:
            flags = ("-DGGML_HIP=ON", f"-DAMDGPU_TARGETS={targets[0]}", f"-DGPU_TARGETS={targets[0]}")
            return Accelerator("hip", targets[0], compiler=hipcc, cmake_flags=flags)
        missing = (f"an AMD GPU ({targets[0]}) is here but no hipcc: install ROCm's HIP SDK "
                   "(AMD's rocm / hip-dev packages) and run 'python3 dev.py run' again")
    if forced in ("cuda", "hip"):
        raise ValueError(f"TOKCHAT_ACCELERATOR={forced}: {missing or 'no such GPU was found here'}")
    return Accelerator("cpu", missing=missing)
