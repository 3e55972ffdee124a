"""The keys: one table (app.tui.keys), configurable under [keys], and named where the user reads them.

The table's defaults are the bindings (``ChatApp.BINDINGS`` and the history list's), the values
``configs/default.toml`` documents, what ``/help`` lists and what the README's "Using it" section
names: a key added, moved or dropped in one place fails here until the others say so too.  A key
set in the config acts, and the footer, ``/help`` and the history hint name it (issue 44, T9).
"""
from __future__ import annotations

from pathlib import Path

import pytest
from support.screen_text import drawn, toasts, words
from support.tui_helpers import SIZE, send, wait_for, wait_loaded, wait_reply

from app.settings.config import KEY_ACTIONS, ConfigError, check_value, read_toml
from app.settings.options import ChatOptions
from app.tui.app import ChatApp
from app.tui.keys import DEFAULTS, KEYS, help_rows, keymap_for, spoken
from app.tui.widgets.history_sidebar import HistorySidebar

ROOT = Path(__file__).resolve().parents[3]


def readme_keys_text() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Using it")
    return text[start:text.index("\n## ", start + 1)].replace("Alt+Left", "Alt+←").replace("Alt+Right", "Alt+→")


def test_every_binding_is_in_help_and_in_the_readme():
    help_text = " ".join(keys for keys, _ in help_rows(keymap_for(None)))
    readme = readme_keys_text()
    keys = [spoken(b.key) for b in [*ChatApp.BINDINGS, *HistorySidebar.BINDINGS] if b.key not in ("up", "down")]
    assert keys, "ChatApp has no bindings?"
    assert [k for k in keys if k not in help_text] == [], "bound but not in /help"
    assert [k for k in keys if k not in readme] == [], "bound but not in the README's 'Using it'"


def test_every_binding_is_a_key_of_the_config_with_the_documented_default():
    bound = {b.id: b.key for b in [*ChatApp.BINDINGS, *HistorySidebar.BINDINGS] if b.id}
    documented = read_toml(ROOT / "configs" / "default.toml")["keys"]
    assert documented == DEFAULTS  # every [keys] name, with the default the table binds
    assert tuple(s.name for s in KEYS) == KEY_ACTIONS
    assert {name: DEFAULTS[name].split(",")[0] for name in bound} == bound
    # every configurable key is bound somewhere (send and newline: the prompt box reads them itself)
    assert set(DEFAULTS) - set(bound) == {"send", "newline"}


@pytest.mark.parametrize("value", ["r", "shift+r", "ctrl+", "control+y", "ctrl+Y", "ctrl+y,", "pgup", ""])
def test_a_key_that_cannot_work_is_refused_where_the_config_is_read(value):
    with pytest.raises(ConfigError) as refused:
        check_value("config.toml", "keys.regenerate", value)
    assert "keys.regenerate" in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.anyio
async def test_a_key_set_in_the_config_acts_and_is_named_in_the_footer_help_and_history(scripted_app,
                                                                                       smollm_path):
    keys = {**DEFAULTS, "regenerate": "ctrl+y", "edit_last": "ctrl+e", "history_rename": "ctrl+e"}
    options = ChatOptions(model=str(smollm_path), theme="textual-dark", keys=keys)
    app = scripted_app(["One.", "Two."], options=options)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "hello")
        await wait_reply(pilot)
        footer = words(drawn(app, app.query_one("Footer")))
        assert "^y Regen" in footer and "^e Edit" in footer and "^r" not in footer and "^g" not in footer
        await pilot.press("ctrl+r")  # the old key does nothing now
        await pilot.pause()
        assert not app.generating and "Two." not in drawn(app, app.chat_view)
        await pilot.press("ctrl+y")  # the configured one regenerates
        await wait_for(pilot, lambda: "Two." in drawn(app, app.chat_view), what="the regenerated reply")
        await wait_reply(pilot)
        await pilot.press("ctrl+e")  # and ctrl+e edits the last prompt
        await pilot.pause()
        assert app.prompt_input.editing and app.prompt_input.text == "hello"
        await pilot.press("escape")
        await send(pilot, "/help")
        helped = words(drawn(app, app.chat_view))
        assert "Ctrl+Y - regenerate" in helped and "Ctrl+E - edit the last prompt" in helped, helped
        await pilot.press("ctrl+b")
        await pilot.pause()
        hint = words(drawn(app, app.query_one(HistorySidebar).query_one(".hint-here")))
        assert "ctrl+e rename" in hint and "ctrl+r" not in hint


@pytest.mark.anyio
async def test_a_key_the_prompt_box_edits_with_goes_to_the_action_set_for_it(scripted_app, smollm_path):
    """ctrl+k deletes to the end of the line in a TextArea: set as cancel, it leaves an edit instead."""
    options = ChatOptions(model=str(smollm_path), theme="textual-dark",
                          keys={**DEFAULTS, "cancel": "ctrl+k", "send": "ctrl+s"})
    app = scripted_app(["One."], options=options)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_loaded(pilot)
        app.prompt_input.focus()
        await pilot.press(*"hello", "enter", "ctrl+j", *"there")  # enter and ctrl+j: new lines now
        assert app.prompt_input.text == "hello\n\nthere" and not app.session.messages
        await pilot.press("ctrl+s")
        await wait_reply(pilot)
        assert "One." in drawn(app, app.chat_view)
        await pilot.press("ctrl+g")
        assert app.prompt_input.editing
        await pilot.press("home", "ctrl+k")
        await pilot.pause()
        assert not app.prompt_input.editing and app.prompt_input.text == ""  # cancelled, the box cleared


@pytest.mark.anyio
async def test_two_actions_on_one_key_are_said_and_the_defaults_kept(scripted_app, smollm_path):
    options = ChatOptions(model=str(smollm_path), theme="textual-dark", keys={**DEFAULTS, "regenerate": "ctrl+n"})
    app = scripted_app(["One."], options=options)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_loaded(pilot)
        await wait_for(pilot, lambda: any("[keys] new_chat = 'ctrl+n' is taken by regenerate" in t
                                          for t in toasts(app)), what="the notice")
        assert "^r Regen" in words(drawn(app, app.query_one("Footer")))
