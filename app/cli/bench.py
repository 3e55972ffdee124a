"""``tokchat bench [NAME ...]``: run the benchmark scripts in ``bench/``.

Each ``bench/bench_<name>.py`` prints Markdown tables of ratios; this
command runs the named ones (``tokchat bench backends`` or
``tokchat bench bench_backends.py``), or all of them, with this Python, one
after another, and passes their output through.  ``--list`` shows them.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from app.errors import CLIError

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def available() -> dict[str, Path]:
    """short name -> script, for every ``bench/bench_*.py``."""
    return {p.stem.removeprefix("bench_"): p for p in sorted(BENCH_DIR.glob("bench_*.py"))}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")


def run(args: argparse.Namespace) -> int:
    scripts = available()
    if args.list:
        for name, path in scripts.items():
            print(f"{name:<12} {path}")
        return 0
    if not scripts:
        raise CLIError(f"no benchmarks found in {BENCH_DIR}")
    chosen: list[Path] = []
    for name in args.names or list(scripts):
        key = Path(name).stem.removeprefix("bench_")
        if key not in scripts:
            raise CLIError(f"unknown benchmark {name!r}: choose from {', '.join(scripts)}")
        chosen.append(scripts[key])
    worst = 0
    for script in chosen:
        print(f"## {script.stem}\n", flush=True)
        code = subprocess.call([sys.executable, str(script)], cwd=BENCH_DIR.parent)
        if code:
            print(f"tokchat bench: {script.name} exited with status {code}", file=sys.stderr)
            worst = worst or code
    return worst
