"""``tokchat config``: placeholder until its issue lands."""
from __future__ import annotations

import argparse

from app.cli import CLIError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rest", nargs="*")


def run(args: argparse.Namespace) -> int:
    raise CLIError("tokchat config is not built yet")
