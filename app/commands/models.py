"""``tokchat models``: the models this machine has, with size, architecture and quantization.

Looks at the bundled model, the directories in ``model.dirs`` of the config,
and the Hugging Face cache; only headers are read.  Each line gives the
exact ``--model`` value that picks the model.
"""
from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", action="append", default=[], help="also look in this directory (repeatable)")
    parser.add_argument("--json", action="store_true", help="one JSON object per model")


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def _model_arg(info) -> str:
    if info.source == "bundled":
        return "(default)"
    if info.source.startswith("hf:") and info.kind == "gguf":
        return info.source
    return str(info.path)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from app.config import load_settings
    from app.model_resolution import list_models

    dirs = [Path(d).expanduser() for d in load_settings(use_preset=False).values["model.dirs"]]
    models, problems = list_models(dirs + [Path(d) for d in args.dir])
    if args.json:
        for m in models:
            print(json.dumps({"model": _model_arg(m), "path": str(m.path), "kind": m.kind, "size_bytes": m.size_bytes,
                              "architecture": m.architecture, "name": m.name, "quantization": m.quantization,
                              "context_length": m.context_length, "source": m.source}, ensure_ascii=False))
    else:
        rows = [(m.name, m.architecture, m.quantization, _size(m.size_bytes), _model_arg(m)) for m in models]
        header = ("NAME", "ARCH", "QUANT", "SIZE", "--model")
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
        for row in [header, *rows]:
            print("  ".join(f"{cell:<{w}}" for cell, w in zip(row, widths)) + "  " + row[4])
        if not models:
            print("no models found (pass --model PATH.gguf, or add directories to model.dirs in config.toml)")
    for line in problems:
        print(f"tokchat: skipped {line}", file=sys.stderr)
    return 0
