"""``[chat] format`` (issue 46 item 1): a reply format per model preset or in the user's config.toml.

Read with the real settings layers (default.toml < the model's preset < config.toml < flags) on the real
SmolLM2 file, so the preset is matched from its header; a bad value is a ConfigError naming the file and
line, raised while the settings are read, before any engine work.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from app.cli import build_parser
from app.models.preset_match import chat_options
from app.settings.config import ConfigError

COLOUR = {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}}, "required": ["colour"]}


@pytest.fixture(autouse=True)
def config_dir(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "config"
    directory.mkdir()
    monkeypatch.setenv("TOKCHAT_CONFIG_DIR", str(directory))
    return directory


def args(*argv: str):
    return build_parser().parse_args(list(argv))


def test_a_model_preset_sets_the_reply_format(config_dir, smollm_path):
    (config_dir / "models").mkdir()
    (config_dir / "models" / "smollm2.toml").write_text(
        '[match]\narchitectures = ["llama"]\nnames = ["smollm2"]\n[chat]\nformat = "json"\n')
    options = chat_options(args("--model", str(smollm_path)))
    assert options.preset == "smollm2"
    assert options.sampling.constraint is not None and options.sampling.constraint.kind == "json"


def test_the_users_config_sets_a_schema_file_beside_it_and_wins_over_the_preset(config_dir, smollm_path):
    (config_dir / "models").mkdir()
    (config_dir / "models" / "smollm2.toml").write_text(
        '[match]\narchitectures = ["llama"]\nnames = ["smollm2"]\n[chat]\nformat = "json"\n')
    (config_dir / "colour.json").write_text(json.dumps(COLOUR))
    (config_dir / "config.toml").write_text('[chat]\nformat = "schema colour.json"\n')
    held = chat_options(args("--model", str(smollm_path))).sampling.constraint
    assert held.kind == "json_schema" and json.loads(held.source) == COLOUR


def test_no_format_is_free_text(smollm_path):
    assert chat_options(args("--model", str(smollm_path))).sampling.constraint is None


@pytest.mark.parametrize("value, says", [
    ("schema nope.json", "chat.format: no JSON Schema file {dir}/nope.json: give a path"),
    ("yaml", "chat.format: one of: json | schema FILE|JSON | regex PATTERN | grammar FILE | off"),
    ('schema {\\"type\\": \\"nope\\"}', "chat.format: the JSON Schema is not valid at type"),
])
def test_a_bad_format_names_the_file_and_the_line(config_dir, smollm_path, value, says):
    path = config_dir / "config.toml"
    path.write_text(f'[sampling]\ntemperature = 0\n[chat]\nformat = "{value}"\n')
    with pytest.raises(ConfigError) as refused:
        chat_options(args("--model", str(smollm_path)))
    message = str(refused.value)
    assert message.startswith(f"{path}, line 4: ") and says.format(dir=config_dir) in message, message
    assert "\n" not in message
