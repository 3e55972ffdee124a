"""OpenVINO's usage telemetry never runs in tokchat: no network at run time, no forked process left behind.

``openvino.tools.ovc`` sends a Google Analytics event when it is imported, from a
``multiprocessing`` process; in the engine host that fork hung for good (it inherits
the stdin lock the host's reader thread holds) and held the engine's pipe open, so a
chat that tried OpenVINO first waited forever.  Checked in a fresh interpreter, the
way the engine host imports OpenVINO, with process creation made to fail loudly.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import multiprocessing, sys
def refuse(self):
    raise AssertionError("OpenVINO started a process (telemetry)")
multiprocessing.Process.start = refuse
from backends.openvino import block_telemetry
block_telemetry()
import openvino.tools.ovc as ovc
import openvino.tools.ovc.telemetry_utils as utils
print(utils.tm.__name__)
"""


def test_importing_openvino_tools_after_the_block_uses_its_no_op_stub():
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "openvino.tools.ovc.telemetry_stub"


def test_without_the_block_the_real_telemetry_is_in_use():
    """The premise: without the block OpenVINO uses its real telemetry (so the test above means something)."""
    script = SCRIPT.replace("block_telemetry()\n", "")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "openvino_telemetry", done.stderr[-2000:]
