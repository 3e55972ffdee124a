"""Every key the window binds is in ``/help`` and in the README, written as a user reads it (one fact, checked).

The bindings (``ChatApp.BINDINGS``) are the truth; ``/help``'s table
(``app.tui.commands.HELP_KEYS``) and the README's "Using it" section must name
each of them, so a key added, moved or dropped in one place fails here until
the other two say so too.
"""
from __future__ import annotations

from pathlib import Path

from app.tui.app import ChatApp
from app.tui.commands import HELP_KEYS

ROOT = Path(__file__).resolve().parents[2]
_NAMES = {"escape": "Esc", "left": "←", "right": "→"}


def spoken(key: str) -> str:
    """``ctrl+r`` -> ``Ctrl+R``, ``alt+left`` -> ``Alt+←``, ``f2`` -> ``F2``, ``escape`` -> ``Esc``."""
    parts = [_NAMES.get(p, p.upper() if len(p) == 1 or p[0] == "f" and p[1:].isdigit() else p.capitalize())
             for p in key.split("+")]
    return "+".join(parts)


def readme_keys_text() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Using it")
    return text[start:text.index("\n## ", start + 1)].replace("Alt+Left", "Alt+←").replace("Alt+Right", "Alt+→")


def test_every_binding_is_in_help_and_in_the_readme():
    help_text = " ".join(keys for keys, _ in HELP_KEYS)
    readme = readme_keys_text()
    keys = [spoken(b.key) for b in ChatApp.BINDINGS]
    assert keys, "ChatApp has no bindings?"
    assert [k for k in keys if k not in help_text] == [], "bound but not in /help"
    assert [k for k in keys if k not in readme] == [], "bound but not in the README's 'Using it'"
