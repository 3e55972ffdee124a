"""Conversation ids on the command line (``--resume ID``, ``export ID``): checked where they are typed.

A row id in SQLite is a signed 64-bit integer; a larger number used to reach the database and
end in an OverflowError traceback.  argparse turns the ArgumentTypeError into one usage line.
"""
from __future__ import annotations

import argparse

#: SQLite's largest INTEGER, so the largest row id it can hold
MAX_ROW_ID = (1 << 63) - 1


def conversation_id(text: str) -> int:
    """argparse ``type=`` for a stored conversation's id: an integer from 1 to :data:`MAX_ROW_ID`."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a conversation id: {text!r} (see `tokchat export --list`)") from None
    if not 1 <= value <= MAX_ROW_ID:
        raise argparse.ArgumentTypeError(f"no conversation {value}: ids go from 1 to {MAX_ROW_ID} "
                                         "(see `tokchat export --list`)")
    return value
