"""Which backend runs here, and why: the decision behind ``--backend auto`` and ``tokchat doctor``.

Order for ``auto``: MLX on Apple Silicon (native arm64, not Rosetta) >
llama.cpp Metal on Apple Silicon > NVIDIA CUDA > AMD ROCm > Intel GPU/NPU
through OpenVINO > llama.cpp Vulkan > llama.cpp on the CPU.  OpenVINO on the
CPU and MLX off Apple Silicon run only when asked for.  Every candidate
carries a sentence saying why it can or cannot run and, where it cannot,
the command that would fix it.

Loading a model asks an engine only when its answer can change the choice
(:func:`engines_to_ask`): OpenVINO when an Intel GPU or an NPU is present or
it was asked for, MLX on Apple Silicon or when asked for.  ``tokchat
doctor`` asks every engine.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from backends.base import BackendError
from backends.probe import MachineFacts, SystemProbe

CHOICES = ("auto", "cpu", "cuda", "rocm", "vulkan", "metal", "openvino", "mlx")
#: the engine is built by tokchat for the accelerator it finds (backends/engine_build.py); a plain pip
#: reinstall would replace the patched engine with an unpatched one
_REINSTALL = ("python3 dev.py run (it builds llama.cpp for the {device} GPU it finds; it needs {toolkit} "
              "and says in one line what is missing)")
_TOOLKIT = {"cuda": "the CUDA toolkit's nvcc", "rocm": "ROCm's hipcc", "metal": "Xcode's command line tools",
            "vulkan": "the Vulkan SDK (Vulkan builds are not made by dev.py yet)"}
#: --backend name -> (engine, llama.cpp library name / device, CMake flag)
_LLAMA_GPU = {
    "metal": ("metal", "Metal", "-DGGML_METAL=on"),
    "cuda": ("cuda", "CUDA", "-DGGML_CUDA=on"),
    "rocm": ("hip", "ROCm", "-DGGML_HIP=on"),
    "vulkan": ("vulkan", "Vulkan", "-DGGML_VULKAN=on"),
}


@dataclass
class Candidate:
    """One way to run a model here."""

    name: str  # a --backend value
    engine: str  # llama.cpp | openvino | mlx
    device: str  # CPU | CUDA | ROCm | Vulkan | Metal | GPU | NPU
    runnable: bool
    reason: str
    fix: str | None = None
    #: tried by --backend auto (OpenVINO CPU and MLX off Apple Silicon only when asked)
    in_auto: bool = True
    #: the hardware this candidate needs is here (a GPU that cannot run is then a GPU left unused)
    hardware: bool = False

    @property
    def label(self) -> str:
        return f"{self.engine} on {self.device}"


@dataclass
class DetectionReport:
    """The machine facts, the candidates in auto order, and auto's choice."""

    facts: MachineFacts
    candidates: list[Candidate]
    findings: list[str] = field(default_factory=list)

    @property
    def chosen(self) -> Candidate:
        return next(c for c in self.candidates if c.runnable and c.in_auto)

    def candidate(self, name: str) -> Candidate:
        return next(c for c in self.candidates if c.name == name)

    def unused_gpu(self, chosen: Candidate) -> Candidate | None:
        """A GPU that is here but that ``chosen`` leaves idle because it cannot run (None: no such GPU)."""
        if chosen.device != "CPU":
            return None
        return next((c for c in self.candidates if c.hardware and not c.runnable), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "chosen": self.chosen.name,
            "chosen_label": self.chosen.label,
            "findings": self.findings,
            "candidates": [asdict(c) | {"label": c.label} for c in self.candidates],
            "facts": self.facts.to_dict(),
        }

    def text(self) -> str:
        """The human report ``tokchat doctor`` prints."""
        lines = ["Machine:"] + [f"  - {f}" for f in self.findings] + ["", "Backends (auto tries them in this order):"]
        for c in self.candidates:
            mark = "ok " if c.runnable else "no "
            extra = "" if c.in_auto else " (only when asked for)"
            lines.append(f"  [{mark}] {c.name:<9} {c.label}{extra}: {c.reason}")
            if c.fix:
                lines.append(f"              fix: {c.fix}")
        chosen = self.chosen
        lines += ["", f"--backend auto uses: {chosen.name} ({chosen.label}), because {chosen.reason[0].lower()}{chosen.reason[1:]}"]
        return "\n".join(lines)


def _gpu_findings(f: MachineFacts) -> tuple[str | None, str | None, bool, list[str]]:
    """(NVIDIA description or None, AMD description or None, Intel GPU present, findings)."""
    notes: list[str] = []
    arch = f"{f.os} {f.machine}" + (" under Rosetta" if f.rosetta else "")
    if f.apple_silicon:
        notes.append(f"Platform: {arch}: Apple Silicon")
    elif f.rosetta:
        notes.append(f"Platform: {arch}: this Python is an x86_64 build running under Rosetta; "
                     "install a native arm64 Python to use MLX and Metal")
    else:
        notes.append(f"Platform: {arch} (not Apple Silicon: no MLX/Metal acceleration)")

    nvidia = None
    if f.nvidia_driver or f.nvidia_dev_nodes or f.nvidia_smi or "NVIDIA" in f.drm_vendors:
        names = ", ".join(f.nvidia_smi) if f.nvidia_smi else ", ".join(f.nvidia_dev_nodes) or "PCI vendor 0x10de"
        driver = f"driver {f.nvidia_driver}" if f.nvidia_driver else "no driver loaded (/proc/driver/nvidia/version missing)"
        nvidia = f"NVIDIA GPU found ({names}; {driver})"
        notes.append(nvidia)
    else:
        smi = "nvidia-smi not on PATH" if f.nvidia_smi is None else "nvidia-smi lists no GPU"
        notes.append(f"NVIDIA: none (no /proc/driver/nvidia/version, no /dev/nvidia*, {smi})")

    amd = None
    if f.amd_kfd_gpus or f.rocminfo_gfx or (f.amd_kfd and "AMD" in f.drm_vendors):
        targets = ", ".join(f.rocminfo_gfx or []) or f"{f.amd_kfd_gpus} KFD GPU node(s)"
        amd = f"AMD GPU found for ROCm ({targets})"
        notes.append(amd)
    elif "AMD" in f.drm_vendors:
        notes.append("AMD GPU found in /sys/class/drm but no ROCm kernel driver (/dev/kfd missing): "
                     "install ROCm, or use --backend vulkan")
    else:
        notes.append("AMD: none (no /dev/kfd, no GPU nodes in /sys/class/kfd, "
                     + ("rocminfo not on PATH)" if f.rocminfo_gfx is None else "rocminfo lists no gfx target)"))

    intel = "Intel" in f.drm_vendors
    notes.append("Intel GPU found in /sys/class/drm" if intel else "Intel GPU: none in /sys/class/drm")
    if f.npu_nodes:
        notes.append(f"NPU device node(s): {', '.join(f.npu_nodes)}")
    r = f.runtime
    if r.llama_cpp_version:
        libs = ", ".join(f"libggml-{g}" for g in r.llama_gpu_libs) or "no GPU library"
        notes.append(f"llama-cpp-python {r.llama_cpp_version}: GPU offload {'yes' if r.llama_gpu_offload else 'no'} ({libs})")
    else:
        notes.append("llama-cpp-python: not installed")
    if "openvino" not in r.asked:
        notes.append(f"OpenVINO: not asked ({_OPENVINO_NOT_ASKED})")
    else:
        notes.append(f"OpenVINO {r.openvino_version}: devices {', '.join(r.openvino_devices or []) or 'none'}"
                     if r.openvino_version else "OpenVINO: not installed")
    if "mlx" not in r.asked:
        notes.append(f"MLX: not asked ({_MLX_NOT_ASKED})")
    else:
        notes.append(f"MLX {r.mlx_version}: Metal {'available' if r.mlx_metal else 'not available'}"
                     if r.mlx_version else "MLX: not installed")
    return nvidia, amd, intel, notes


def _llama_gpu(name: str, f: MachineFacts, hardware: str | None, missing_hw: str) -> Candidate:
    lib, device, flag = _LLAMA_GPU[name]
    r = f.runtime
    if not r.llama_cpp_version:
        return Candidate(name, "llama.cpp", device, False, "llama-cpp-python is not installed",
                         _REINSTALL.format(device=device, toolkit=_TOOLKIT[name]))
    has_lib = lib in r.llama_gpu_libs
    if hardware and has_lib:
        return Candidate(name, "llama.cpp", device, True,
                         f"{hardware}, and llama-cpp-python has the {device} backend: every layer that fits "
                         "goes to the GPU", hardware=True)
    if hardware:
        return Candidate(name, "llama.cpp", device, False,
                         f"{hardware}, but the engine was built without {device} "
                         f"(no libggml-{lib} in {r.llama_lib_dir or 'its lib folder'})",
                         _REINSTALL.format(device=device, toolkit=_TOOLKIT[name]), hardware=True)
    why = f"this llama-cpp-python has the {device} backend, but " if has_lib else ""
    return Candidate(name, "llama.cpp", device, False, f"{why}{missing_hw}")


def candidates_for(f: MachineFacts) -> tuple[list[Candidate], list[str]]:
    """All candidates in auto order, each with its reason; plus the machine findings."""
    nvidia, amd, intel, notes = _gpu_findings(f)
    r = f.runtime
    out: list[Candidate] = []
    mlx_device = "Metal" if r.mlx_metal else "CPU"
    if "mlx" not in r.asked:
        out.append(Candidate("mlx", "mlx", "CPU", False, f"not asked: {_MLX_NOT_ASKED}", in_auto=False))
    elif not r.mlx_version:
        out.append(Candidate("mlx", "mlx", "Metal" if f.apple_silicon else "CPU", False, "mlx-lm is not installed",
                             'pip install mlx-lm' + ("" if f.os == "darwin" else ' "mlx[cpu]"'), in_auto=f.apple_silicon))
    elif f.apple_silicon:
        ok = bool(r.mlx_metal)
        out.append(Candidate("mlx", "mlx", mlx_device, ok,
                             "Apple Silicon with MLX and Metal" if ok else "MLX is installed but reports no Metal device"))
    else:
        out.append(Candidate("mlx", "mlx", mlx_device, True, "MLX is installed (CPU only off Apple Silicon)",
                             in_auto=False))
    apple = "Apple Silicon found" if f.apple_silicon else None
    out.append(_llama_gpu("metal", f, apple, "this is not Apple Silicon (native arm64 macOS)"))
    out.append(_llama_gpu("cuda", f, nvidia, "no NVIDIA GPU was found (no /proc/driver/nvidia/version, no /dev/nvidia*, no nvidia-smi)"))
    out.append(_llama_gpu("rocm", f, amd, "no AMD ROCm GPU was found (no /dev/kfd GPU nodes, no rocminfo)"))
    devices = r.openvino_devices or []
    accel = [d for d in devices if d.split(".")[0] in ("GPU", "NPU")]
    if "openvino" not in r.asked:
        out.append(Candidate("openvino", "openvino", "CPU", False, f"not asked: {_OPENVINO_NOT_ASKED}",
                             in_auto=False))
    elif not r.openvino_version:
        why = "openvino-genai is not installed" + (" (an Intel GPU is present)" if intel else "")
        out.append(Candidate("openvino", "openvino", "GPU" if intel else "CPU", False, why, "pip install openvino-genai"))
    elif accel:
        best = next((d for fam in ("GPU", "NPU") for d in accel if d.startswith(fam)), accel[0])
        out.append(Candidate("openvino", "openvino", best.split(".")[0], True, f"OpenVINO sees {', '.join(accel)}"))
    else:
        hint = " (an Intel GPU is present but OpenVINO cannot use it: install Intel's compute-runtime GPU driver)" if intel else ""
        out.append(Candidate("openvino", "openvino", "CPU", True,
                             f"OpenVINO sees only {', '.join(devices) or 'no device'}{hint}", in_auto=False))
    any_gpu = f"a GPU found ({', '.join(f.drm_vendors)})" if f.drm_vendors else None
    out.append(_llama_gpu("vulkan", f, any_gpu, "no GPU was found in /sys/class/drm"))
    if r.llama_cpp_version:
        # no thread count here: --threads changes it, and the engine's own note says the one it runs with
        out.append(Candidate("cpu", "llama.cpp", "CPU", True, "llama.cpp runs on any CPU (the fallback)"))
    else:
        out.append(Candidate("cpu", "llama.cpp", "CPU", False, "llama-cpp-python is not installed",
                             "pip install llama-cpp-python"))
    return out, notes


_OPENVINO_NOT_ASKED = ("no Intel GPU or NPU was found, so OpenVINO could only run on the CPU, which auto "
                       "leaves to llama.cpp; `tokchat doctor` asks it")
_MLX_NOT_ASKED = "this is not Apple Silicon, so auto would not pick MLX; `tokchat doctor` asks it"


def engines_to_ask(f: MachineFacts, requested: str = "auto", model_is_mlx: bool = False) -> list[str]:
    """The engines whose answers can change what ``requested`` ends up running on this hardware.

    llama.cpp always (it is the fallback, and its build decides the GPU
    candidates); OpenVINO only where auto could choose it (an Intel GPU or an
    NPU) or when it was asked for; MLX only on Apple Silicon, for an MLX model,
    or when it was asked for.
    """
    ask = ["llama_cpp"]
    if requested == "openvino" or "Intel" in f.drm_vendors or f.npu_nodes:
        ask.append("openvino")
    if requested == "mlx" or model_is_mlx or f.apple_silicon:
        ask.append("mlx")
    return ask


def detect(probe: SystemProbe | None = None, *, requested: str | None = None,
           model_is_mlx: bool = False) -> DetectionReport:
    """Probe the machine (or a simulated one) and rank the backends.

    ``requested`` None (``tokchat doctor``) asks every engine; a ``--backend``
    value asks only those :func:`engines_to_ask` names for it.
    """
    probe = probe or SystemProbe()
    if requested is None:
        facts = probe.facts()
    else:
        facts = probe.facts(lambda hardware: engines_to_ask(hardware, requested, model_is_mlx))
    candidates, findings = candidates_for(facts)
    report = DetectionReport(facts=facts, candidates=candidates, findings=findings)
    if not any(c.runnable and c.in_auto for c in candidates):
        raise BackendError("no inference backend can run here: pip install llama-cpp-python")
    return report


def plan(report: DetectionReport, requested: str = "auto", *, model_is_mlx: bool = False) -> list[Candidate]:
    """The candidates to try, in order.  An explicit choice that cannot run raises with its reason.

    An explicit choice that runs but fails to load *this model* falls back
    to auto's order (the caller says so in the backend's notes).
    """
    if requested not in CHOICES:
        raise BackendError(f"unknown backend {requested!r}: choose one of {', '.join(CHOICES)}")
    auto = [c for c in report.candidates if c.runnable and c.in_auto]
    if model_is_mlx:
        mlx = report.candidate("mlx")
        if not mlx.runnable:
            raise BackendError(f"this is an MLX model directory, but MLX cannot run here: {mlx.reason}"
                               + (f" ({mlx.fix})" if mlx.fix else ""))
        return [mlx]
    if requested == "auto":
        return auto
    chosen = report.candidate(requested)
    if not chosen.runnable:
        fix = f"; fix: {chosen.fix}" if chosen.fix else ""
        raise BackendError(f"--backend {requested} cannot run here: {chosen.reason}{fix}")
    return [chosen] + [c for c in auto if c is not chosen]
