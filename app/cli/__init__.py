"""The ``tokchat`` command line.

``tokchat`` with no subcommand chats: the TUI, or headless with ``--prompt``
(or a prompt on stdin).  Every subcommand lives in its own module under
:mod:`app.cli` and is imported only when it runs, so ``tokchat --help``
never pays for Textual, llama.cpp or a model load.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from app import __version__

#: subcommand -> (module under app.cli, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "tokenize": ("tokenize", "encode text to token ids with tokchat's own tokenizer"),
    "detokenize": ("detokenize", "decode token ids back to text"),
    "render": ("render", "show exactly the prompt (text or ids) a conversation sends to the model"),
    "info": ("info", "describe a model file: tokenizer kind, vocabulary, specials, template"),
    "doctor": ("doctor", "explain which backend tokchat would use on this machine, and why"),
    "bench": ("bench", "run the benchmarks in bench/ and print their tables"),
    "tokenizer": ("tokenizer", "tokenizer tools (train a byte-level BPE vocabulary)"),
    "export": ("export", "export a stored conversation as Markdown or JSON"),
    "config": ("config", "show the configuration file path or the merged settings"),
    "models": ("models", "list the models tokchat can find"),
    "tools": ("tools", "list the configured MCP servers' tools and their token cost"),
    "pull": ("pull", "download a model from the Hugging Face Hub (hf:ORG/REPO[:QUANT] or a preset name)"),
    "rm": ("rm", "delete a downloaded model from the Hugging Face cache"),
    "cache": ("cache", "list or clear the engine's KV states kept on disk for instant resume"),
    "fit": ("fit", "will a model, its context and KV cache fit this machine's RAM and VRAM? (before loading)"),
}


def _subcommand_module(name: str):
    module_name, _ = SUBCOMMANDS[name]
    return importlib.import_module(f"app.cli.{module_name}")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser: chat options plus one subparser per subcommand."""
    from app.cli import chat

    parser = argparse.ArgumentParser(
        prog="tokchat",
        description="Chat with a local LLM in the terminal, with exact token counts.",
        epilog="subcommands: " + ", ".join(SUBCOMMANDS) + " (tokchat SUBCOMMAND --help)",
    )
    parser.add_argument("--version", action="version", version=f"tokchat {__version__}")
    chat.add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        if args_list and args_list[0] in SUBCOMMANDS:
            name = args_list[0]
            module = _subcommand_module(name)
            sub = argparse.ArgumentParser(prog=f"tokchat {name}", description=SUBCOMMANDS[name][1],
                                          conflict_handler=getattr(module, "CONFLICT_HANDLER", "error"))
            module.add_arguments(sub)
            args = sub.parse_args(args_list[1:])
            return int(module.run(args) or 0)
        from app.cli import chat

        args = build_parser().parse_args(args_list)
        return int(chat.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # the UI boundary: one readable line, never a traceback
        from app.errors import user_message

        message = user_message(exc)
        if message is None:
            raise
        from app.cli.terminal import shown

        # a server's error text, a file's name: inert on a terminal (app.cli.terminal)
        print(shown(f"tokchat: {message}", sys.stderr), file=sys.stderr)
        return 2


def run() -> None:
    """The ``tokchat`` command (and ``python -m app``): :func:`main`, then the process ends.

    It ends without the interpreter's teardown when nothing needs it: the
    teardown frees every object one by one (the tokenizer's tables of a 150,000-id
    vocabulary among them), which took 45 ms of a 1.3 s one-shot reply after its
    last word was on the screen (docs/engine.md, "Figures behind the code's
    choices").  What the teardown would do that reaches outside the process runs
    first: the ``atexit`` functions (the engine workers' close, logging's flush)
    and the flush of stdout and stderr.  While a thread that is not a daemon still
    runs (a history write), the process ends the usual way, which waits for it."""
    import atexit
    import os
    import threading

    try:
        code = main()
    except SystemExit as exc:  # argparse's --help and errors: the status sys.exit would give
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, OSError, ValueError):
            continue  # a reader that went away (tokchat ... | head): the status stands, without a trace
    os._exit(code)
