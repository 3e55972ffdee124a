"""Terminal input and drawn text (issue 27, items 8 and 13).

:class:`app.tui.paste.PasteSafeParser` is fed the bytes a terminal sends
for a bracketed paste, in one read and split at every position, and must
give the paste back whole, in order, with no key events from inside it.
:func:`app.tui.inert.inert_text` keeps emoji joined by ZWJ and tag
sequences and escapes every other format character.
"""
from __future__ import annotations

import pytest
from textual import events

from app.tui.inert import inert_text
from app.tui.paste import PASTE_END, PASTE_START, PasteSafeParser

PASTES = ["abc \x1b[31mred\x1b[0m xyz", "start \x1b]0;TITLE\x07 end", "line one\rline two\r", "\x1b", "plain"]


def parse(chunks) -> list:
    parser = PasteSafeParser()
    out = []
    for chunk in chunks:
        if chunk:  # the driver never feeds "" (that is the end of input)
            out.extend(parser.feed(chunk))
    return out


@pytest.mark.parametrize("pasted", PASTES)
def test_a_paste_is_one_event_whatever_it_holds_and_however_it_is_split(pasted):
    data = "a" + PASTE_START + pasted + PASTE_END + "b"
    for cut in range(len(data) + 1):
        got = parse([data[:cut], data[cut:]])
        keys = [e.key for e in got if isinstance(e, events.Key)]
        pastes = [e.text for e in got if isinstance(e, events.Paste)]
        assert (keys, pastes) == (["a", "b"], [pasted]), cut
        assert isinstance(got[1], events.Paste)  # in order: a, the paste, b


def test_keys_and_escape_sequences_outside_a_paste_still_parse(monkeypatch):
    got = parse(["x\x1b[Ay"])
    assert [e.key for e in got] == ["x", "up", "y"]
    parser = PasteSafeParser()
    assert list(parser.feed("\x1b")) == []  # may be the start of a paste: held
    monkeypatch.setattr("textual.constants.ESCAPE_DELAY", 0.0)
    assert [e.key for e in parser.tick()] == ["escape"]  # nothing followed: the Esc key


def test_zwj_emoji_and_tag_flags_are_kept_other_format_characters_escaped():
    kept = ["👨\u200d👩\u200d👧\u200d👦", "🏳️\u200d🌈", "🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",
            "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"]  # Persian: ZWNJ inside a word
    for text in kept:
        assert inert_text(text) == text
    assert inert_text("a\u200d") == "a\\u200d"  # a joiner that joins nothing
    assert inert_text("x \u200d y") == "x \\u200d y"
    assert inert_text("\u202eevil") == "\\u202eevil"
    assert inert_text("tag\U000e0067") == "tag\\U000e0067"  # a tag with no flag before it
    assert inert_text("\x1b[31m") == "\\x1b[31m"
