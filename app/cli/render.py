"""``tokchat render``: show exactly the prompt a conversation sends to the model.

    tokchat render --model PATH --messages FILE.json [--template NAME | --template-file FILE.jinja]
                   [--think | --no-think] [--no-generation-prompt] [--ids | --pieces [--ctx N]]
                   [--tools TOOLS.json]

``FILE.json`` is a JSON list of ``{"role": ..., "content": ...}`` objects (with
``tool_calls`` / ``tool_call_id`` / ``name`` as Hugging Face writes tool calls and
results); ``TOOLS.json`` a JSON list of tool schemas given to the template as ``tools``.
The messages are rendered as given (as HF's ``apply_chat_template`` would): a chat
with tools also joins ``tools.instructions`` to its system message, so put that
text in FILE.json's system message to see such a chat's prompt.
Without ``--ids`` the rendered text is written as is (no newline added);
with ``--ids`` one JSON array of the prompt ids, the same ids a chat would
send: markup as control tokens, message text as plain text, one BOS where
the model wants it.  With ``--pieces`` one line per id, ``ID<TAB>PIECE<TAB>PART``
(the piece as ``tokchat tokenize --pieces`` writes it), a blank line, then
the context breakdown of :mod:`app.conversation.context_breakdown` computed on those same
ids (``--ctx`` sets the context size the room is counted against).  A fallback notice from ``--template auto`` goes to
stderr.  Only the tokenizer is loaded, never the model's weights.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from app.errors import CLIError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from templates import NAMES

    parser.add_argument("--model", "-m", help="a .gguf file or a tokenizer directory (default: the bundled model)")
    parser.add_argument("--messages", required=True, help='JSON file: [{"role": "user", "content": "..."}, ...]')
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--template", default="auto", choices=NAMES, help="chat template (default auto)")
    which.add_argument("--template-file", help="a Jinja chat template file")
    think = parser.add_mutually_exclusive_group()
    think.add_argument("--think", dest="think", action="store_true", default=None,
                       help="enable_thinking=true for templates that read it")
    think.add_argument("--no-think", dest="think", action="store_false", help="enable_thinking=false")
    parser.add_argument("--tools", help='JSON file: [{"type": "function", "function": {"name": ..., '
                        '"parameters": {...}}}, ...] passed to the template (the messages stay as given; '
                        'a chat with tools also joins tools.instructions to its system message)')
    parser.add_argument("--no-generation-prompt", dest="generation_prompt", action="store_false",
                        help="leave out the assistant header at the end")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--ids", action="store_true", help="print the prompt ids as one JSON array")
    shown.add_argument("--pieces", action="store_true",
                       help="one line per id (ID, piece, part), then the context breakdown")
    parser.add_argument("--ctx", type=int, default=8192, help="context size for --pieces (default 8192)")


def read_messages(path: str | Path) -> list[dict[str, str]]:
    """The messages in ``path``, checked; a problem is one CLIError line naming the message."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CLIError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CLIError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, list):
        raise CLIError(f'{path} must hold a JSON list of {{"role": ..., "content": ...}} objects')
    from app.tools.schemas import ToolSchemaError, check_message

    try:
        return [check_message(str(path), n, item) for n, item in enumerate(data)]
    except ToolSchemaError as exc:
        raise CLIError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    from app.models.resolution import resolve_model
    from templates import prompt_ids, resolve_template
    from tokenizer import load_tokenizer

    messages = read_messages(args.messages)
    tools = None
    if args.tools:
        from app.tools.schemas import ToolSchemaError, read_tools_file

        try:
            tools = read_tools_file(args.tools)
        except ToolSchemaError as exc:
            raise CLIError(str(exc)) from None
    tokenizer = load_tokenizer(resolve_model(args.model))
    template, notice = resolve_template(args.template, tokenizer, args.template_file)
    if notice:
        print(f"tokchat: {notice}", file=sys.stderr)
    rendered = template.render(messages, add_generation_prompt=args.generation_prompt,
                               enable_thinking=args.think, tools=tools)
    if args.ids:
        print(json.dumps(prompt_ids(tokenizer, rendered)))
    elif args.pieces:
        extra = []
        if tools:
            from app.conversation.context_breakdown import changed_span

            plain = template.render(messages, add_generation_prompt=args.generation_prompt,
                                    enable_thinking=args.think, tools=None).text
            span = changed_span(rendered.text, plain)
            extra = [("tool schemas", *span)] if span else []
        print_pieces(tokenizer, rendered, messages, args.ctx, extra)
    else:
        sys.stdout.write(rendered.text)
        sys.stdout.flush()
    return 0


def print_pieces(tokenizer, rendered, messages: list[dict], context_size: int,
                 extra_spans: Sequence[tuple[str, int, int]] = ()) -> None:
    """Every prompt id with its piece and part, then the breakdown of those ids."""
    from app.cli.tokenize import piece_text
    from app.conversation.context_breakdown import PromptRecord, breakdown
    from templates import prompt_ids
    from templates.builder import BuiltPrompt

    ids = prompt_ids(tokenizer, rendered)
    record = PromptRecord(BuiltPrompt(rendered, ids, 0), tuple(messages), context_size=context_size)
    parts = breakdown(tokenizer, record, extra_spans=extra_spans)
    for tid, part in zip(ids, parts.owner):
        print(f"{tid}\t{piece_text(tokenizer, tid)}\t{parts.parts[part].label}")
    print()
    print(parts.text())
