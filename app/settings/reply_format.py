"""A reply format in words (``json``, ``schema FILE|JSON``, ``regex PATTERN``, ``grammar FILE``, ``off``):
the TUI's ``/format`` argument and the ``[chat] format`` setting (a preset's or the user's config), one reading.

Here, with the settings, because a config file's ``format`` is checked when the settings are read, before
any engine work: a bad one is a ConfigError naming the file, the line and what is wrong.  The words end as a
:class:`backends.base.OutputConstraint` checked by :func:`backends.constraint.parse_constraint`.
"""
from __future__ import annotations

from pathlib import Path

from app.settings.config import ConfigError
from app.settings.toml_lines import located
from backends.base import OutputConstraint
from backends.constraint import MAX_SOURCE_BYTES, ConstraintError, parse_constraint

#: the format words, as the TUI's help lists them
FORMAT_USAGE = "/format json | schema FILE|JSON | regex PATTERN | grammar FILE | off"


def read_source(path_text: str, what: str, base: Path | None = None) -> str:
    """A schema's or grammar's file, read whole (its size checked before it is read); a relative path is
    taken from ``base`` (the folder of the config file that named it) when given."""
    path = Path(path_text).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
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


def schema_source(value: str, base: Path | None = None) -> str:
    """A schema given inline (JSON starting with ``{``) or as a file holding it."""
    return value if value.lstrip().startswith("{") else read_source(value, "JSON Schema", base)


def constraint_from_words(argument: str, base: Path | None = None) -> OutputConstraint | None:
    """The constraint ``argument`` names; None for ``off`` (and for nothing).  ConstraintError (one line)."""
    word, _, rest = argument.strip().partition(" ")
    rest = rest.strip()
    if word in ("off", ""):
        return None
    if word == "json" and not rest:
        return parse_constraint("json")
    if word == "schema" and rest:
        return parse_constraint("json_schema", schema_source(rest, base))
    if word == "regex" and rest:
        return parse_constraint("regex", rest)
    if word == "grammar" and rest:
        return parse_constraint("grammar", read_source(rest, "grammar", base))
    raise ConstraintError(f"usage: {FORMAT_USAGE}")


def format_setting(value: str, source: str) -> OutputConstraint | None:
    """``[chat] format`` as set by ``source`` (default.toml, a model preset, the user's config.toml): its
    constraint, or a ConfigError naming the file and line; relative files are read beside that file."""
    path = Path(source)
    base = path.parent if path.suffix == ".toml" else None
    try:
        return constraint_from_words(value, base)
    except ConstraintError as exc:
        what = str(exc).replace("usage: /format ", "one of: ")
        raise ConfigError(f"{located(source, 'chat', 'format')}: chat.format: {what}") from None
