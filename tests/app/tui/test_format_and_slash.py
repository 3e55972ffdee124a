"""The pure parts of the TUI: stat and meter strings, slash command parsing."""
from __future__ import annotations

import pytest

from app.conversation.session import TurnStats
from app.tui.format import human_size, meter_level, meter_text, stats_line
from app.tui.slash import SlashCommand, SlashError, apply_sampling, parse_on_off, parse_slash, unescape_prompt
from backends.base import SamplingParams


def test_stats_line_shows_every_count_from_turnstats():
    stats = TurnStats(new_prompt_tokens=7, prompt_tokens=31, completion_tokens=12, reasoning_tokens=5,
                      ttft_s=0.123, tokens_per_s=98.76, finish_reason="length", dropped_turns=2)
    assert stats_line(stats) == ("prompt 7 new / 31 total · completion 12 · reasoning 5 · TTFT 0.12 s · "
                                 "98.8 tok/s · length · dropped 2 old turn(s)")


def test_stats_line_shows_speculation_only_when_there_was_some():
    stats = TurnStats(new_prompt_tokens=7, prompt_tokens=31, completion_tokens=300, ttft_s=0.1, tokens_per_s=47.5,
                      drafted_tokens=252, accepted_tokens=229)
    assert stats_line(stats) == ("prompt 7 new / 31 total · completion 300 · reasoning 0 · TTFT 0.10 s · "
                                 "47.5 tok/s · drafted 252 / accepted 229 · stop")
    assert "drafted" not in stats_line(TurnStats(completion_tokens=3))


def test_meter_colours_as_the_window_fills():
    assert [meter_level(n, 100) for n in (0, 69, 70, 89, 90, 120)] == ["ok", "ok", "warn", "warn", "full", "full"]
    assert meter_text(120, 8, 1000) == "ctx 120+8 / 1000 (13%)"
    assert meter_text(120, 0, 1000) == "ctx 120 / 1000 (12%)"


def test_human_size():
    assert human_size(512) == "512 B"
    assert human_size(105 * 1024 * 1024) == "105.0 MiB"


@pytest.mark.parametrize("text, expected", [
    ("/temp 0.2", SlashCommand("temp", "0.2")),
    ("/temperature 1", SlashCommand("temp", "1")),
    ("/top-p 0.9", SlashCommand("top_p", "0.9")),
    ("  /system You are terse.  ", SlashCommand("system", "You are terse.")),
    ("/NEW", SlashCommand("new", "")),
    ("hello /temp", None),
    ("//temp is a word", None),
])
def test_parse_slash(text, expected):
    assert parse_slash(text) == expected


def test_unknown_command_is_an_error_not_a_prompt():
    with pytest.raises(SlashError, match="unknown command /tmep"):
        parse_slash("/tmep 0.1")
    assert unescape_prompt("//temp is a word") == "/temp is a word"


def test_apply_sampling_validates():
    base = SamplingParams()
    assert apply_sampling(base, "temp", "0").temperature == 0.0
    assert apply_sampling(base, "top_k", "5").top_k == 5
    assert apply_sampling(base, "seed", "none").seed is None
    assert apply_sampling(base, "max_tokens", "64").max_tokens == 64
    with pytest.raises(SlashError, match="whole number"):
        apply_sampling(base, "top_k", "1.5")
    with pytest.raises(SlashError, match="between 0 and 1"):
        apply_sampling(base, "top_p", "2")
    assert base.temperature == SamplingParams().temperature  # the original is untouched


def test_on_off():
    assert parse_on_off("on", "think") is True
    assert parse_on_off("OFF", "think") is False
    with pytest.raises(SlashError, match="/think needs on or off"):
        parse_on_off("maybe", "think")
