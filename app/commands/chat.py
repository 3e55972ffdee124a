"""``tokchat [--model PATH] [--prompt TEXT]``: the chat itself, TUI or headless."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", "-m", help="a .gguf file (default: the bundled SmolLM2-135M-Instruct)")
    parser.add_argument("--prompt", "-p", help="answer one prompt headless, streaming to stdout")


def resolve_model(value: str | None) -> Path:
    """The model path to use: ``--model`` or the bundled model."""
    from app.bundled import bundled_model_path

    if value is None:
        return bundled_model_path()
    path = Path(value).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"model not found: {path} (pass --model PATH.gguf)")
    return path


def run(args: argparse.Namespace) -> int:
    model = resolve_model(args.model)
    if args.prompt is not None or not sys.stdin.isatty():
        print(f"headless mode lands with the conversation issue; model: {model}", file=sys.stderr)
        return 2
    from app.tui.placeholder import run_placeholder

    return run_placeholder(model)
