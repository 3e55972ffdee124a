"""Which line of a TOML file sets a key: config errors name the line, not only the file and the key.

``tomllib`` gives a line for a file that does not parse, but a parsed table keeps no
positions, and a bad value is found only after parsing (:func:`app.settings.config.check_value`).
So the line is looked up when an error is raised: the file is scanned for table headers
(``[servers.gpu]``, ``[[x]]``) and ``key =`` lines (dotted and quoted keys included), and the
first line whose full key starts with the key asked for is its line.  Multi-line strings are
skipped, so their text never looks like a key.  A key set inside an inline table or an array of
tables is found at the line of the key that holds it.

Only called on the way to an error: nothing here runs while a good file is read.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

#: one part of a key: bare, "basic" or 'literal'
_PART = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|\'[^\']*\')'
_DOTTED = rf"{_PART}(?:\s*\.\s*{_PART})*"
_HEADER = re.compile(rf"^\[\[?\s*({_DOTTED})\s*\]\]?\s*(?:#.*)?$")
_ASSIGN = re.compile(rf"^({_DOTTED})\s*=")
_PARTS = re.compile(_PART)


def _parts(dotted: str) -> tuple[str, ...]:
    """``a."b.c".'d'`` -> ("a", "b.c", "d")."""
    out = []
    for part in _PARTS.findall(dotted):
        if part.startswith('"'):
            part = part[1:-1].encode("utf-8").decode("unicode_escape") if "\\" in part else part[1:-1]
        elif part.startswith("'"):
            part = part[1:-1]
        out.append(part)
    return tuple(out)


def key_line(text: str, keys: Sequence[str]) -> int | None:
    """The 1-based line of ``text`` that sets ``keys`` (or a table or key under it), None if none does."""
    want = tuple(keys)
    table: tuple[str, ...] = ()
    closing: str | None = None  # inside a multi-line string: its closing quotes
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if closing is not None:
            if line.count(closing) % 2 == 1:
                closing = None
            continue
        if not line or line.startswith("#"):
            continue
        header = _HEADER.match(line)
        if header:
            table = _parts(header.group(1))
            if table[:len(want)] == want:
                return number
            continue
        assign = _ASSIGN.match(line)
        if assign is None:
            continue
        if (table + _parts(assign.group(1)))[:len(want)] == want:
            return number
        rest = line[assign.end():]
        for quotes in ('"""', "'''"):
            if rest.count(quotes) % 2 == 1:
                closing = quotes
    return None


def located(source: str | Path, *keys: str) -> str:
    """``"SOURCE, line N"`` when ``source`` is a ``.toml`` file that sets ``keys``, else ``source`` as it is
    (a flag such as ``--temperature``, or a file that cannot be read again)."""
    path = Path(source)
    if path.suffix != ".toml" or not keys:
        return str(source)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return str(source)
    number = key_line(text, keys)
    return str(source) if number is None else f"{source}, line {number}"


def parse_error_line(message: str) -> tuple[int, str] | None:
    """``(line, message)`` from a ``tomllib`` error ("... (at line 4, column 10)"), the position moved to
    the front as every other config error has it; None when the message carries no line."""
    found = re.search(r"\s*\(at line (\d+), column (\d+)\)$", message)
    if found is None:
        return None
    return int(found.group(1)), f"{message[:found.start()]} (column {found.group(2)})"
