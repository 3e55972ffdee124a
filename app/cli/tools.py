"""``tokchat tools``: the configured MCP servers, their tools, and what each costs in tokens.

    tokchat tools [--model PATH] [--server NAME ...]

Starts every server in ``[mcp.servers]`` (or those named), lists each tool
with its schema's size in tokens (the model's tokenizer; the bundled one by
default), and what the schemas add to a prompt through the chat template.
A server that does not start is one line; the others are still listed.  Exit status 2 when
none of them started.
"""
from __future__ import annotations

import argparse
import sys

from app.cli.terminal import shown
from app.errors import CLIError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", "-m", help="count tokens with this model's tokenizer and template "
                        "(default: the configured or bundled model)")
    parser.add_argument("--server", action="append", help="only this server (repeatable)")


def run(args: argparse.Namespace) -> int:
    from app.settings.merge import read_settings
    from app.settings.tools import tool_settings
    from app.tools.display import tools_table
    from app.tools.mcp_client import McpHub

    settings = read_settings(args)
    tools_settings = tool_settings(settings)
    servers = tools_settings.servers
    if not servers:
        print("no MCP servers configured: add [mcp.servers.NAME] tables to "
              f"{settings.files[-1] if len(settings.files) > 1 else 'your config.toml (tokchat config path)'}")
        return 0
    names = args.server or list(servers)
    unknown = [n for n in names if n not in servers]
    if unknown:
        raise CLIError(f"no MCP server named {unknown[0]!r} (configured: {', '.join(servers)})")
    counter = _counter(settings.values["model.default"] if args.model is None else args.model)
    with McpHub([servers[n] for n in names], call_timeout_s=tools_settings.call_timeout_s) as hub:
        failures = hub.start(names)
        print(shown(tools_table(hub, names, failures, counter)))  # a tool's name is the server's text
    if len(failures) == len(names):  # a script's check must see that no tool is available
        print(f"tokchat: no MCP server started ({len(names)} tried, each said why above)", file=sys.stderr)
        return 2
    return 0


def _counter(model: str | None):
    """Tokens of a schema as JSON, with the model's tokenizer; None if it cannot be loaded."""
    from app.models.resolution import resolve_model
    from app.tools.setup import schema_tokens
    from tokenizer import load_tokenizer

    try:
        tokenizer = load_tokenizer(resolve_model(model or None))
    except Exception as exc:  # noqa: BLE001 - the listing still works without counts
        print(f"tokchat: token counts left out: {exc}", file=sys.stderr)
        return None
    return lambda schema: schema_tokens(tokenizer, schema)
