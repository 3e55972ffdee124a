"""``[state]`` and ``--no-state`` (issue 45): where the engine keeps its KV states, or that it keeps none.

Read as a chat reads them (default.toml < config.toml < flags) into the ChatOptions that
reach the engine's LoadOptions, with the source ``tokchat config show`` prints.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import build_parser
from app.settings.merge import options_from_settings, read_settings

@pytest.fixture(autouse=True)
def config_dir(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "config"
    monkeypatch.setenv("TOKCHAT_CONFIG_DIR", str(directory))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return directory


def _options(*argv: str):
    args = build_parser().parse_args(list(argv))
    return options_from_settings(read_settings(args), args)


def test_states_go_to_the_user_cache_dir_by_default(tmp_path):
    options = _options()
    assert options.state_dir == tmp_path / "cache" / "tokchat" / "state"
    assert options.state_max_gib == 4


def test_no_state_and_enabled_false_keep_nothing(config_dir):
    assert _options("--no-state").state_dir is None
    config_dir.mkdir(parents=True)
    (config_dir / "config.toml").write_text('[state]\nenabled = false\n')
    assert _options().state_dir is None


def test_the_folder_and_cap_come_from_the_config(config_dir, tmp_path):
    config_dir.mkdir(parents=True)
    (config_dir / "config.toml").write_text(f'[state]\ndir = "{tmp_path / "states"}"\nmax_gib = 0.5\n')
    options = _options()
    assert (options.state_dir, options.state_max_gib) == (tmp_path / "states", 0.5)


def test_config_show_names_the_no_state_flag():
    settings = read_settings(build_parser().parse_args(["--no-state"]))
    assert (settings.values["state.enabled"], settings.sources["state.enabled"]) == (False, "--no-state")
