"""Whole ``tokchat`` processes for the headless tests: run, read the history they stored."""
from __future__ import annotations
import json
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[3]


def tokchat(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """One real tokchat process; the timeout only guards against a hang."""
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          input=stdin, stdin=subprocess.DEVNULL if stdin is None else None, timeout=600)


def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "history.sqlite3"


def exported(env: dict[str, str], conv_id: int) -> dict:
    done = tokchat(env, "export", str(conv_id), "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
