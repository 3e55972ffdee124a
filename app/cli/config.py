"""``tokchat config path|show|init``: where the settings live and what they add up to.

``show`` prints the merged settings as TOML, each value followed by where it
came from (default.toml, the model's preset, the user's config.toml, a flag),
so "why is the temperature 0.2?" has an answer.  Choices the TUI remembers per model
(``[models."NAME"]``: ``/think on|off``, ``/think budget N``) are listed as their own
tables, and where one applies to the model shown (``--model``, or the default one) the
``[chat]`` value is the remembered one, its source that table: what the chat will use.
The API key is masked (``sk-…abcd``).
"""
from __future__ import annotations

import argparse
import json
import sys

from app.errors import CLIError


#: this command's parser resolves a clash of option strings for the later one (see add_arguments)
CONFLICT_HANDLER = "resolve"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["path", "show", "init"],
                        help="path: the user config file; show: merged settings and their sources; "
                             "init: write a commented config.toml to start from")
    from app.cli import chat

    # the chat flags, so that `config show --model X --temp 0` shows what that chat would get; the chat's own
    # --json (the reply's shape) gives way to this command's --json (its output), added after it
    chat.add_arguments(parser.add_argument_group("chat flags (show: as the chat would see them)"))
    parser.add_argument("--json", action="store_true", help="show: JSON {key: {value, source}}")


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, str)):
        return json.dumps(value, ensure_ascii=False)
    return repr(value)


def _model_name(settings: object) -> str:
    """The name a chat with these settings remembers its choices under (the TUI's: the header's name)."""
    meta = getattr(settings, "model_meta", None)
    path = getattr(settings, "model_path", None)
    return (getattr(meta, "name", "") or "") or (path.stem if path is not None else "")


def show(args: argparse.Namespace) -> int:
    from app.models.preset_match import load_settings
    from app.settings.model_memory import remembered_settings, remembered_tables

    from app.cli.terminal import shown_json

    settings = load_settings(args)
    v, sources = dict(settings.values), dict(settings.sources)
    # per-model memory ([models."NAME"], written by the TUI's /think): what this model's chat will use
    model_name = _model_name(settings)
    for key, (value, source) in (remembered_settings(v, model_name) if model_name else {}).items():
        v[key], sources[key] = value, source
    from app.settings.config import user_config_path

    for name, body in remembered_tables().items():
        for key, value in body.items():
            v[f'models."{name}".{key}'], sources[f'models."{name}".{key}'] = value, str(user_config_path())
    from app.settings.server import masked_key

    v["server.api_key"] = masked_key(v["server.api_key"])  # a secret: shown only as enough to tell keys apart
    # values are written as TOML/JSON strings; to a terminal their controls become \uXXXX, valid in both
    out = shown_json
    if args.json:
        print(out(json.dumps({k: {"value": v[k], "source": sources[k]} for k in v}, indent=2, ensure_ascii=False)))
        return 0
    print(out(f"# files: {', '.join(str(p) for p in settings.files)}"))
    from app.models.served import discard_opened

    discard_opened()  # the client a server's preset match opened: no chat adopts it here
    if settings.preset is not None:
        model = settings.model_path or f"what {v['server.url']} serves"
        print(out(f"# model: {model} -> preset {settings.preset.name} ({settings.preset.path})"))
    elif settings.preset_note:
        print(out(f"# {settings.preset_note}"))
    lines, section = [], None
    for key, value in v.items():
        head, name = key.rsplit(".", 1) if key.startswith("models.") else key.split(".", 1)
        if head != section:
            lines.append(("", f"\n[{head}]"))
            section = head
        lines.append((sources[key], f"{name} = {_toml_value(value)}"))
    width = min(max(len(text) for src, text in lines if src), 40)
    for src, text in lines:
        print(out(f"{text:<{width}}  # {src}" if src else text))
    return 0


def init() -> int:
    from app.settings.config import DEFAULTS_PATH, user_config_path

    path = user_config_path()
    if path.is_dir():
        raise CLIError(f"{path} is a directory, not a config file: move it away first")
    if path.exists():
        raise CLIError(f"{path} exists already: edit it (see `tokchat config show`)")
    lines = []
    for line in DEFAULTS_PATH.read_text(encoding="utf-8").splitlines():
        # every setting commented out: the file starts as a no-op the user edits
        is_setting = line and not line.startswith(("#", "["))
        lines.append(f"# {line}" if is_setting else line)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(path)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.action == "path":
        from app.settings.config import user_config_path

        path = user_config_path()
        print(path)
        if path.is_dir():
            print("(a directory, not a config file: move it away, then `tokchat config init` writes a commented one)",
                  file=sys.stderr)
        elif not path.exists():
            print("(does not exist yet: `tokchat config init` writes a commented one)", file=sys.stderr)
        return 0
    if args.action == "init":
        return init()
    return show(args)
