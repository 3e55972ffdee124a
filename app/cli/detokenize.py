"""``tokchat detokenize``: token ids back to text.

    tokchat detokenize --model PATH [--skip-special] ID...

IDs may also be given as one JSON array (``"[1, 2, 3]"``), so the output of
``tokchat tokenize`` can be pasted back.  The text is written as is,
followed by one newline.
"""
from __future__ import annotations

import argparse
import json
import sys

from app.cli.tokenize import add_model_argument, load_for_cli
from app.errors import CLIError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    parser.add_argument("--skip-special", action="store_true", help="leave out control tokens")
    parser.add_argument("ids", nargs="+", help="token ids (integers, or one JSON array)")


def parse_ids(values: list[str]) -> list[int]:
    """Integers from the command line; a bad one is a CLIError naming it."""
    if len(values) == 1 and values[0].lstrip().startswith("["):
        try:
            data = json.loads(values[0])
        except json.JSONDecodeError as exc:
            raise CLIError(f"not a JSON array of ids: {exc.msg}") from None
        values = data if isinstance(data, list) else [data]
    ids = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise CLIError(f"not a token id: {value!r}")
        try:
            ids.append(int(value))
        except ValueError:
            raise CLIError(f"not a token id: {value!r}") from None
    return ids


def run(args: argparse.Namespace) -> int:
    ids = parse_ids(args.ids)
    tok = load_for_cli(args.model)
    sys.stdout.write(tok.decode(ids, skip_special=args.skip_special) + "\n")
    return 0
