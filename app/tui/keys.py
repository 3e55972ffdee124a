"""The chat's keys, one table: each key's name under ``[keys]`` in the config, its default, what it does.

Every binding of the window (:class:`app.tui.app.ChatApp`), the prompt box, the history list
and its delete dialog carries its name here as its Textual binding id, so the user's ``[keys]``
become Textual's keymap (``App.set_keymap``): the footer then draws the keys in use, and
``/help``, the history list's hint and the delete dialog's hint are written from
:class:`KeyMap` too.  The defaults here are the ones ``configs/default.toml`` documents (a
test holds them equal).  The value's syntax is checked where the config is read
(:func:`app.settings.config.key_problem`); two keys on one key are found here
(:func:`keymap_for`), since only the TUI knows which keys act together.

Not configurable: Up/Down (recall, the list's cursor), Tab, Ctrl+P (the palette) and Ctrl+C
(Textual's own).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class KeySpec:
    """One configurable key: ``name`` is the ``[keys]`` name and the binding id."""

    name: str
    #: Textual key names, comma-separated (several keys for one action: "shift+enter,ctrl+j")
    default: str
    #: what it does, as /help says it
    does: str
    #: where it acts: "chat" (the window and prompt box) or "history" (the history list, which takes
    #: these keys before the chat does while the cursor is in it)
    scope: str = "chat"


KEYS: tuple[KeySpec, ...] = (
    KeySpec("send", "enter", "send"),
    KeySpec("newline", "shift+enter,ctrl+j", "new line"),
    KeySpec("cancel", "escape", "stop the reply (or cancel an edit)"),
    KeySpec("regenerate", "ctrl+r", "regenerate"),
    KeySpec("edit_last", "ctrl+g", "edit the last prompt"),
    KeySpec("continue_reply", "ctrl+l", "continue the last reply"),
    KeySpec("toggle_thinking", "ctrl+t", "show/hide thinking"),
    KeySpec("copy_reply", "ctrl+o", "copy the last reply"),
    KeySpec("toggle_sidebar", "ctrl+b", "history"),
    KeySpec("new_chat", "ctrl+n", "new chat"),
    KeySpec("previous_reply", "alt+left", "the previous sibling reply"),
    KeySpec("next_reply", "alt+right", "the next sibling reply"),
    KeySpec("token_inspector", "f2", "token inspector (or a double click)"),
    KeySpec("quit", "ctrl+q", "quit"),
    KeySpec("history_rename", "ctrl+r", "rename (history list)", "history"),
    KeySpec("history_delete", "ctrl+d", "delete (history list)", "history"),
    KeySpec("history_undo_delete", "ctrl+z", "undo delete (history list)", "history"),
    KeySpec("history_fork", "ctrl+f", "fork (history list)", "history"),
)
SPECS: dict[str, KeySpec] = {spec.name: spec for spec in KEYS}
DEFAULTS: dict[str, str] = {spec.name: spec.default for spec in KEYS}

#: keys the window keeps for itself: a configured key may not take them
RESERVED = {"ctrl+c": "copy / stop", "ctrl+p": "the command palette", "tab": "focus", "shift+tab": "focus",
            "up": "previous prompts", "down": "next prompts"}
_SPOKEN = {"escape": "Esc", "enter": "Enter", "left": "←", "right": "→", "up": "↑", "down": "↓",
           "space": "Space", "tab": "Tab", "backspace": "Backspace", "delete": "Delete"}


def default(name: str) -> str:
    """The first default key of ``name`` (what a ``Binding`` is declared with)."""
    return SPECS[name].default.split(",")[0]


def spoken(key: str) -> str:
    """``ctrl+r`` -> ``Ctrl+R``, ``alt+left`` -> ``Alt+←``, ``f2`` -> ``F2``, ``escape`` -> ``Esc``."""
    def part(p: str) -> str:
        if p in _SPOKEN:
            return _SPOKEN[p]
        return p.upper() if len(p) == 1 or (p[0] == "f" and p[1:].isdigit()) else p.capitalize()

    return "+".join(part(p) for p in key.split("+"))


def _keys(value: str) -> list[str]:
    return [k.strip() for k in value.split(",") if k.strip()]


@dataclass(frozen=True)
class KeyMap:
    """The keys in use: ``[keys]`` over the defaults.  ``problem``: why the user's keys were set aside
    (two actions on one key), else ""."""

    keys: Mapping[str, str]
    problem: str = ""

    def of(self, name: str) -> list[str]:
        return _keys(self.keys[name])

    def hint(self, name: str) -> str:
        """How a hint line writes the key(s) of ``name``: ``ctrl+r``, ``shift+enter/ctrl+j``."""
        return "/".join(self.of(name))

    def said(self, name: str) -> str:
        """How /help and notices write them: ``Ctrl+R``, ``Shift+Enter / Ctrl+J``."""
        return " / ".join(spoken(k) for k in self.of(name))

    def chat_keys(self) -> set[str]:
        """The keys of the window's own actions (not send, newline or cancel, which the prompt box runs)."""
        return {k for s in KEYS if s.scope == "chat" and s.name not in ("send", "newline", "cancel")
                for k in self.of(s.name)}

    def textual(self) -> dict[str, str]:
        """The keymap for ``App.set_keymap``: binding id -> keys."""
        return {name: ",".join(self.of(name)) for name in self.keys}


def keymap_for(configured: Mapping[str, str] | None) -> KeyMap:
    """The keys in use for the ``[keys]`` values (:attr:`app.settings.options.ChatOptions.keys`).

    Two actions of one scope on one key (or one on a key the window keeps) would leave one of them
    unreachable, silently: then the defaults are used, and :attr:`KeyMap.problem` says why, in one line."""
    keys = {**DEFAULTS, **{k: v for k, v in (configured or {}).items() if k in SPECS and v.strip()}}
    for scope in ("chat", "history"):
        taken: dict[str, str] = {}
        names = [s.name for s in KEYS if s.scope == scope]
        if scope == "history":  # the chat's keys act in the list too, except where the list takes them
            names += ["toggle_sidebar", "new_chat", "quit"]
        for name in names:
            for key in _keys(keys[name]):
                other = taken.get(key) or (RESERVED.get(key) and f"({RESERVED[key]})")
                if other:
                    return KeyMap(DEFAULTS, f"[keys] {name} = {key!r} is taken by {other}: the default keys are "
                                            "used until one of them changes (tokchat config path)")
                taken[key] = name
    return KeyMap(keys)


def help_rows(keys: KeyMap) -> list[tuple[str, str]]:
    """``/help``'s key table, with the keys in use."""
    rows = [(keys.said(s.name), s.does) for s in KEYS]
    rows[3:3] = [("Up (empty box)", "previous prompts"), (keys.said("cancel") + " (editing)", "cancel the edit"),
                 ("Ctrl+C", "stop the reply")]
    return rows + [("Ctrl+P", "command palette")]


def history_hint(keys: KeyMap) -> str:
    """The history list's hint: every key it takes."""
    return (f"type to search · ↑↓ move · Enter open · {keys.hint('history_rename')} rename · "
            f"{keys.hint('history_delete')} delete · {keys.hint('history_undo_delete')} undo delete · "
            f"{keys.hint('history_fork')} fork · {keys.hint('new_chat')} new · {keys.hint('toggle_sidebar')} close")


def history_away_hint(keys: KeyMap) -> str:
    """The history list's hint while the cursor is elsewhere: its keys act only with the cursor in it."""
    return f"{keys.hint('toggle_sidebar')}: back to this list (its keys act there) · again: close it"
