"""Every GPU on this machine, read once with one parser per vendor: what detection, the build and the offload plan use.

NVIDIA GPUs come from one ``nvidia-smi`` query that asks for everything the
three users need (index, compute capability, driver, total and free memory,
name); AMD GPUs from ``rocminfo``'s agents (their ``gfx`` targets).  Before
this module the same facts were read three times, by three parsers, each
assuming one GPU: the build choice (``backends/accelerator.py``), detection
(``backends/probe.py``) and the offload plan (``backends/offload.py``).

Users:

- :mod:`backends.accelerator`: a CUDA build for every distinct compute
  capability present (``CMAKE_CUDA_ARCHITECTURES=86;90``), a HIP build for
  every distinct ``gfx`` target;
- :mod:`backends.probe` / :mod:`backends.detect`: what ``doctor`` shows;
- :mod:`backends.fit` and :mod:`backends.llama_cpp`: each GPU's free memory.

:func:`current` reads the machine once per process and keeps the answer
(a load in the chat's process and one in the engine's each ask at most
once); :func:`read` reads through a given runner, for a probe over a fake
``PATH`` or a test.  Standard library only: ``dev.py`` asks before any
virtual environment exists.

Not handled: AMD's free memory (``rocm-smi``; the offload plan is CUDA's
only), Intel GPUs (detection reads those from sysfs).
"""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable

from backends.timeouts import TOOL_S

_MIB = 1 << 20
#: the one query: the name last, so a name with a comma in it still parses
NVIDIA_QUERY = ("nvidia-smi", "--query-gpu=index,compute_cap,driver_version,memory.total,memory.free,name",
                "--format=csv,noheader,nounits")
ROCMINFO_QUERY = ("rocminfo",)

#: a tool's stdout; None where the tool is not there, "" where it failed or hung
Runner = Callable[[list[str]], "str | None"]


def run_tool(cmd: list[str], path: str | None = None) -> str | None:
    """``cmd``'s stdout, the tool looked up on ``path`` (default ``$PATH``): None where it is not there, ""
    where it failed or hung (:data:`~backends.timeouts.TOOL_S`)."""
    exe = shutil.which(cmd[0], path=path)
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, *cmd[1:]], capture_output=True, text=True, timeout=TOOL_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""


@dataclass(frozen=True)
class Gpu:
    """One GPU as its driver's tool lists it."""

    vendor: str  # "nvidia" | "amd"
    index: int
    name: str
    #: what a build compiles for: the CUDA compute capability without its dot ("90"), the HIP target ("gfx1100")
    arch: str
    driver: str = ""
    total_bytes: int | None = None
    free_bytes: int | None = None


@dataclass(frozen=True)
class GpuInventory:
    """The machine's GPUs; ``nvidia_smi``/``rocminfo``: whether each tool is there (None: not on PATH, "":
    it ran and failed, else what it printed), so detection can say why it found none."""

    gpus: tuple[Gpu, ...] = ()
    nvidia_smi: str | None = None
    rocminfo: str | None = None

    @property
    def nvidia(self) -> tuple[Gpu, ...]:
        return tuple(g for g in self.gpus if g.vendor == "nvidia")

    @property
    def amd(self) -> tuple[Gpu, ...]:
        return tuple(g for g in self.gpus if g.vendor == "amd")

    def architectures(self, vendor: str) -> tuple[str, ...]:
        """The distinct architectures of ``vendor``'s GPUs, lowest first (one build compiles for all of them)."""
        found = {g.arch for g in self.gpus if g.vendor == vendor}
        return tuple(sorted(found, key=lambda a: (len(a), a)))

    def free_vram_per_gpu(self) -> list[int]:
        """Free bytes of each NVIDIA GPU, in ``nvidia-smi``'s order ([] where it cannot say)."""
        free = [g.free_bytes for g in self.nvidia]
        return [f for f in free if f is not None] if all(f is not None for f in free) else []


def parse_nvidia_smi(out: str) -> tuple[Gpu, ...]:
    """The GPUs in the output of :data:`NVIDIA_QUERY`; a line that does not parse is left out."""
    gpus = []
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",", 5)]
        if len(fields) != 6 or not fields[5]:
            continue
        index, cap, driver, total, free, name = fields
        cap = cap.replace(".", "")
        if not index.isdigit() or not cap.isdigit():
            continue
        gpus.append(Gpu("nvidia", int(index), name, cap, driver, _mib(total), _mib(free)))
    return tuple(gpus)


def _mib(text: str) -> int | None:
    try:
        return int(float(text)) * _MIB
    except ValueError:
        return None  # "[N/A]" on some boards


def parse_rocminfo(out: str) -> tuple[Gpu, ...]:
    """One GPU per ``rocminfo`` agent named by a ``gfx`` target (CPU agents are named by their model), with
    the ``Marketing Name`` that follows it where there is one."""
    found: list[list[str]] = []  # [target, marketing name]
    in_gpu = False  # the latest agent's Name was a gfx target
    for line in out.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "Name":
            in_gpu = re.fullmatch(r"gfx[0-9a-f]+", value) is not None
            if in_gpu:
                found.append([value, ""])
        elif key == "Marketing Name" and in_gpu and not found[-1][1]:
            found[-1][1] = value
    return tuple(Gpu("amd", i, name or target, target) for i, (target, name) in enumerate(found))


def read(run: Runner | None = None) -> GpuInventory:
    """The GPUs ``nvidia-smi`` and ``rocminfo`` list, asked through ``run`` (default: this ``$PATH``)."""
    run = run or run_tool
    smi = run(list(NVIDIA_QUERY))
    rocm = run(list(ROCMINFO_QUERY))
    return GpuInventory(parse_nvidia_smi(smi or "") + parse_rocminfo(rocm or ""), smi, rocm)


_current: GpuInventory | None = None


def current() -> GpuInventory:
    """This machine's GPUs, read on the first call in this process and kept (see the module docstring)."""
    global _current
    if _current is None:
        _current = read()
    return _current


def forget() -> None:
    """Read the machine again at the next :func:`current` (a test that changed the fake tools)."""
    global _current
    _current = None
