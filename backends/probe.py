"""Facts about this machine, gathered without importing torch or loading a model.

Three sources, all injectable so tests can simulate any machine:

- files under a root directory (``/`` for real): ``/proc/driver/nvidia/version``,
  ``/dev/nvidia*``, ``/dev/kfd``, ``/sys/class/kfd/kfd/topology/nodes/*/properties``,
  ``/sys/class/drm/*/device/vendor``, ``/dev/accel/accel*`` (Intel NPU);
- tools on a PATH: ``nvidia-smi``, ``rocminfo`` (read once, by
  :mod:`backends.gpu_inventory`'s parsers), ``sysctl`` (Rosetta check);
- the engines' own answers (:class:`RuntimeAnswers`): what llama-cpp-python
  was built with, which devices OpenVINO sees, whether MLX has Metal.  Each
  costs an import of the engine's library (a noticeable part of start-up:
  docs/engine.md), so the caller may ask only some of them.

Nothing here decides anything; :mod:`backends.detect` does.
"""
from __future__ import annotations

import platform as _platform
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection

from backends import gpu_inventory
from backends.gpu_inventory import GpuInventory

#: PCI vendor ids in /sys/class/drm/*/device/vendor
VENDORS = {"0x10de": "NVIDIA", "0x1002": "AMD", "0x8086": "Intel"}
#: GPU backends a llama-cpp-python build can ship, by library name
LLAMA_GPU_LIBS = ("cuda", "hip", "vulkan", "metal", "sycl", "opencl")
#: the engines whose own answers detection can ask for (importing each is a noticeable part of start-up)
RUNTIMES = ("llama_cpp", "openvino", "mlx")


@dataclass
class RuntimeAnswers:
    """What the installed engines say about themselves; None where one is missing."""

    llama_cpp_version: str | None = None
    llama_gpu_offload: bool | None = None
    #: GPU backends found as libggml-<name> next to llama-cpp-python's libllama
    llama_gpu_libs: list[str] = field(default_factory=list)
    llama_lib_dir: str | None = None
    openvino_version: str | None = None
    openvino_devices: list[str] | None = None
    mlx_version: str | None = None
    mlx_metal: bool | None = None
    #: import errors worth showing ("mlx: No module named 'mlx'")
    errors: list[str] = field(default_factory=list)
    #: the engines that were asked; the others' fields say nothing (not "not installed")
    asked: list[str] = field(default_factory=lambda: list(RUNTIMES))


@dataclass
class MachineFacts:
    """Everything :mod:`backends.detect` reasons about."""

    os: str
    machine: str
    rosetta: bool
    nvidia_driver: str | None
    nvidia_dev_nodes: list[str]
    nvidia_smi: list[str] | None  # one "name, driver, memory" line per GPU; None: not on PATH
    amd_kfd: bool
    amd_kfd_gpus: int  # topology nodes with a GPU (gfx_target_version != 0)
    rocminfo_gfx: list[str] | None  # gfx targets; None: rocminfo not on PATH
    drm_vendors: list[str]  # vendor names of /sys/class/drm cards
    npu_nodes: list[str]
    runtime: RuntimeAnswers
    #: every GPU the tools list, with its architecture and free memory (the two lines above are read from it)
    gpus: GpuInventory = field(default_factory=GpuInventory)

    @property
    def apple_silicon(self) -> bool:
        return self.os == "darwin" and self.machine == "arm64" and not self.rosetta

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"apple_silicon": self.apple_silicon}


def real_runtime_answers(engines: Collection[str] = RUNTIMES) -> RuntimeAnswers:
    """Ask the installed ``engines``; every import failure is recorded, never raised."""
    answers = RuntimeAnswers(asked=[e for e in RUNTIMES if e in engines])
    if "llama_cpp" in engines:
        _ask_llama_cpp(answers)
    if "openvino" in engines:
        _ask_openvino(answers)
    if "mlx" in engines:
        _ask_mlx(answers)
    return answers


def _ask_llama_cpp(answers: RuntimeAnswers) -> None:
    """From the installed package's files, without importing it.

    The engine runs in its own process (:mod:`backends.engine_client`); importing
    llama_cpp here would load libllama and NumPy into the chat's process too
    (about 120 MiB and half a second).  A build offloads to a GPU exactly when
    it ships a GPU backend library beside libllama.
    """
    import importlib.util

    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        answers.errors.append("llama_cpp: No module named 'llama_cpp'")
        return
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    answers.llama_cpp_version = _dist_info_version(package_dir.parent, "llama_cpp_python") or _dist_version(
        "llama-cpp-python")
    lib_dir = package_dir / "lib"
    answers.llama_lib_dir = str(lib_dir)
    answers.llama_gpu_libs = gpu_libs_in(lib_dir)
    answers.llama_gpu_offload = bool(answers.llama_gpu_libs)


def _ask_openvino(answers: RuntimeAnswers) -> None:
    try:
        import openvino

        answers.openvino_version = _dist_version("openvino-genai") or openvino.__version__
        answers.openvino_devices = list(openvino.Core().available_devices)
    except (ImportError, RuntimeError, OSError) as exc:
        answers.errors.append(f"openvino: {exc}")


def _ask_mlx(answers: RuntimeAnswers) -> None:
    try:
        import mlx.core as mx

        answers.mlx_version = mx.__version__  # type: ignore[attr-defined,unused-ignore]  # set at runtime, not in mlx's stubs (no mlx: Any)
        answers.mlx_metal = bool(mx.metal.is_available())
    except (ImportError, RuntimeError, OSError, AttributeError) as exc:
        answers.errors.append(f"mlx: {exc}")


def gpu_libs_in(lib_dir: Path) -> list[str]:
    """GPU backends shipped as ``libggml-<name>.so/.dylib`` or ``ggml-<name>.dll`` in ``lib_dir``."""
    if not lib_dir.is_dir():
        return []
    names = {p.name.lower() for p in lib_dir.iterdir()}
    return [gpu for gpu in LLAMA_GPU_LIBS if any(re.match(rf"(lib)?ggml-{gpu}\b", n) for n in names)]


def _dist_info_version(site_dir: Path, normalized: str) -> str | None:
    """The version in the name of ``site_dir/<normalized>-<version>.dist-info`` (one installed copy), else None.

    What :mod:`importlib.metadata` finds for a wheel install, without importing it: that import pulls
    in the email package, a quarter of what detection cost at every start."""
    found = [p.name for p in site_dir.glob(f"{normalized}-*.dist-info")]
    if len(found) != 1:
        return None
    return found[0][len(normalized) + 1:-len(".dist-info")]


def _dist_version(name: str) -> str | None:
    import importlib.metadata  # not at the top: it pulls in the email package

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


class SystemProbe:
    """Reads the machine: pass a fake ``root``, ``path`` and ``runtime`` to simulate one."""

    def __init__(
        self,
        root: Path | str = "/",
        path: str | None = None,
        runtime: RuntimeAnswers | Callable[[Collection[str]], RuntimeAnswers] | None = None,
        os_name: str | None = None,
        machine: str | None = None,
    ) -> None:
        self.root = Path(root)
        self.path = path
        self._runtime = runtime if runtime is not None else real_runtime_answers
        self.os_name = os_name or sys.platform
        self.machine = machine or _platform.machine()

    def _file(self, rel: str) -> Path:
        return self.root / rel.lstrip("/")

    def _run(self, tool: str, *args: str) -> str | None:
        """stdout of ``tool`` found on our PATH; None when absent; "" when it failed."""
        return gpu_inventory.run_tool([tool, *args], self.path)

    def gpu_inventory(self) -> GpuInventory:
        """The GPUs the tools on our PATH list: this process's :func:`backends.gpu_inventory.current` on the
        real machine (each load detects again; the GPUs are asked once), read afresh on a given ``path``."""
        if self.path is None:
            return gpu_inventory.current()
        return gpu_inventory.read(lambda cmd: gpu_inventory.run_tool(cmd, self.path))

    def nvidia_driver(self) -> str | None:
        f = self._file("/proc/driver/nvidia/version")
        if not f.is_file():
            return None
        text = f.read_text(errors="replace")
        m = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?([0-9][0-9.]+)", text) or re.search(r"\b(\d{3}\.\d+(?:\.\d+)?)\b", text)
        return m.group(1) if m else "unknown version"

    @staticmethod
    def nvidia_smi(gpus: GpuInventory) -> list[str] | None:
        """One "name, driver, memory" line per NVIDIA GPU; None: ``nvidia-smi`` is not on PATH."""
        if gpus.nvidia_smi is None:
            return None
        return [f"{g.name}, {g.driver}, {g.total_bytes >> 20} MiB" if g.total_bytes is not None
                else f"{g.name}, {g.driver}" for g in gpus.nvidia]

    def kfd_gpus(self) -> int:
        nodes = self._file("/sys/class/kfd/kfd/topology/nodes")
        count = 0
        for props in sorted(nodes.glob("*/properties")) if nodes.is_dir() else []:
            m = re.search(r"^gfx_target_version\s+(\d+)", props.read_text(errors="replace"), re.M)
            if m and int(m.group(1)) != 0:
                count += 1
        return count

    @staticmethod
    def rocminfo_gfx(gpus: GpuInventory) -> list[str] | None:
        """The distinct gfx targets; None: ``rocminfo`` is not on PATH."""
        return None if gpus.rocminfo is None else sorted({g.arch for g in gpus.amd})

    def drm_vendors(self) -> list[str]:
        drm = self._file("/sys/class/drm")
        found = []
        for vendor in sorted(drm.glob("*/device/vendor")) if drm.is_dir() else []:
            if not re.fullmatch(r"card\d+", vendor.parent.parent.name):
                continue  # connectors (card0-HDMI-A-1) and render nodes repeat the card
            name = VENDORS.get(vendor.read_text(errors="replace").strip().lower())
            if name:
                found.append(name)
        return found

    def rosetta(self) -> bool:
        if self.os_name != "darwin" or self.machine != "x86_64":
            return False
        return (self._run("sysctl", "-n", "sysctl.proc_translated") or "").strip() == "1"

    def facts(self, engines: Callable[[MachineFacts], Collection[str]] | None = None) -> MachineFacts:
        """The machine; ``engines`` picks, from the hardware facts, which engines to ask (default all)."""
        dev = self._file("/dev")
        gpus = self.gpu_inventory()
        facts = MachineFacts(
            os=self.os_name,
            machine=self.machine,
            rosetta=self.rosetta(),
            nvidia_driver=self.nvidia_driver(),
            nvidia_dev_nodes=sorted(p.name for p in dev.glob("nvidia[0-9]*")) if dev.is_dir() else [],
            nvidia_smi=self.nvidia_smi(gpus),
            amd_kfd=self._file("/dev/kfd").exists(),
            amd_kfd_gpus=self.kfd_gpus(),
            rocminfo_gfx=self.rocminfo_gfx(gpus),
            drm_vendors=self.drm_vendors(),
            npu_nodes=sorted(p.name for p in self._file("/dev/accel").glob("accel*")) if (dev / "accel").is_dir() else [],
            runtime=RuntimeAnswers(asked=[]),
            gpus=gpus,
        )
        if callable(self._runtime):
            facts.runtime = self._runtime(RUNTIMES if engines is None else engines(facts))
        else:
            facts.runtime = self._runtime
        return facts
