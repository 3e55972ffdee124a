"""The reply's format as the user asks for it: headless flags and the TUI's ``/format``, one reading.

``--json``, ``--json-schema FILE|JSON``, ``--regex PATTERN``, ``--grammar FILE`` and ``/format json|schema
FILE|regex PATTERN|grammar FILE|off`` all end as a :class:`backends.base.OutputConstraint` checked by
:func:`backends.constraint.parse_constraint`, or as one line saying why not (:class:`ConstraintError`),
before any engine work.  A schema may be given inline (it starts with ``{``) or as a file.  The words are
read by :mod:`app.settings.reply_format`, which ``[chat] format`` in a config or preset shares.
"""
from __future__ import annotations

from app.settings.reply_format import FORMAT_USAGE, constraint_from_words, read_source, schema_source
from backends.base import OutputConstraint
from backends.constraint import ConstraintError, parse_constraint

__all__ = ["FORMAT_USAGE", "ConstraintError", "constraint_from_command", "constraint_from_flags", "schema_source"]


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
        return parse_constraint("grammar", read_source(grammar, "grammar"))
    return None


def constraint_from_command(argument: str) -> OutputConstraint | None:
    """``/format ARG``'s constraint; None for ``off``.  ConstraintError (one line) for anything else."""
    if not argument.strip():
        raise ConstraintError(f"usage: {FORMAT_USAGE}")
    return constraint_from_words(argument)
