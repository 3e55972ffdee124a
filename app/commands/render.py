"""``tokchat render``: show exactly the prompt a conversation sends to the model.

    tokchat render --model PATH --messages FILE.json [--template NAME | --template-file FILE.jinja]
                   [--think | --no-think] [--no-generation-prompt] [--ids]

``FILE.json`` is a JSON list of ``{"role": ..., "content": ...}`` objects.
Without ``--ids`` the rendered text is written as is (no newline added);
with ``--ids`` one JSON array of the prompt ids, the same ids a chat would
send: markup as control tokens, message text as plain text, one BOS where
the model wants it.  A fallback notice from ``--template auto`` goes to
stderr.  Only the tokenizer is loaded, never the model's weights.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from app.cli import CLIError


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
    parser.add_argument("--no-generation-prompt", dest="generation_prompt", action="store_false",
                        help="leave out the assistant header at the end")
    parser.add_argument("--ids", action="store_true", help="print the prompt ids as one JSON array")


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
    messages = []
    for n, item in enumerate(data):
        if not isinstance(item, dict) or not isinstance(item.get("role"), str) \
                or not isinstance(item.get("content"), str):
            raise CLIError(f"{path}: message {n} needs a string \"role\" and a string \"content\"")
        messages.append({"role": item["role"], "content": item["content"]})
    return messages


def run(args: argparse.Namespace) -> int:
    from app.model_resolution import resolve_model
    from templates import prompt_ids, resolve_template
    from tokenizer import load_tokenizer

    messages = read_messages(args.messages)
    tokenizer = load_tokenizer(resolve_model(args.model))
    template, notice = resolve_template(args.template, tokenizer, args.template_file)
    if notice:
        print(f"tokchat: {notice}", file=sys.stderr)
    rendered = template.render(messages, add_generation_prompt=args.generation_prompt,
                               enable_thinking=args.think)
    if args.ids:
        print(json.dumps(prompt_ids(tokenizer, rendered)))
    else:
        sys.stdout.write(rendered.text)
        sys.stdout.flush()
    return 0
