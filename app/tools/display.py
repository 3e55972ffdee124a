"""Tool text made safe to show: a terminal never receives a control character from a tool.

A tool result (or a model's call arguments) may hold escape sequences
(``ESC [ 2 J`` clears the screen, ``ESC ] 52`` writes the clipboard, ``BEL``
...).  Everything shown to the user passes through :func:`printable`, which
replaces C0/C1 controls other than newline and tab with visible escapes
(``\\x1b``).  What the *model* gets is the text unchanged (as a literal
message span, so special-token text in it stays plain text).
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable

_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """``text`` with control characters (not newline and tab) written as ``\\xNN``."""
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                         else f"\\u{ord(m.group()):04x}", text)


def json_printable(text: str) -> str:
    """JSON text with its control characters written as ``\\uXXXX``: the same JSON value, inert on a terminal.

    ``json.dumps`` escapes C0 controls inside strings but passes C1 controls (``\\x9b`` is a CSI on
    many terminals), DEL and the line separators through; outside strings JSON holds only
    newline, tab and space, which stay."""
    return _CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def call_line(server: str, name: str, arguments: dict) -> str:
    """``server.tool {"arg": ...}`` on one line, safe to print."""
    args = json.dumps(arguments, ensure_ascii=False)
    return printable(f"{server + '.' if server else ''}{name} {args}")


def preview(text: str, limit: int = 300) -> str:
    """The start of a result for a one-line summary, safe to print."""
    flat = " ".join(text.split())
    return printable(flat if len(flat) <= limit else flat[: limit - 1] + "…")


def tools_table(hub: Any, names: list[str], failures: dict[str, str],
                counter: Callable[[dict], int] | None) -> str:
    """Servers, their tools and schema sizes, as plain lines: what ``tokchat tools`` prints and
    ``/tools`` shows (``hub``: a started :class:`app.tools.mcp_client.McpHub`; ``counter``: a
    schema's tokens, None to leave the counts out)."""
    lines = []
    total = 0
    for name in names:
        if name in failures:
            reason = failures[name].removeprefix(f"MCP server {name}: ")  # the line starts with the name already
            lines.append(f"{name}: not available: {printable(reason)}")
            continue
        tools = hub.tools([name])
        config = hub.configs[name]
        where = config.url or " ".join([config.command, *config.args])
        lines.append(f"{name} ({config.transport}: {printable(where)}): {len(tools)} tools")
        for tool in tools:
            cost = counter(tool.schema()) if counter else None
            total += cost or 0
            description = printable(" ".join(tool.description.split()))[:70]
            lines.append(f"  {tool.name:<24} {str(cost) + ' tokens' if cost is not None else '':>11}  {description}")
    if counter:
        lines.append(f"schemas: {total} tokens in all (as JSON; the template adds its own instructions)")
    return "\n".join(lines)
