"""Settings that meant different things by path (issue 34, items 5, 7 and 8), through real tokchat processes.

* item 5: every number has an upper bound, so a huge value is one line naming the setting, not an
  OverflowError traceback (``connect_timeout = 1e308``) nor a value C wraps (``--ctx 4294967808``);
* item 7: one list of template names (:data:`templates.names.NAMES`) for ``--template``,
  ``chat.template`` and the resolver: ``chatml-think`` is accepted everywhere;
* item 8: a ``[servers.NAME]`` entry with an empty url is refused, not a quiet local chat.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.process_env import child_env

from app.settings.config import SCHEMA
from templates.names import NAMES
from templates.resolve import NAMES as RESOLVER_NAMES

ROOT = Path(__file__).resolve().parents[3]




def tokchat(tmp_path: Path, *args: str, config: str | None = None) -> subprocess.CompletedProcess:
    env = child_env(tmp_path)
    if config is not None:
        Path(env["TOKCHAT_CONFIG_DIR"]).mkdir(parents=True, exist_ok=True)
        (Path(env["TOKCHAT_CONFIG_DIR"]) / "config.toml").write_text(config, encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=600)


def one_line_error(done: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit 2 with one ``tokchat:`` line that says each of ``needles``, and no traceback."""
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


# -- item 5: every number has an upper bound --------------------------------------------------------


def test_every_number_in_the_schema_has_an_upper_bound():
    unbounded = [key for key, setting in SCHEMA.items()
                 if setting.kind in ("integer", "number") and setting.maximum is None]
    assert unbounded == []


def test_a_huge_timeout_is_one_line_not_an_overflow(tmp_path, smollm_path):
    done = tokchat(tmp_path, "--server", "http://127.0.0.1:9", "-m", str(smollm_path), "--prompt", "hi",
                   config="[server]\nconnect_timeout = 1e308\n")
    one_line_error(done, "server.connect_timeout must be at most 86400")


def test_a_context_past_32_bits_is_refused_not_wrapped(tmp_path, smollm_path):
    # 4294967808 is 2**32 + 512: llama.cpp's 32-bit n_ctx made it a context of 512 without a word
    done = tokchat(tmp_path, "-m", str(smollm_path), "--ctx", "4294967808", "--prompt", "hi", "--max-tokens", "2")
    one_line_error(done, "--ctx", "model.context_size must be at most 16777216")


@pytest.mark.parametrize("config, needle", [
    ("[model]\nthreads = 100000\n", "model.threads must be at most 512"),
    ("[tools]\ncall_timeout_s = 1e300\n", "tools.call_timeout_s must be at most 86400"),
    ("[sampling]\nmax_tokens = 9223372036854775807\n", "sampling.max_tokens must be at most 16777216"),
])
def test_a_huge_number_in_the_config_names_file_and_key(tmp_path, config, needle):
    done = tokchat(tmp_path, "config", "show", config=config)
    one_line_error(done, "config.toml", needle)


@pytest.mark.parametrize("args, needle", [
    (("--threads", "100000", "--prompt", "hi"), "model.threads must be at most 512"),
    (("--reasoning-budget", "99999999999", "--prompt", "hi"), "chat.reasoning_budget must be at most 16777216"),
])
def test_a_huge_number_as_a_flag_is_one_line(tmp_path, smollm_path, args, needle):
    one_line_error(tokchat(tmp_path, "-m", str(smollm_path), *args), needle)


@pytest.mark.parametrize("args", [("--resume", "99999999999999999999", "--prompt", "hi"),
                                  ("export", "99999999999999999999")], ids=["resume", "export"])
def test_a_conversation_id_past_sqlite_is_a_usage_error_not_an_overflow(tmp_path, smollm_path, args):
    done = tokchat(tmp_path, "-m", str(smollm_path), *args) if args[0] == "--resume" else tokchat(tmp_path, *args)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "no conversation 99999999999999999999: ids go from 1 to 9223372036854775807" in done.stderr


# -- item 7: one list of template names -------------------------------------------------------------


def test_one_list_of_template_names_for_flag_schema_and_resolver(tmp_path):
    assert NAMES is RESOLVER_NAMES and "chatml-think" in NAMES
    assert SCHEMA["chat.template"].choices == NAMES
    help_text = tokchat(tmp_path, "--help").stdout
    assert "{" + ",".join(NAMES) + "}" in help_text.replace("\n", "").replace(" ", "")


def test_chatml_think_is_accepted_as_flag_and_in_the_config(tmp_path, smollm_path):
    done = tokchat(tmp_path, "-m", str(smollm_path), "--template", "chatml-think", "--prompt", "hi",
                   "--max-tokens", "2", "--temperature", "0", "--stats")
    assert done.returncode == 0, done.stderr
    assert '"template": "chatml-think"' in done.stderr.strip().splitlines()[-1]
    shown = tokchat(tmp_path, "config", "show", config='[chat]\ntemplate = "chatml-think"\n')
    assert shown.returncode == 0, shown.stderr
    assert any(line.startswith('template = "chatml-think"') for line in shown.stdout.splitlines()), shown.stdout


# -- item 8: a server entry with an empty url -------------------------------------------------------


def test_a_server_entry_with_an_empty_url_is_refused_not_local(tmp_path, smollm_path):
    done = tokchat(tmp_path, "--server", "gpu", "-m", str(smollm_path), "--prompt", "hi", "--max-tokens", "2",
                   config='[servers.gpu]\nurl = ""\n')
    one_line_error(done, "servers.gpu.url is empty")
    assert not (tmp_path / "data" / "history.sqlite3").exists()  # nothing was answered, nothing stored


def test_an_empty_server_flag_is_refused_not_local(tmp_path, smollm_path):
    done = tokchat(tmp_path, "--server", "", "-m", str(smollm_path), "--prompt", "hi", "--max-tokens", "2")
    one_line_error(done, "--server is empty")
