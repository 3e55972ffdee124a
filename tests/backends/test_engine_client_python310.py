"""The engine's process starts on Python 3.10 too (issue 34, item 12), in the same process group layout.

pyproject allows Python >= 3.10, and Popen's ``process_group`` keyword is 3.11's: every local chat
failed on 3.10.13 with "unexpected keyword argument 'process_group'".  This starts the real engine
child (:class:`backends.engine_client._Child`) from a real Python 3.10 interpreter, when this machine has
one, and checks what tests/backends/test_engine_process.py checks on the suite's own Python: the
child leads a process group of its own and stays in the caller's session.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: run by Python 3.10: start the engine child, report its group and session, stop it
PROBE = textwrap.dedent("""
    import json, os, sys, tempfile
    from pathlib import Path
    from backends.engine_client import _Child

    child = _Child(Path(tempfile.mkdtemp()) / "engine.log")
    pid = child.proc.pid
    # a child that has already exited is a zombie until stop() reaps it: its group and session are still there
    facts = {"version": list(sys.version_info[:2]), "pid": pid, "pgid": os.getpgid(pid),
             "sid": os.getsid(pid), "our_pgid": os.getpgid(0), "our_sid": os.getsid(0)}
    child.stop(timeout=30)
    print(json.dumps(facts))
""")


def python310() -> str | None:
    """A Python 3.10 interpreter that runs here (a pyenv shim that is not active does not count)."""
    candidates = [shutil.which("python3.10"), "/usr/bin/python3.10", "/usr/local/bin/python3.10",
                  *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.10*/bin/python3.10")))]
    for candidate in filter(None, candidates):
        try:
            done = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 10))"],
                                  capture_output=True, text=True, timeout=60)
        except OSError:
            continue
        if done.returncode == 0 and done.stdout.strip() == "True":
            return candidate
    return None


def test_the_engine_child_starts_on_python_310_in_its_own_group_and_our_session():
    interpreter = python310()
    if interpreter is None:
        pytest.skip("no Python 3.10 interpreter on this machine")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([interpreter, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr  # before: TypeError: ... unexpected keyword argument 'process_group'
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["version"] == [3, 10]
    assert facts["pgid"] == facts["pid"] != facts["our_pgid"]  # a group of its own: Ctrl-C reaches the chat only
    assert facts["sid"] == facts["our_sid"]  # the chat's session (and so its scheduling autogroup)
