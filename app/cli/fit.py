"""``tokchat fit MODEL``: will this model and context fit this machine, before anything is loaded?

Prints, from the GGUF's tensor infos alone (:mod:`backends.fit`), what the
weights, the KV cache per type, the compute buffer and a draft model take,
against this machine's free RAM and each GPU's free VRAM; how many layers the
default offload would put on the GPU; and the largest context each KV type
holds.  The same arithmetic refuses a ``--ctx`` that cannot fit before an
engine starts, so what ``fit`` says is what a load does.
"""
from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", help="a .gguf path, a model name `tokchat models` lists, or "
                        "hf:ORG/REPO/FILE.gguf already downloaded (default: the configured model)")
    parser.add_argument("--ctx", type=int, help="the context to check (default: the chat's, from the config)")
    parser.add_argument("--kv-type", dest="kv_type", help="f16 | q8_0 | q4_0 | K/V (default: the config's)")
    parser.add_argument("--draft-model", dest="draft_model", help="a draft model loaded beside it")
    parser.add_argument("--json", action="store_true", help="the figures as one JSON object")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from app.cli.terminal import shown
    from app.models.resolution import resolve_model
    from app.settings.merge import read_settings
    from backends.fit import default_offload, free_memory, gb, largest_context, model_need, need_at
    from backends.kv_types import NAMES, KvTypeError, parse_kv_type
    from backends.model_meta import read_model_meta
    from backends.offload import MIB, DraftedPlan

    values = read_settings().values
    try:
        kv_type = parse_kv_type(args.kv_type or values["model.kv_type"])
    except KvTypeError as exc:
        print(f"tokchat: {exc}", file=sys.stderr)
        return 2
    path = Path(resolve_model(args.model or values["model.default"] or None))
    meta = read_model_meta(path)
    if meta.format != "gguf":
        print(f"tokchat: {shown(path.name)} is not a GGUF file: `fit` reads llama.cpp's models", file=sys.stderr)
        return 2
    n_ctx = args.ctx or values["model.context_size"] or meta.default_ctx()
    draft = None
    draft_path = args.draft_model or values["model.draft_model"] or None
    if draft_path:
        dp = Path(resolve_model(draft_path))
        draft = (dp, read_model_meta(dp))
    memory = free_memory()
    main = model_need(path, meta, n_ctx, kv_type)
    helper = model_need(draft[0], draft[1], n_ctx, kv_type) if draft else None
    need = main.total + (helper.total if helper else 0)
    per_type = {}
    for name in NAMES:
        t = parse_kv_type(name)
        m = model_need(path, meta, n_ctx, t)
        d = model_need(draft[0], draft[1], n_ctx, t) if draft else None
        total_at = need_at(path, meta, t, draft=draft)
        per_type[name] = {"kv_bytes": m.kv + (d.kv if d else 0), "need": m.total + (d.total if d else 0),
                          "largest_ctx": largest_context(total_at, memory.total),
                          "largest_ctx_ram": largest_context(total_at, memory.ram)}
    gpu_plan = None
    if memory.gpus:  # what the load would do on the GPUs (the same plan: the draft model first, whole, if it fits)
        gpu_plan = default_offload(path, meta, n_ctx, kv_type, memory.gpus, draft[0] if draft else None)
        draft_on_gpu = isinstance(gpu_plan, DraftedPlan) and gpu_plan.draft_gpu_layers == -1
        if isinstance(gpu_plan, DraftedPlan):
            gpu_plan = gpu_plan.main
    report = {"model": path.name, "n_ctx": n_ctx, "kv_type": str(kv_type), "weights": main.weights,
              "repacked": main.repacked, "kv": main.kv, "compute": main.compute,
              "draft": ({"model": helper.name, "total": helper.total, "kv": helper.kv} if helper else None),
              "need": need, "free_ram": memory.ram, "free_vram": memory.gpus, "fits": need <= memory.total,
              "per_kv_type": per_type, "context_length": meta.context_length,
              "gpu_layers": (f"{gpu_plan.layers_on_gpu}/{gpu_plan.total_layers}" if gpu_plan else None)}
    if args.json:
        print(json.dumps(report))
        return 0 if report["fits"] else 1
    print(f"{shown(path.name)} at --ctx {n_ctx:,}, KV cache {kv_type}")
    print(f"  weights    {gb(main.weights):>10}" + (f"  (+ {gb(main.repacked)} repacked for this CPU)"
                                                      if main.repacked else ""))
    print(f"  KV cache   {gb(main.kv):>10}")
    print(f"  compute    {gb(main.compute):>10}")
    if helper:
        print(f"  draft      {gb(helper.total):>10}  ({shown(helper.name)}: weights, KV cache, compute)")
    print(f"  total      {gb(need):>10}")
    gpus = "".join(f", GPU{i} {gb(g)}" for i, g in enumerate(memory.gpus))
    print(f"free now: RAM {gb(memory.ram)}{gpus}: " + ("it fits" if report["fits"] else "it does NOT fit"))
    if gpu_plan:
        where = "the GPUs" if len(memory.gpus) > 1 else "the GPU"
        print(f"GPU offload (default): {gpu_plan.layers_on_gpu}/{gpu_plan.total_layers} layers on {where} "
              f"({gpu_plan.need_bytes // MIB:,} MiB of {gpu_plan.free_bytes // MIB:,} MiB free"
              + (", after the draft model" if draft_on_gpu else ", the draft model on the CPU" if helper else "") + ")")
    trained = f" (trained on {meta.context_length:,})" if meta.context_length else ""
    print(f"largest context that fits{trained}:")
    for name, row in per_type.items():
        print(f"  --kv-type {name:<5} {row['largest_ctx']:>12,} ids  (KV {gb(row['kv_bytes'])} at --ctx {n_ctx:,})")
    return 0 if report["fits"] else 1
