"""Simulated machines for the detection tests: a fake root, fake tools, fake engine answers.

Only the hardware is simulated.  The detection code that reads these files
and runs these tools is the real one.
"""
from __future__ import annotations

import stat
from pathlib import Path

from backends.probe import RuntimeAnswers, SystemProbe

NVIDIA_PROC = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.82.07  Thu Aug 21 2025\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)
ROCMINFO = """ROCk module is loaded
*******
Agent 1
*******
  Name:                    AMD Ryzen 9 7950X 16-Core Processor
  Device Type:             CPU
*******
Agent 2
*******
  Name:                    gfx1100
  Marketing Name:          Radeon RX 7900 XTX
  Device Type:             GPU
"""


def nvidia_smi(*gpus: tuple[str, str, int, int], driver: str = "580.82.07") -> str:
    """What ``nvidia-smi`` prints for tokchat's one query (``backends.gpu_inventory.NVIDIA_QUERY``): a line per
    GPU given as (name, compute capability, total MiB, free MiB)."""
    return "".join(f"{i}, {cap}, {driver}, {total}, {free}, {name}\n"
                   for i, (name, cap, total, free) in enumerate(gpus))


#: one GeForce RTX 4090 with 24,564 MiB, 23,000 of them free
RTX_4090_SMI = nvidia_smi(("NVIDIA GeForce RTX 4090", "8.9", 24564, 23000))


def write_tool(bin_dir: Path, name: str, stdout: str) -> None:
    """A shell script called ``name`` that prints ``stdout``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / name
    body = stdout.replace("'", "'\\''")
    script.write_text(f"#!/bin/sh\nprintf '%s' '{body}'\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def fake_machine(
    tmp: Path,
    *,
    files: dict[str, str] | None = None,
    tools: dict[str, str] | None = None,
    runtime: RuntimeAnswers | None = None,
    os_name: str = "linux",
    machine: str = "x86_64",
) -> SystemProbe:
    """A probe over ``tmp/root`` with only ``tmp/bin`` on PATH."""
    root = tmp / "root"
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in (files or {}).items():
        path = root / rel.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, out in (tools or {}).items():
        write_tool(bin_dir, name, out)
    return SystemProbe(root=root, path=str(bin_dir), runtime=runtime or RuntimeAnswers(),
                       os_name=os_name, machine=machine)


def llama_runtime(*gpu_libs: str, **more) -> RuntimeAnswers:
    """Answers of an installed llama-cpp-python built with ``gpu_libs``."""
    return RuntimeAnswers(
        llama_cpp_version="0.3.36", llama_gpu_offload=bool(gpu_libs), llama_gpu_libs=list(gpu_libs),
        llama_lib_dir="/site-packages/llama_cpp/lib", **more,
    )


