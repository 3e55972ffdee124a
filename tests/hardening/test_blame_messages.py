"""Issue 26, item 9: error messages that name what is really wrong.

Real ``python -m app`` processes on the real SmolLM2 GGUF (llama.cpp in its engine
process), and real files cut short.  The remote-side messages (TLS, ports, the context
note) are in ``tests/backends/test_remote_hardening.py``.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tokenizer.gguf_extents import tensor_extents, truncation
from backends.model_meta import kv_cache_bytes, read_model_meta
from tokenizer.gguf import read_gguf


def _tokchat(env: dict, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300, stdin=subprocess.DEVNULL)


def _one_line(result: subprocess.CompletedProcess) -> str:
    """The error: the last line on stderr (notices about the backend may come before it)."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("tokchat: ")
    return line


@pytest.fixture(scope="module")
def cut_gguf(smollm_path, tmp_path_factory) -> Path:
    """SmolLM2 cut at 50 MB, as an interrupted download leaves it."""
    path = tmp_path_factory.mktemp("cut") / "smollm2-cut.gguf"
    with open(smollm_path, "rb") as src:
        path.write_bytes(src.read(50_000_000))
    return path


def test_the_tensor_extents_of_every_real_model_end_at_its_last_byte(smollm_path, qwen_path, gemma_path):
    """The oracle for the block-size table: whole files end exactly where their last tensor does."""
    for path in (smollm_path, qwen_path, gemma_path):
        gguf = read_gguf(path, keys={"general.alignment"})
        extents, size = tensor_extents(path, gguf)
        assert len(extents) == gguf.tensor_count > 0
        assert all(t.end is not None for t in extents)
        assert max(t.end for t in extents) == size
        assert truncation(path, gguf) is None


def test_info_says_a_gguf_is_cut_short(cut_gguf, env, tmp_path):
    result = _tokchat(env, tmp_path, "info", str(cut_gguf))
    assert result.returncode == 2
    assert "tensors         272, CUT SHORT" in result.stdout
    assert result.stderr.strip() == (
        "tokchat: smollm2-cut.gguf is cut short: it has 50,000,000 bytes but its tensors need 98,362,432 "
        "(198 of 272 tensors lie past the end, from 'blk.16.ffn_down.weight'); download it again")
    whole = _tokchat(env, tmp_path, "info", str(cut_gguf.parent.parent.parent / "smollm2-whole.gguf"))
    assert whole.returncode == 2 and "cut short" not in whole.stderr  # a missing file stays its own error


def test_a_chat_on_a_cut_gguf_names_the_cut_not_only_the_engine(cut_gguf, env, tmp_path):
    line = _one_line(_tokchat(env, tmp_path, "-m", str(cut_gguf), "--prompt", "Hi", "--no-history"))
    assert "smollm2-cut.gguf is cut short: it has 50,000,000 bytes but its tensors need 98,362,432" in line
    assert "download it again" in line


def test_a_huge_ctx_names_the_kv_cache_and_ctx(smollm_path, env, tmp_path):
    need = kv_cache_bytes(read_model_meta(smollm_path), 10_000_000)
    assert need == 10_000_000 * 30 * 3 * (64 + 64) * 2  # 30 layers, 3 KV heads of 64: 230.4 GB
    line = _one_line(_tokchat(env, tmp_path, "-m", str(smollm_path), "--prompt", "Hi", "--ctx", "10000000",
                              "--no-history"))
    assert "--ctx 10000000 needs a KV cache of about 230.4 GB for smollm2.gguf" in line
    assert "lower --ctx" in line


def test_a_prompt_that_fits_but_leaves_no_room_for_the_reply_names_max_tokens(smollm_path, env, tmp_path):
    result = _tokchat(env, tmp_path, "-m", str(smollm_path), "--prompt", "Hi", "--ctx", "40", "--max-tokens", "10",
                      "--no-history", "--temperature", "0")
    line = _one_line(result)
    assert "message too long: the prompt would be 31 tokens, leaving 9 of the context's 40 for a reply that " \
           "needs room for 10 (--max-tokens 10); lower --max-tokens" in line


def test_rm_of_a_malformed_reference_says_what_pull_says(env, tmp_path):
    rm = _tokchat(env, tmp_path, "rm", "hf:", "--yes")
    pull = _tokchat(env, tmp_path, "pull", "hf:")
    assert rm.returncode == pull.returncode == 2
    assert rm.stderr == pull.stderr
    assert "expected hf:ORG/REPO/FILE.gguf" in rm.stderr and "not in the" not in rm.stderr


def test_headless_attach_errors_give_command_line_hints(smollm_path, env, tmp_path):
    missing = _tokchat(env, tmp_path, "-m", str(smollm_path), "--prompt", "Hi", "--attach", "nope.txt",
                       "--no-history")
    assert missing.returncode == 2
    assert "nope.txt: no such file; check the path" in missing.stderr
    assert "Tab" not in missing.stderr and "@" not in missing.stderr
    folder = _tokchat(env, tmp_path, "-m", str(smollm_path), "--prompt", "Hi", "--attach", str(tmp_path),
                      "--no-history")
    assert folder.returncode == 2
    assert "is a directory: --attach takes files (repeat it for several)" in folder.stderr
    assert "/attach" not in folder.stderr
