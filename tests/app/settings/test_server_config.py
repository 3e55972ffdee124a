"""``--server`` and friends: flags, ``[server]``, ``[servers.NAME]`` presets, TOKCHAT_API_KEY."""
from __future__ import annotations

import pytest

from app.cli import build_parser
from app.models.preset_match import chat_options
from app.settings.config import ConfigError


@pytest.fixture
def config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKCHAT_CONFIG_DIR", str(tmp_path))
    monkeypatch.delenv("TOKCHAT_API_KEY", raising=False)
    return tmp_path


def options(*argv):
    return chat_options(build_parser().parse_args(list(argv)))


def test_no_server_is_local(config_dir):
    assert options().server is None


def test_flags_make_remote_settings(config_dir):
    opts = options("--server", "https://gpu:8000", "--server-kind", "vllm", "--api-key", "k1",
                   "--trust-server-vocab")
    s = opts.server
    assert (s.url, s.kind, s.api_key, s.trust_server_vocab) == ("https://gpu:8000", "vllm", "k1", True)
    assert opts.model is None  # the tokenizer will come from the server


def test_api_key_from_the_environment_beats_the_config_but_not_the_flag(config_dir, monkeypatch):
    (config_dir / "config.toml").write_text('[server]\nurl = "http://a:1"\napi_key = "from-file"\n')
    assert options().server.api_key == "from-file"
    monkeypatch.setenv("TOKCHAT_API_KEY", "from-env")
    assert options().server.api_key == "from-env"
    assert options("--api-key", "from-flag").server.api_key == "from-flag"


def test_named_preset_with_its_tokenizer(config_dir, smollm_path):
    (config_dir / "config.toml").write_text(
        f'[servers.box]\nurl = "http://box:8080"\nkind = "llamacpp"\nidle_timeout = 5.0\nmodel = "{smollm_path}"\n')
    opts = options("--server", "box")
    assert (opts.server.url, opts.server.kind, opts.server.idle_timeout_s) == ("http://box:8080", "llamacpp", 5.0)
    assert opts.model == str(smollm_path)
    # a flag still wins over the preset
    assert options("--server", "box", "--server-kind", "vllm").server.kind == "vllm"


def test_unknown_preset_and_bad_preset_keys_are_one_line_errors(config_dir):
    with pytest.raises(ConfigError, match="not an http.*preset"):
        options("--server", "nowhere")
    (config_dir / "config.toml").write_text('[servers.box]\nurl = "http://x"\nport = 3\n')
    with pytest.raises(ConfigError, match="unknown key servers.box.port"):
        options()
    (config_dir / "config.toml").write_text('[servers.box]\nkind = "llamacpp"\n')
    with pytest.raises(ConfigError, match="needs a url"):
        options()
    (config_dir / "config.toml").write_text('[servers.box]\nurl = "http://x"\nkind = "ollama"\n')
    with pytest.raises(ConfigError, match="must be one of"):
        options()
