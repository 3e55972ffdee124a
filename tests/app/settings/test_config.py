"""Configuration: default.toml < model preset < config.toml < flags, with clear errors."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import build_parser
from app.models.preset_match import chat_options, load_settings
from app.models.presets import BUNDLED_DIR, load_presets, match_preset
from app.settings.config import DEFAULTS_PATH, SCHEMA, ConfigError, read_toml, tomllib, user_config_path
from backends.base import SamplingParams

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def config_dir(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "config"
    monkeypatch.setenv("TOKCHAT_CONFIG_DIR", str(directory))
    return directory


def write_config(config_dir: Path, text: str) -> Path:
    config_dir.mkdir(parents=True, exist_ok=True)
    path = config_dir / "config.toml"
    path.write_text(text)
    return path


def args(*argv: str):
    return build_parser().parse_args(list(argv))


def test_default_toml_documents_every_setting():
    data = read_toml(DEFAULTS_PATH)
    flat = {f"{section}.{key}" for section, body in data.items() for key in body}
    assert flat == set(SCHEMA)
    lines = DEFAULTS_PATH.read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^\w+ = ", line):
            assert lines[i - 1].startswith("#"), f"default.toml: {line!r} has no comment above it"


def test_builtin_defaults_without_a_preset_match_the_dataclasses():
    settings = load_settings(use_preset=False)
    from app.settings.merge import options_from_settings

    options = options_from_settings(settings)
    assert options.sampling == SamplingParams()
    assert (options.model, options.ctx, options.think, options.history) == (None, None, None, True)
    assert set(settings.sources.values()) == {"default.toml"}


def test_precedence_default_preset_user_flags(config_dir, gemma_path):
    user = write_config(config_dir, '[sampling]\ntop_k = 50\nseed = 7\n[history]\nenabled = false\n'
                                    '[keys]\nquit = "ctrl+x"\n')
    settings = load_settings(args("--model", str(gemma_path), "--top-k", "3", "--no-think"))
    v, src = settings.values, settings.sources
    assert settings.preset.name == "gemma3" and settings.model_path == gemma_path
    assert (v["sampling.top_k"], src["sampling.top_k"]) == (3, "--top-k")               # flag over user
    assert (v["sampling.seed"], src["sampling.seed"]) == (7, str(user))                 # user over default
    assert (v["sampling.top_p"], src["sampling.top_p"]) == (0.95, "preset gemma3")      # preset over default
    assert (v["chat.template"], src["chat.template"]) == ("gemma", "preset gemma3")
    assert (v["sampling.max_tokens"], src["sampling.max_tokens"]) == (1024, "default.toml")
    assert (v["chat.thinking"], src["chat.thinking"]) == ("off", "--no-think")

    options = chat_options(args("--model", str(gemma_path), "--top-k", "3", "--temp", "0", "-p", "hi"))
    assert options.sampling == SamplingParams(temperature=0.0, top_p=0.95, top_k=3, min_p=0.0,
                                              repeat_penalty=1.0, seed=7, max_tokens=1024)
    assert (options.prompt, options.template, options.ctx, options.history) == ("hi", "gemma", 8192, False)
    assert options.keys["quit"] == "ctrl+x" and options.preset == "gemma3"


def test_no_history_flag_and_model_from_config(config_dir, qwen_path):
    write_config(config_dir, f'[model]\ndefault = "{qwen_path}"\n')
    options = chat_options(args("--no-history"))
    assert options.model == str(qwen_path) and options.preset == "qwen2.5" and options.history is False
    assert options.model_path == qwen_path


@pytest.mark.parametrize("text, line, message", [
    ("[sampling]\ntemprature = 0.5\n", 2, "unknown key sampling.temprature (did you mean sampling.temperature?)"),
    ("[sampling]\ntemperature = \"hot\"\n", 2, "sampling.temperature must be a number, not a string ('hot')"),
    ("[sampling]\ntop_k = 2.5\n", 2, "sampling.top_k must be an integer, not a float (2.5)"),
    ("[history]\nenabled = 1\n", 2, "history.enabled must be true or false, not an integer (1)"),
    ("[model]\ndirs = \"/models\"\n", 2, "model.dirs must be an array of strings, not a string ('/models')"),
    ("[model]\nbackend = \"gpu\"\n", 2, "model.backend must be one of 'auto', 'cpu', 'cuda'"),
    ("[sampling]\ntemperature = -1\n", 2, "sampling.temperature must be at least 0, not -1"),
    ("[sampler]\ntemperature = 1\n", 1, "unknown section [sampler] (did you mean [sampling]?)"),
    ("temperature = 1\n", 1, "unknown section [temperature]"),
    ("[chat\n", 1, "invalid TOML"),
])
def test_errors_name_the_file_the_line_the_key_and_the_expected_type(config_dir, text, line, message):
    path = write_config(config_dir, text)
    with pytest.raises(ConfigError) as info:
        load_settings(use_preset=False)
    assert str(info.value).startswith(f"{path}, line {line}: ")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_flag_values_are_checked_too():
    with pytest.raises(ConfigError, match="--temperature: sampling.temperature must be at least 0"):
        load_settings(args("--temperature", "-0.5"), use_preset=False)


def test_presets_match_the_real_models(smollm_path, qwen_path, gemma_path, llamacpp_models_dir):
    from app.models.preset_match import find_preset

    assert find_preset(str(smollm_path))[0].name == "smollm2"
    assert find_preset(str(qwen_path))[0].name == "qwen2.5"
    assert find_preset(str(gemma_path))[0].name == "gemma3"
    preset, path, note = find_preset(str(llamacpp_models_dir / "ggml-vocab-llama-bpe.gguf"))
    assert preset is None and note == "no model preset matches llama 'llama-bpe'"
    assert find_preset(str(ROOT / "no-such.gguf"))[2].startswith("no model preset: model not found")


def test_preset_phrases_match_whole_words():
    presets = load_presets([BUNDLED_DIR])
    assert {p.name for p in presets} >= {"smollm2", "qwen2.5", "llama3", "gemma3"}
    for name in ("Meta-Llama-3.1-8B-Instruct", "Llama 3.2 1B Instruct", "llama3"):
        assert match_preset(presets, "llama", [name]).name == "llama3"
    assert match_preset(presets, "llama", ["llama-30b"]) is None
    assert match_preset(presets, "llama", ["SmolLM2-360M-Instruct"]).name == "smollm2"
    assert match_preset(presets, "qwen3", ["Qwen3-0.6B"]).values["chat.thinking"] == "on"


def test_user_presets_replace_shipped_ones(config_dir, smollm_path):
    (config_dir / "models").mkdir(parents=True)
    (config_dir / "models" / "smollm2.toml").write_text(
        '[match]\narchitectures = ["llama"]\nnames = ["smollm2"]\n[sampling]\ntemperature = 0.9\n')
    settings = load_settings(args("--model", str(smollm_path)))
    assert settings.values["sampling.temperature"] == 0.9 and settings.values["chat.thinking"] == "auto"


def test_a_preset_may_not_set_everything(config_dir, smollm_path):
    (config_dir / "models").mkdir(parents=True)
    bad = config_dir / "models" / "smollm2.toml"
    bad.write_text('[match]\narchitectures = ["llama"]\n[history]\nenabled = false\n')
    with pytest.raises(ConfigError, match=f"{re.escape(str(bad))}, line 3: unknown section \\[history\\]"):
        load_settings(args("--model", str(smollm_path)))


def _tokchat(*argv: str, config_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TOKCHAT_CONFIG_DIR": str(config_dir)}
    return subprocess.run([sys.executable, "-m", "app", *argv], cwd=ROOT, env=env, capture_output=True, text=True)


def test_config_commands(config_dir, smollm_path):
    path = _tokchat("config", "path", config_dir=config_dir)
    assert path.stdout.strip() == str(config_dir / "config.toml")

    init = _tokchat("config", "init", config_dir=config_dir)
    assert init.returncode == 0, init.stderr
    written = tomllib.loads(user_config_path().read_text())
    assert written == {section: {} for section in read_toml(DEFAULTS_PATH)}  # all commented out
    again = _tokchat("config", "init", config_dir=config_dir)
    assert again.returncode == 2 and "exists already" in again.stderr

    user_config_path().write_text('[sampling]\nmax_tokens = 64\n')
    show = _tokchat("config", "show", "--model", str(smollm_path), "--seed", "3", config_dir=config_dir)
    assert show.returncode == 0, show.stderr
    lines = show.stdout.splitlines()
    assert any(re.fullmatch(rf"max_tokens = 64 +# {re.escape(str(user_config_path()))}", l) for l in lines)
    assert any(re.fullmatch(r"seed = 3 +# --seed", l) for l in lines)
    assert any(re.fullmatch(r"temperature = 0.2 +# preset smollm2", l) for l in lines)
    as_json = json.loads(_tokchat("config", "show", "--json", config_dir=config_dir).stdout)
    assert as_json["sampling.max_tokens"] == {"value": 64, "source": str(user_config_path())}

    user_config_path().write_text('[ui]\ntheme = 3\n')
    broken = _tokchat("config", "show", config_dir=config_dir)
    assert broken.returncode == 2
    assert broken.stderr == f"tokchat: {user_config_path()}, line 2: ui.theme must be a string, not an integer (3)\n"


def test_config_show_lists_per_model_memory_and_applies_it_to_the_model_shown(config_dir, smollm_path):
    """Issue 33, item 10: after /think budget 256, config.toml holds [models."…"] reasoning_budget = 256
    and the TUI applies it, but `config show` (with --model too) said -1 from default.toml and listed no
    [models] table."""
    from app.settings.model_memory import remember

    from backends.model_meta import read_model_meta

    name = read_model_meta(smollm_path).name
    remember(name, reasoning_budget=256)
    remember("Other Model", thinking=True)
    source = str(user_config_path())
    for argv in (["--model", str(smollm_path)], []):
        if not argv:  # the default model: the same one, named in config.toml
            user_config_path().write_text(f'[model]\ndefault = "{smollm_path}"\n' + user_config_path().read_text())
        show = _tokchat("config", "show", *argv, config_dir=config_dir)
        assert show.returncode == 0, show.stderr
        text = show.stdout
        assert re.search(rf'^reasoning_budget = 256 +# {re.escape(source)} \[models\."{re.escape(name)}"\]$',
                         text, re.M), text
        assert re.search(r'^thinking = "off" +# preset smollm2$', text, re.M)  # only the other model has one
        assert f'\n[models."{name}"]\nreasoning_budget = 256' in text
        assert re.search(rf'^\[models\."Other Model"\]\nthinking = "on" +# {re.escape(source)}$', text, re.M)
    as_json = json.loads(_tokchat("config", "show", "--json", "--model", str(smollm_path),
                                  config_dir=config_dir).stdout)
    assert as_json["chat.reasoning_budget"]["value"] == 256
    assert as_json[f'models."{name}".reasoning_budget'] == {"value": 256, "source": source}
    # a budget given for the chat itself wins, as in the TUI
    show = _tokchat("config", "show", "--model", str(smollm_path), "--reasoning-budget", "8", config_dir=config_dir)
    assert re.search(r"^reasoning_budget = 8 +# --reasoning-budget", show.stdout, re.M), show.stdout
