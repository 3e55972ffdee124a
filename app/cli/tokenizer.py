"""``tokchat tokenizer``: tokenizer tools.  One action so far, ``train``.

``tokchat tokenizer train --corpus FILE --vocab-size N --output DIR`` learns a
byte-level BPE vocabulary (see :mod:`tokenizer.trainer`) and writes
``DIR/tokenizer.json``, loadable by tokchat and by Hugging Face ``tokenizers``.
The progress bar goes to stderr (only on a terminal); a one-line summary goes
to stdout.  An existing tokenizer.json is never overwritten without ``--force``.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from app.errors import CLIError

if TYPE_CHECKING:
    from rich.progress import TaskID


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    train = actions.add_parser(
        "train",
        help="learn a byte-level BPE vocabulary from a text corpus",
        description="Learn a byte-level BPE vocabulary and write DIR/tokenizer.json "
        "(Hugging Face format).",
    )
    train.add_argument("--corpus", action="append", required=True, type=Path, metavar="FILE",
                       help="UTF-8 text file to learn from (repeat for several files)")
    train.add_argument("--vocab-size", type=int, required=True, metavar="N",
                       help="total tokens: 256 bytes + merges + special tokens")
    train.add_argument("--output", type=Path, required=True, metavar="DIR",
                       help="directory for tokenizer.json (created if missing)")
    train.add_argument("--pattern", choices=("gpt2", "qwen2"), default="qwen2",
                       help="pre-tokenizer regex: qwen2 (single digits, default) or gpt2")
    train.add_argument("--special", action="extend", nargs="+", default=[], metavar="TOKEN",
                       help="special tokens added after the learned vocabulary, e.g. '<|endoftext|>'")
    train.add_argument("--min-frequency", type=int, default=2, metavar="K",
                       help="never merge a pair seen fewer than K times (default 2)")
    train.add_argument("--force", action="store_true", help="overwrite an existing tokenizer.json")
    train.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    if args.action == "train":
        return _train(args)
    raise CLIError(f"unknown tokenizer action {args.action!r}")  # argparse stops this earlier


def _read_corpus(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CLIError(f"corpus file not found: {path}") from None
    except IsADirectoryError:
        raise CLIError(f"corpus is a directory, not a file: {path}") from None
    except OSError as exc:
        raise CLIError(f"cannot read corpus {path}: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CLIError(f"corpus {path} is not UTF-8 text (bad byte at offset {exc.start})") from None


def _train(args: argparse.Namespace) -> int:
    from tokenizer.trainer import TrainerConfig, train_bpe

    try:
        config = TrainerConfig(
            vocab_size=args.vocab_size,
            pattern=args.pattern,
            special_tokens=tuple(args.special),
            min_frequency=args.min_frequency,
        )
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    target = args.output / "tokenizer.json"
    if args.output.exists() and not args.output.is_dir():
        raise CLIError(f"output {args.output} exists and is not a directory")
    if target.exists() and not args.force:
        raise CLIError(f"{target} already exists; pass --force to overwrite it")
    texts = [_read_corpus(path) for path in args.corpus]
    if not any(text.strip() for text in texts):
        raise CLIError("the corpus is empty")

    with _ProgressBar(enabled=not args.quiet) as bar:
        try:
            model = train_bpe(texts, config, progress=bar.update)
        except ValueError as exc:
            raise CLIError(str(exc)) from None
    path = model.save(args.output)

    stats = model.stats
    seconds = stats.pretokenize_s + stats.merge_s
    rate = stats.corpus_bytes / 1e6 / seconds if seconds else 0.0
    print(
        f"wrote {path}: {model.vocab_size} tokens (256 bytes + {len(model.token_bytes) - 256} merged"
        f" + {len(model.special_tokens)} special), {stats.merges} merges from "
        f"{stats.corpus_bytes / 1e6:.2f} MB ({stats.unique_words} distinct pieces) in {seconds:.1f} s"
        f" ({rate:.2f} MB/s)"
    )
    if stats.stopped_early:
        print(f"note: stopped before {config.vocab_size} tokens: no pair occurs "
              f"{config.min_frequency}+ times any more (a bigger corpus or --min-frequency 1 helps)")
    return 0


class _ProgressBar:
    """A rich progress bar on stderr, one task per training stage; silent off a terminal."""

    def __init__(self, enabled: bool) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        console = Console(stderr=True)
        self._progress = Progress(
            TextColumn("{task.description:<12}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console, disable=not (enabled and console.is_terminal), transient=False,
        )
        self._tasks: dict[str, TaskID] = {}

    def __enter__(self) -> "_ProgressBar":
        self._progress.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._progress.stop()

    def update(self, stage: str, done: int, total: int) -> None:
        task = self._tasks.get(stage)
        if task is None:
            label = {"pretokenize": "pre-tokenize", "merge": "merges"}.get(stage, stage)
            task = self._tasks[stage] = self._progress.add_task(label, total=total)
        self._progress.update(task, completed=done, total=total)
