"""``tokchat tokenize``: text to token ids with tokchat's own tokenizer.

    tokchat tokenize --model PATH [--special] [--add-special] [--pieces] [--jsonl] [TEXT]

Without TEXT the text is read from stdin, exactly as given (a trailing
newline is part of it).  Output: one JSON array of ids; with ``--pieces`` one
line per token, ``ID<TAB>PIECE`` (the piece JSON-quoted, so spaces and
control characters stay visible, or as bytes when it holds part of a
character); with ``--jsonl`` every stdin line is a JSON
string and every output line the JSON array of its ids, for bulk comparison
with other tokenizers.  ``--special`` turns special-token text such as
``<|im_end|>`` into its id.  Only the tokenizer is loaded, never the weights.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from app.errors import CLIError


def add_model_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", "-m", help="a .gguf file, a tokenizer.json or a directory holding one "
                                              "(default: the bundled model)")


def load_for_cli(value: str | None):
    """The tokenizer for ``--model``: tokenizer.json files and folders directly, models via resolution."""
    from tokenizer import load_tokenizer

    if value:
        path = Path(value).expanduser()
        if path.suffix == ".json" or (path.is_dir() and (path / "tokenizer.json").is_file()):
            from app.models.file_kind import not_a_regular_file

            special = not_a_regular_file(path)
            if special is not None:
                raise CLIError(special)
            return load_tokenizer(path)
    from app.models.resolution import resolve_model

    return load_tokenizer(resolve_model(value))


def piece_text(tok, tid: int) -> str:
    """A token's text JSON-quoted, or its bytes (``b'\\xf0\\x9f'``) when it is part of a character."""
    data = tok.token_bytes(tid)
    try:
        return json.dumps(data.decode("utf-8"), ensure_ascii=False)
    except UnicodeDecodeError:
        return repr(data)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    parser.add_argument("--special", action="store_true", help="turn special-token text into special ids")
    parser.add_argument("--pieces", action="store_true", help="one line per token: ID<TAB>PIECE")
    parser.add_argument("--add-special", action="store_true",
                        help="frame the ids as the model expects, like llama.cpp's add_special "
                             "(BERT: [CLS] ... [SEP]; others: BOS/EOS as the vocabulary asks)")
    parser.add_argument("--jsonl", action="store_true", help="stdin lines are JSON strings; print one id array per line")
    parser.add_argument("text", nargs="?", help="the text (default: read stdin)")


def _jsonl(tok, special: bool, add_special: bool = False) -> int:
    for n, line in enumerate(sys.stdin, start=1):
        if not line.strip():
            continue
        try:
            text = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CLIError(f"stdin line {n} is not JSON: {exc.msg}") from None
        if not isinstance(text, str):
            raise CLIError(f"stdin line {n} must be a JSON string, not {type(text).__name__}")
        ids = tok.encode(text, special=special)
        print(json.dumps(tok.with_special(ids) if add_special else ids))
    return 0


def run(args: argparse.Namespace) -> int:
    tok = load_for_cli(args.model)
    if args.jsonl:
        if args.text is not None:
            raise CLIError("--jsonl reads stdin; leave out TEXT")
        return _jsonl(tok, args.special, args.add_special)
    text = args.text if args.text is not None else sys.stdin.read()
    ids = tok.encode(text, special=args.special)
    if args.add_special:
        ids = tok.with_special(ids)
    if args.pieces:
        for tid in ids:
            print(f"{tid}\t{piece_text(tok, tid)}")
    else:
        print(json.dumps(ids))
    return 0
