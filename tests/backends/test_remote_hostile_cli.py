"""Real tokchat processes against :class:`hostile_server.HostileServer` (issue 34, item 4 and its harness).

The issue's reproduction first: a server that answers ``/health`` and then streams an
endless ``/props`` took tokchat to 6 GB and a ``MemoryError`` traceback.  Each process
here runs ``python -m app`` with its own XDG folders and config under ``tmp_path``, an
address-space limit as ``ulimit -v`` set it in the issue (so an unbounded read dies
instead of taking the machine), and its peak memory read from the kernel (``wait4``).
Then what the history keeps: a connect that failed stores nothing, a reply cut by the
server stores what was shown, nothing more.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.process_env import child_env
from support.hostile_server import HostileServer
from support.remote_servers import LlamaServer

from app.history.store import ChatStore

ROOT = Path(__file__).resolve().parents[2]
#: a guard against a hang, not a measurement
GUARD_S = 120.0
#: the address space a tokchat process gets (the issue's ``ulimit -v``): an unbounded read fails within it
ADDRESS_SPACE = 3 << 30
#: the most resident memory a remote chat may reach; an unbounded read reaches the server's 1 GiB
RSS_BOUND = 512 << 20

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def upstream(smollm_path: Path, tmp_path_factory: pytest.TempPathFactory):
    server = LlamaServer(smollm_path, tmp_path_factory.mktemp("upstream")).start()
    yield server
    server.stop()




@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    peak_rss: int  # bytes, the kernel's count


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _peak_resident(pid: int, stop: threading.Event, peak: list[int]) -> None:
    """Sample the process's own peak resident size (``VmHWM``, counted from its exec) until ``stop``.

    Not ``ru_maxrss``: between fork and exec the child is a copy of this pytest process, and
    the kernel counts that image (over a GiB in a whole-suite run) as the child's peak.
    """
    while not stop.is_set():
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak[0] = max(peak[0], int(line.split()[1]) * 1024)
        except (OSError, ValueError):
            return  # ended: the last sample stands
        stop.wait(0.01)


def tokchat(env: dict[str, str], tmp_path: Path, *args: str) -> Run:
    """One real tokchat process; killed after :data:`GUARD_S` (then the test fails on its status)."""
    out_path, err_path = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with out_path.open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "app", *args], cwd=ROOT, env=env, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, preexec_fn=_limit_memory)
    guard = threading.Timer(GUARD_S, proc.kill)
    guard.start()
    stop, peak = threading.Event(), [0]
    sampler = threading.Thread(target=_peak_resident, args=(proc.pid, stop, peak), daemon=True)
    sampler.start()
    try:
        _pid, status, _usage = os.wait4(proc.pid, 0)
    finally:
        guard.cancel()
        stop.set()
        sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Run(proc.returncode, out_path.read_text(), err_path.read_text(), peak[0])


def stored_conversations(tmp_path: Path) -> list:
    db = tmp_path / "data" / "history.sqlite3"
    if not db.exists():
        return []
    with ChatStore(db) as store:
        return store.list_conversations()


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    return lines[0]


def test_an_endless_props_fails_in_one_line_without_eating_memory(upstream, smollm_path, tmp_path):
    """The issue's reproduction, with ``--server-kind llamacpp`` and ``-m SmolLM2`` as it was run."""
    with HostileServer(upstream.url, {"/props": "endless"}, limit_bytes=1 << 30) as hostile:
        run = tokchat(child_env(tmp_path), tmp_path, "--server", hostile.url, "--server-kind", "llamacpp",
                      "-m", str(smollm_path), "--prompt", "hi", "--max-tokens", "4")
    assert run.returncode == 2 and run.stdout == "", (run.returncode, run.stderr[-3000:])
    line = one_line(run.stderr)
    assert "/props" in line and "16 MiB" in line, line
    assert run.peak_rss < RSS_BOUND, f"{run.peak_rss >> 20} MiB resident"
    assert stored_conversations(tmp_path) == []


@pytest.mark.parametrize(("path", "fault"), [("/props", "endless"), ("/props", "slow_body"),
                                             ("/tokenize", "slow_headers"), ("/v1/models", "huge")])
def test_doctor_server_fails_in_one_line_naming_the_endpoint(path, fault, upstream, smollm_path, tmp_path):
    with HostileServer(upstream.url, {path: fault}, limit_bytes=1 << 30) as hostile:
        run = tokchat(child_env(tmp_path), tmp_path, "doctor", "--server", hostile.url, "-m", str(smollm_path))
    assert run.returncode not in (0, -9), (run.returncode, run.stderr[-3000:])
    line = one_line(run.stderr)
    assert path in line, line
    assert run.peak_rss < RSS_BOUND, f"{run.peak_rss >> 20} MiB resident"


@pytest.mark.parametrize("fault", ["cut_mid_event", "ids_outside_vocab", "endless_line", "empty_events",
                                   "status_429", "slow_headers"])
def test_a_reply_the_server_breaks_stores_only_what_was_shown(fault, upstream, smollm_path, tmp_path):
    with HostileServer(upstream.url, {"/completion": fault}, limit_bytes=1 << 30) as hostile:
        env = child_env(tmp_path)
        # a reply whose headers never end waits for the first token: the default (300 s) is longer than this
        # test's hang guard, and what is tested here is what gets stored, not the default's length
        config = Path(env["TOKCHAT_CONFIG_DIR"]) / "config.toml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text("[server]\nfirst_token_timeout = 15.0\nidle_timeout = 15.0\n")
        run = tokchat(env, tmp_path, "--server", hostile.url, "-m", str(smollm_path), "--prompt", "hi",
                      "--max-tokens", "8")
    assert run.returncode == 2, (run.returncode, run.stderr[-3000:])
    assert "Traceback" not in run.stderr and run.peak_rss < RSS_BOUND, run.stderr[-3000:]
    errors = [line for line in run.stderr.splitlines() if line.startswith(f"tokchat: the server at {hostile.url}")
              or line.startswith(f"tokchat: the connection to {hostile.url}")]
    assert len(errors) == 1, run.stderr
    shown = run.stdout.strip()
    conversations = stored_conversations(tmp_path)
    if not conversations:
        assert shown == ""  # nothing shown, nothing stored
        return
    done = subprocess.run([sys.executable, "-m", "app", "export", "1", "--format", "json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=GUARD_S, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    messages = json.loads(done.stdout)["messages"]
    replies = [m for m in messages if m["role"] == "assistant"]
    # the user's message, and one reply marked as failed holding exactly what was shown: no invented text
    assert [m["content"] for m in messages if m["role"] == "user"] == ["hi"]
    assert [(r["content"].strip(), r["finish_reason"]) for r in replies] == [(shown, "error")], replies
