"""``tokchat models``: the models this machine has, recently used first, with architecture,
quantization, size and context length.

Looks at the bundled model, the directories in ``model.dirs`` of the config,
and the Hugging Face cache (:mod:`app.models.catalog`); only headers are
read.  Each line gives the exact ``--model`` value that picks the model;
``tokchat rm`` takes the same value for downloaded ones.
"""
from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", action="append", default=[], help="also look in this directory (repeatable)")
    parser.add_argument("--json", action="store_true", help="one JSON object per model")


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def _context(n: int | None) -> str:
    if not n:
        return "?"
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from app.settings.merge import read_settings
    from app.models.catalog import catalog, human_age

    dirs = [Path(d).expanduser() for d in read_settings().values["model.dirs"]]
    entries, problems = catalog(dirs + [Path(d) for d in args.dir])
    from app.cli.terminal import cell, shown, shown_json

    if args.json:
        for entry in entries:
            print(shown_json(json.dumps(entry.as_json(), ensure_ascii=False)))
    else:
        # names come from the files' own metadata and names: one line each, inert on a terminal
        chat = [e for e in entries if not e.info.vocabulary_only]
        rows = [(cell(e.info.name), cell(e.info.architecture), cell(e.info.quantization), _size(e.info.size_bytes),
                 _context(e.info.context_length), human_age(e.last_used), cell(e.model_arg)) for e in chat]
        header = ("NAME", "ARCH", "QUANT", "SIZE", "CTX", "USED", "--model")
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(6)]
        for row in [header, *rows]:
            print(shown("  ".join(f"{text:<{w}}" for text, w in zip(row, widths)) + "  " + row[6]))
        if not chat:
            print("no models found (`tokchat pull qwen2.5` downloads one; or add directories to model.dirs "
                  "in config.toml)")
        vocabularies = [e for e in entries if e.info.vocabulary_only]
        if vocabularies:  # listed apart: they tokenize (info, tokenize, --model beside --server) but cannot chat
            print(f"vocabulary only, no weights ({len(vocabularies)}): tokenizers for tokchat info, tokenize "
                  "and --model beside --server, not models to chat with")
            for e in vocabularies:
                print(shown(f"  {cell(e.info.name)} ({cell(e.info.architecture)})  {cell(e.model_arg)}"))
    for line in problems:
        print(shown(f"tokchat: skipped {cell(line)}", sys.stderr), file=sys.stderr)
    return 0
