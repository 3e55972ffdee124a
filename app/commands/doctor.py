"""``tokchat doctor [--json]``: which backend tokchat would use here, and why.

Runs the same detection as ``--backend auto`` (:mod:`backends.detect`) and
prints every finding and every candidate with the reason it can or cannot
run, plus the command that would fix it.  ``--json`` prints the same as
data.  Loads no model.
"""
from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from backends.detect import detect

    from tokenizer.accel import accel_status

    report = detect()
    if args.json:
        print(json.dumps({**report.to_dict(), "tokenizer": accel_status()}, indent=2))
    else:
        print(report.text())
        print(f"tokenizer: {accel_status()}")
    return 0
