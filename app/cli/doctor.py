"""``tokchat doctor [--json]``: which backend tokchat would use here, and why.

Runs the same detection as ``--backend auto`` (:mod:`backends.detect`) and
prints every finding and every candidate with the reason it can or cannot
run, plus the command that would fix it.  ``--json`` prints the same as
data.  Loads no model; reads the header of ``--model`` (default: the
configured or bundled one) to say where a backend would change its answers
(OpenVINO's lossy GGUF Q4_1 conversion).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--server", metavar="URL", help="check an inference server instead: reachability, kind, "
                        "model, context and whether its token ids are ours")
    parser.add_argument("--server-kind", choices=["auto", "llamacpp", "vllm", "sglang"], default="auto")
    parser.add_argument("--api-key", help="the server's API key (or set TOKCHAT_API_KEY)")
    parser.add_argument("--model", "-m", help="with --server: our tokenizer for the id check (default: what the "
                        "server serves); else the model to check against the local backends (default: the "
                        "configured one)")
    parser.add_argument("--draft-model", metavar="PATH.gguf", help="the draft model to check against the model "
                        "(default: the configured model.draft_model): its vocabulary and what it costs in memory")


def model_caveats(model: str | None) -> list[str]:
    """Lines about the model: where a backend computes it differently from llama.cpp."""
    from app.models.resolution import resolve_model
    from backends.base import BackendError
    from backends.model_meta import read_model_meta
    from backends.openvino import gguf_caveat

    try:
        meta = read_model_meta(resolve_model(model))
    except (BackendError, OSError) as exc:  # no model to check is not a doctor failure
        return [f"model: not checked ({exc})"]
    caveat = gguf_caveat(meta.quantization) if meta.format == "gguf" else ""
    return [f"model {meta.path.name}: {caveat}" if caveat else
            f"model {meta.path.name}: {meta.quantization}, no backend known to convert it lossily"]


def draft_model_lines(model: str | None, draft: Path | None, n_ctx: int | None, speculative: str) -> list[str]:
    """The configured draft model: whether it can draft for ``model`` and what it holds in memory beside it.

    The same vocabulary check the engine makes before it loads one (:func:`backends.draft_model.vocab_difference`),
    and its weights and KV cache from its header, so that the memory is known before a chat starts.
    """
    if draft is None:
        return []
    from app.models.resolution import resolve_model
    from backends.base import BackendError
    from backends.draft_model import vocab_difference
    from backends.model_meta import kv_cache_bytes, read_model_meta
    from backends.offload import model_sizes
    from tokenizer.errors import TokenizerError

    try:
        main = resolve_model(model)
        differs = vocab_difference(main, draft)
        weights = model_sizes(draft).total
        kv = kv_cache_bytes(read_model_meta(draft), n_ctx) if n_ctx else None
    except (BackendError, OSError, ValueError, TokenizerError) as exc:
        return [f"draft model {draft.name}: cannot be used ({exc})"]
    if differs:
        return [f"draft model: {differs}"]
    memory = f"about {weights / 2**20:.0f} MiB of weights" + (
        f" + {kv / 2**20:.0f} MiB of KV cache at {n_ctx:,} ids of context" if kv is not None else "")
    used = ("drafts with speculative = draft" if speculative == "draft" else
            "drafts where auto's timing finds it pays" if speculative == "auto" else
            f"not loaded: speculative = {speculative} uses no draft model")
    return [f"draft model {draft.name}: same vocabulary as {main.name}; {memory}, beside the model's; {used}"]


def engine_lines() -> list[str]:
    """How the local engine runs here: its process, threads, the CPU's AMX and what tokchat chose for it."""
    from backends.cpu import available_cpus, cpu_model, has_amx, llama_default_threads
    from backends.engine_patches import patch_files
    from backends.engine_client import amx_fault_record

    lines = [f"engine: local engines run in their own process (a crash costs the reply, not the chat); "
             f"llama.cpp with {llama_default_threads()} generation thread(s) of {available_cpus()} CPUs (its "
             "default: the physical cores; --threads changes it), flash attention auto (llama.cpp's default)",
             f"cpu: {cpu_model()}, AMX {'yes' if has_amx() else 'no'}"]
    patches = ", ".join(p.name for p in patch_files())
    if has_amx():
        if amx_fault_record().exists():
            lines.append(f"amx: weight repacking OFF: llama.cpp's AMX kernel crashed on this CPU before "
                         f"(remembered in {amx_fault_record()}; delete it to try again)")
        else:
            lines.append(f"amx: repacking ON with the AMX kernel, built with tokchat's fix for llama.cpp #20824 "
                         f"({patches}); if it still crashes, tokchat restarts the engine with repacking off and "
                         "remembers that")
    else:
        lines.append("amx: this CPU has no AMX, llama.cpp's AMX kernel is not used")
    lines.append(build_line())
    return lines


def build_line() -> str:
    """Which llama.cpp build the engine loads: its ``build.json`` beside the libraries (backends/engine_build.py)."""
    import importlib.util
    from pathlib import Path

    from backends.accelerator import choose
    from backends.cpu import build_fingerprint
    from backends.engine_build import build_key

    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return "engine build: llama-cpp-python is not installed (run `python3 dev.py run`)"
    info_path = Path(next(iter(spec.submodule_search_locations))) / "lib" / "build.json"
    try:
        info = json.loads(info_path.read_text())
    except (OSError, ValueError):
        return "engine build: not tokchat's (no build.json beside libllama): run `python3 dev.py run` to build it"
    try:
        accelerator = choose()  # asks nvidia-smi / rocminfo: once
    except ValueError as exc:
        wanted, missing = f"? ({exc})", ""
    else:
        wanted, missing = build_key(accelerator), accelerator.missing
    text = f"engine build: {info.get('accelerator_label', '?')}, key {info.get('key')}"
    if f"-cpu{build_fingerprint()}-" not in str(info.get("key")):
        text += "; made for ANOTHER CPU (it may die of SIGILL here): run `python3 dev.py run` to build it for this one"
    elif info.get("key") != wanted:
        text += f"; this machine wants {wanted}: run `python3 dev.py run` to build it"
    return text + (f"; {missing}" if missing else "")


def run(args: argparse.Namespace) -> int:
    from backends.detect import detect

    if getattr(args, "server", None):
        from app.chat.remote_doctor import run_server_doctor
        from app.settings.server import remote_settings

        settings = remote_settings({"url": args.server, "kind": args.server_kind, "api_key": args.api_key},
                                   api_key_from_flag=bool(args.api_key))
        assert settings is not None
        return run_server_doctor(settings, args.model, args.json)

    from tokenizer.accel import accel_status

    from app.models.preset_match import chat_options

    report = detect()
    configured = chat_options(argparse.Namespace(draft_model=getattr(args, "draft_model", None), model=args.model))
    model = args.model if args.model is not None else configured.model
    caveats = model_caveats(model) + draft_model_lines(model, configured.draft_model, configured.ctx,
                                                       configured.speculative)
    from app.cli.cache import state_line

    engine = engine_lines() + [state_line(configured)]
    if args.json:
        print(json.dumps({**report.to_dict(), "tokenizer": accel_status(), "model_notes": caveats,
                          "engine": engine}, indent=2))
    else:
        print(report.text())
        print("\n".join(engine))
        print(f"tokenizer: {accel_status()}")
        print("\n".join(caveats))
    return 0
