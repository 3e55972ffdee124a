"""The reply's format as the user asks for it: headless flags and the TUI's ``/format``, one reading.

``--json``, ``--json-schema FILE|JSON``, ``--regex PATTERN``, ``--grammar FILE`` and ``/format json|schema
FILE|regex PATTERN|grammar FILE|off`` all end as a :class:`backends.base.OutputConstraint` checked by
:func:`backends.constraint.parse_constraint`, or as one line saying why not (:class:`ConstraintError`),
before any engine work.  A schema may be given inline (it starts with ``{``) or as a file.
"""
from __future__ import annotations

from pathlib import Path

from backends.base import OutputConstraint
from backends.constraint import MAX_SOURCE_BYTES, ConstraintError, parse_constraint

#: the ``/format`` words, as the TUI's help lists them
FORMAT_USAGE = "/format json | schema FILE|JSON | regex PATTERN | grammar FILE | off"


def _read(path_text: str, what: str) -> str:
    """A schema's or grammar's file, read whole (its size checked before it is read)."""
    path = Path(path_text).expanduser()
    try:
        size = path.stat().st_size
        if size > MAX_SOURCE_BYTES:
            raise ConstraintError(f"the {what} {path} is {size / (1 << 20):.1f} MB: the most accepted is "
                                  f"{MAX_SOURCE_BYTES >> 20} MB")
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConstraintError(f"no {what} file {path}: give a path (or, for a schema, the JSON itself)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConstraintError(f"cannot read the {what} {path}: {exc}") from exc


def schema_source(value: str) -> str:
    """``--json-schema``'s value: inline JSON (starting with ``{``) or a file holding it."""
    return value if value.lstrip().startswith("{") else _read(value, "JSON Schema")


def constraint_from_flags(*, json: bool = False, json_schema: str | None = None, regex: str | None = None,
                          grammar: str | None = None) -> OutputConstraint | None:
    """The constraint the headless flags ask for (at most one of them is given), or None."""
    if json:
        return parse_constraint("json")
    if json_schema is not None:
        return parse_constraint("json_schema", schema_source(json_schema))
    if regex is not None:
        return parse_constraint("regex", regex)
    if grammar is not None:
        return parse_constraint("grammar", _read(grammar, "grammar"))
    return None


def constraint_from_command(argument: str) -> OutputConstraint | None:
    """``/format ARG``'s constraint; None for ``off``.  ConstraintError (one line) for anything else."""
    word, _, rest = argument.strip().partition(" ")
    rest = rest.strip()
    if word == "off":
        return None
    if word == "json" and not rest:
        return parse_constraint("json")
    if word == "schema" and rest:
        return parse_constraint("json_schema", schema_source(rest))
    if word == "regex" and rest:
        return parse_constraint("regex", rest)
    if word == "grammar" and rest:
        return parse_constraint("grammar", _read(rest, "grammar"))
    raise ConstraintError(f"usage: {FORMAT_USAGE}")
