"""``tokchat export [ID|--last] --format md|json [-o FILE]``, ``--list`` and ``--import FILE``.

Markdown is for reading; JSON keeps everything and ``--import`` reads it
back into the history as a new conversation.  ``--list`` (with ``--search``)
shows the stored conversations newest first, with the ids to export.
"""
from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path

from app.cli.ids import conversation_id
from app.errors import CLIError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", nargs="?", type=conversation_id, help="conversation id (see --list)")
    parser.add_argument("--last", action="store_true", help="the most recently active conversation")
    parser.add_argument("--format", "-f", choices=["md", "json"],
                        help="md (default; json when -o ends in .json)")
    parser.add_argument("-o", "--output", help="write to this file instead of stdout")
    parser.add_argument("--list", action="store_true", help="list stored conversations, newest first")
    parser.add_argument("--search", help="with --list: only conversations containing this text")
    parser.add_argument("--import", dest="import_file", metavar="FILE",
                        help="read a JSON export back into the history as a new conversation")


def _list(store, search: str | None) -> int:
    from app.cli.terminal import cell, shown

    rows = store.list_conversations(search=search)
    for c in rows:
        when = datetime.fromtimestamp(c.updated_at).strftime("%Y-%m-%d %H:%M")
        model = cell(c.model_name or Path(c.model_path).name)
        # titles come from what was typed or imported: one line each, inert on a terminal
        print(shown(f"{c.id:>5}  {when}  {c.message_count:>3} msgs  {model:<24.24}  {cell(c.title)}"))
    if not rows:
        print("no conversations" + (f" containing {search!r}" if search else ""), file=sys.stderr)
    return 0


def _import(store, file: str) -> int:
    from app.history.export import conversation_from_json

    try:
        text = Path(file).read_text(encoding="utf-8")
    except OSError as exc:
        raise CLIError(f"cannot read {file}: {exc.strerror or exc}") from exc
    conv = conversation_from_json(text, source=file)
    new_id = store.import_conversation(conv.info, conv.messages, conv.branches)
    print(f"imported {file} as conversation {new_id} ({len(conv.messages)} messages)")
    return 0


def run(args: argparse.Namespace) -> int:
    from app.history.export import to_json, to_markdown
    from app.history.store import ChatStore, default_db_path

    if args.import_file:
        with ChatStore() as store:
            return _import(store, args.import_file)
    if not args.list and args.id is None and not args.last:
        raise CLIError("which conversation? give an ID or --last (`tokchat export --list` shows them)")
    if not default_db_path().exists():
        if args.list:
            print("no conversations (nothing recorded yet)", file=sys.stderr)
            return 0
        raise CLIError("the history is empty: nothing to export")
    # reading only: a read-only history file or directory is fine
    with ChatStore(readonly=True) as store:
        if args.list:
            return _list(store, args.search)
        if args.id is None and not args.last:
            raise CLIError("which conversation? give an ID or --last (`tokchat export --list` shows them)")
        if args.id is not None and args.last:
            raise CLIError("give an ID or --last, not both")
        conv_id = args.id if args.id is not None else store.last_conversation_id()
        if conv_id is None:
            raise CLIError("the history is empty: nothing to export")
        conv = store.load(conv_id)
    fmt = args.format or ("json" if args.output and args.output.endswith(".json") else "md")
    text = to_json(conv) if fmt == "json" else to_markdown(conv)
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise CLIError(f"cannot write {args.output}: {exc.strerror or exc}") from exc
        print(f"wrote conversation {conv_id} to {args.output}", file=sys.stderr)
    else:
        from app.cli.terminal import shown, shown_json

        # to a terminal the text is made inert (a message may hold escape sequences); a pipe gets it exact
        sys.stdout.write(shown_json(text) if fmt == "json" else shown(text))
    return 0
