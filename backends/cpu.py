"""What the CPU is: its feature flags, its cores, and llama.cpp's own thread count for it.

Standard library only (``dev.py`` imports it before any virtual environment
exists, to key the engine build to the CPU it was compiled for).

Not handled: hybrid Intel CPUs' efficiency cores, which llama.cpp leaves out
of its default count (``common_cpu_get_num_math``); tokchat counts every
physical core there.
"""
from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

#: the flags llama.cpp's ``-march=native`` build (and so its AMX path) depends on
_BUILD_FLAG_PREFIXES = ("avx", "amx", "fma", "f16c", "bmi", "sse", "ssse", "vnni", "sve", "neon", "asimd", "dotprod",
                        "i8mm", "bf16")


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as ``/proc/cpuinfo`` lists them (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in {"flags", "Features"}:
            return frozenset(value.split())
    return frozenset()


def cpu_model() -> str:
    """The CPU's model name, for reports (``/proc/cpuinfo``; else the platform's word)."""
    path = Path("/proc/cpuinfo")
    text = path.read_text(errors="replace") if path.is_file() else ""
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
    return platform.processor() or platform.machine()


def has_amx() -> bool:
    """Intel AMX tiles (Sapphire Rapids and later): where llama.cpp's AMX kernel runs."""
    return "amx_tile" in cpu_flags()


def build_fingerprint() -> str:
    """A short digest of the CPU features a ``-march=native`` build bakes in.

    Two machines with the same fingerprint can share one engine build; a
    different fingerprint means a build from elsewhere may die of SIGILL here.
    """
    import hashlib  # here: OpenSSL's libcrypto is 3 MiB of every process that imports hashlib

    flags = sorted(f for f in cpu_flags() if f.startswith(_BUILD_FLAG_PREFIXES))
    text = " ".join([platform.machine(), *flags])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def available_cpus() -> int:
    """CPUs this process may run on (cgroup/affinity aware where the OS tells)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def physical_cores() -> int:
    """Physical cores, counted as llama.cpp counts them (distinct thread-sibling sets on Linux)."""
    siblings = set()
    cpu = 0
    while True:
        path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings")
        try:
            siblings.add(path.read_text().strip())
        except OSError:
            break
        cpu += 1
    if siblings:
        return len(siblings)
    n = os.cpu_count() or 0
    return (n if n <= 4 else n // 2) if n > 0 else 4


def llama_default_threads() -> int:
    """The thread count ``llama-server`` and ``llama-cli`` use when ``-t`` is not given.

    Its physical cores, capped here by the CPUs this process may run on (a
    container's affinity mask), which llama.cpp does not look at.

    tokchat used to keep one core for the UI; with the engine in its own
    process the UI costs almost nothing while a reply streams, and every
    thread decodes measurably faster (docs/engine.md, "Figures behind the
    code's choices"), so llama.cpp's default stands.
    """
    return max(1, min(physical_cores(), available_cpus()))
