"""``python3 dev.py test`` checks the types (mypy, ``[tool.mypy]`` in pyproject.toml) before pytest runs.

Issue 48, item 4.  The first two tests run the real ``dev.py`` in its own
process, with a virtual environment whose ``python`` is a stand-in that
notes each command and answers for mypy as told (the installs and the
engine build are what ``dev.py`` does on a fresh machine: here they are
already done, and their stamps say so).  The others run the real mypy with
the project's settings on a few lines that break a seam, to show what the
check holds: a reply's facts are read off its typed stats, under any name
and never through ``getattr`` (typecheck/no_probes.py), and a tokenizer is
used through the :class:`tokenizer.protocol.Tokenizer` Protocol.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: the venv's python as dev.py calls it: notes its arguments; `-m mypy` answers $FAKE_MYPY_EXIT
STAND_IN = """#!/bin/sh
echo "$*" >> "$FAKE_PY_LOG"
case "$*" in
  *"-m mypy"*) echo "app/example.py:1: error: a stand-in type error  [misc]"; exit "$FAKE_MYPY_EXIT";;
esac
exit 0
"""


def _ready_venv(tmp_path: Path) -> Path:
    """A venv dev.py takes as installed and built for this machine (its stamps), whose python is the stand-in."""
    sys.path.insert(0, str(ROOT))
    try:
        import dev
    finally:
        sys.path.remove(str(ROOT))
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(STAND_IN)
    python.chmod(0o755)
    (venv / ".tokchat-installed-test").write_text(dev._stamp("test"))
    (venv / ".tokchat-engine").write_text(dev._engine_key())
    return venv


def _dev_test(tmp_path: Path, mypy_exit: int) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    venv, log = _ready_venv(tmp_path), tmp_path / "calls.log"
    env = dict(os.environ, TOKCHAT_VENV=str(venv), FAKE_PY_LOG=str(log), FAKE_MYPY_EXIT=str(mypy_exit))
    done = subprocess.run([sys.executable, str(ROOT / "dev.py"), "test", "-k", "nothing"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    return done, log.read_text().splitlines()


@pytest.mark.skipif(os.name == "nt", reason="the stand-in python is a POSIX shell script")
def test_dev_test_stops_on_a_type_error_before_pytest(tmp_path):
    done, calls = _dev_test(tmp_path, mypy_exit=1)
    assert done.returncode == 1, done.stderr
    assert "a stand-in type error" in done.stdout
    assert "the type check failed" in done.stderr
    assert any(c == "-m mypy" for c in calls), calls
    assert not any("pytest" in c for c in calls), calls


@pytest.mark.skipif(os.name == "nt", reason="the stand-in python is a POSIX shell script")
def test_dev_test_runs_pytest_after_the_types_pass(tmp_path):
    done, calls = _dev_test(tmp_path, mypy_exit=0)
    assert done.returncode == 0, done.stderr
    assert "types checked" in done.stdout
    order = [c for c in calls if c in ("-m mypy", "-m pytest -k nothing")]
    assert order == ["-m mypy", "-m pytest -k nothing"], calls


#: a module that breaks two seams; the real mypy checks it once (a cold run: a few seconds of CPU)
SEAMS = """
from backends.base import Generation
from tokenizer import load_tokenizer
from tokenizer.protocol import Tokenizer


def evaluated(generation: Generation) -> int:
    return generation.stats.prompt_ids_evaluated_last_time


def probed(generation: Generation) -> object:
    return getattr(generation.stats, "prompt_evaluated", None)


def first_id(tokenizer: Tokenizer) -> int:
    return tokenizer.encode_text("hi")[0]


def count(path: str) -> int:
    return len(load_tokenizer(path).encode("hi")) + first_id(load_tokenizer(path))
"""


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory) -> list[str]:
    """The real mypy, with the project's settings, on :data:`SEAMS` as one more module: the errors in it."""
    folder = tmp_path_factory.mktemp("seams")
    module = folder / "seam_example.py"
    module.write_text(SEAMS)
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                           "--cache-dir", str(folder / "mypy-cache"), "--no-error-summary", str(module)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    return [line.split(": error: ")[1] for line in done.stdout.splitlines()
            if line.startswith(str(module)) and ": error: " in line]


def test_the_type_check_rejects_a_fact_a_reply_does_not_have(mypy_errors):
    """What the name-list guard used to catch (and missed under other names): any name GenerationStats lacks."""
    assert '"GenerationStats" has no attribute "prompt_ids_evaluated_last_time"  [attr-defined]' in mypy_errors


def test_the_type_check_rejects_a_probe_of_a_tokchat_value(mypy_errors):
    """``getattr``/``hasattr`` hides a name from the checker: on tokchat's own types it is an error (any name)."""
    assert ('probe of "GenerationStats.prompt_evaluated": read the attribute (declared on the type), so the type '
            "checker checks it  [probe]") in mypy_errors


def test_the_type_check_holds_a_tokenizer_to_the_protocol(mypy_errors):
    """A misnamed method is an error; the loaders' tokenizer passed where the Protocol is asked for is not."""
    assert [e for e in mypy_errors if "Tokenizer" in e] == [
        '"Tokenizer" has no attribute "encode_text"  [attr-defined]']
    assert len(mypy_errors) == 3, mypy_errors
