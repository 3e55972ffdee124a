"""Instant resume (issue 45): ``tokchat --resume`` with and without the engine's saved state, side by side.

Whole ``tokchat`` processes, as a user runs them, each with its own data, config,
cache and log folders under one temporary directory:

1. **turn 1**: ``tokchat -m MODEL --attach FILE --prompt ...`` (a file of about
   ``--ids`` prompt ids); the engine saves its state when the reply ends;
2. **resume, evaluated** (today without a state, ``--no-state``): ``--resume 1 --prompt
   "And in two words?"`` on a copy of the history: the whole conversation is evaluated;
3. **resume, loaded**: the same on another copy of the history, with the state:
   its longest saved prefix is loaded and only the new message evaluated.

Reported: each run's time to the first id (the ``--stats`` JSON's ``ttft_s``: from
the message sent to the first reply id) and whole process time, the ratio of the two
resumes' first ids, whether their replies are the same text (greedy), the state's
size per 1,000 ids, its load time (the stats' ``state`` note), and what saving cost
turn 1: the copy of the KV cache on the engine's thread (which the reply's end waits
for) and the write beside it (checksum, write, fsync, rename), both from the engine
log, and the copy as a share of the turn's wall time.

    .venv/bin/python bench/bench_resume.py [--model qwen2.5-coder-0.5b.gguf] [--ids 3300]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from assets import asset_path  # noqa: E402
from process_env import child_env  # noqa: E402

#: the attached file: tokchat's own sources, cut to about the asked number of ids (about 4.3 characters an id)
SOURCES = ("backends/llama_cpp.py", "backends/engine_client.py", "backends/state_cache.py")
QUESTION = "Summarise what this file does in three sentences."
FOLLOW_UP = "And in two words?"


def _file_of(ids: int, folder: Path) -> Path:
    text = "".join((ROOT / name).read_text() for name in SOURCES)
    path = folder / "attached.py"
    path.write_text(text[: int(ids * 3.6)])
    return path


def _run(env: dict[str, str], *args: str) -> tuple[float, str, dict]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "app", *args, "--temperature", "0", "--max-tokens", "16",
                           "--stats"], cwd=ROOT, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=3600)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"tokchat {' '.join(args[:4])}... failed ({done.returncode}):\n{done.stderr}")
    return wall, done.stdout, json.loads(done.stderr.strip().splitlines()[-1])


def _saves(env: dict[str, str]) -> list[tuple[int, float, float, float]]:
    """The engine log's "state: saved" lines: (ids, MiB, copy s, write s)."""
    log = Path(env["XDG_STATE_HOME"]) / "tokchat" / "log" / "engine.log"
    found = re.findall(r"state: saved (\d+) ids \((\d+) MiB\): copied in ([\d.]+) s, written in ([\d.]+) s",
                       log.read_text(errors="replace") if log.exists() else "")
    return [(int(n), float(m), float(c), float(w)) for n, m, c, w in found]


def _cpu() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        name = re.search(r"Model name:\s*(.+)", out)
        cpus = re.search(r"^CPU\(s\):\s*(\d+)", out, re.M)
        return f"{name.group(1).strip() if name else platform.processor()}, {cpus.group(1) if cpus else '?'} CPUs"
    except (OSError, subprocess.SubprocessError):
        return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b.gguf", help="a test asset's name")
    parser.add_argument("--ids", type=int, default=3300, help="about how many prompt ids turn 1 sends")
    parser.add_argument("--ctx", type=int, default=8192)
    args = parser.parse_args()
    model = ("-m", str(asset_path(args.model)), "--ctx", str(args.ctx))
    with tempfile.TemporaryDirectory(prefix="bench-resume-") as tmp:
        base = Path(tmp)
        env = child_env(base)
        attached = _file_of(args.ids, base)
        wall1, _, turn1 = _run(env, *model, "--attach", str(attached), "--prompt", QUESTION)
        for _ in range(50):  # the engine wrote its state before it ended (a bounded wait): read its log line
            if _saves(env):
                break
            time.sleep(0.1)
        saves = _saves(env)
        states = sorted(Path(env["XDG_CACHE_HOME"]).rglob("state/*/*.kv"))
        state_bytes = sum(p.stat().st_size for p in states)

        def copy_of_history(name: str) -> dict[str, str]:
            other = dict(env, TOKCHAT_DATA_DIR=str(base / name))
            shutil.copytree(env["TOKCHAT_DATA_DIR"], other["TOKCHAT_DATA_DIR"])
            return other

        cold_env, warm_env = copy_of_history("data-evaluated"), copy_of_history("data-loaded")
        wall_cold, reply_cold, cold = _run(cold_env, *model, "--resume", "1", "--prompt", FOLLOW_UP, "--no-state")
        wall_warm, reply_warm, warm = _run(warm_env, *model, "--resume", "1", "--prompt", FOLLOW_UP)

    load = re.match(r"loaded (\d+) ids from disk in ([\d.]+) s", warm["state"])
    saved_ids = saves[0][0] if saves else 0
    print(f"# bench_resume: {args.model}, n_ctx {args.ctx}, {os.cpu_count()} CPUs ({_cpu()}), "
          f"load average {os.getloadavg()[0]:.1f}")
    print()
    print("| run | prompt ids | evaluated | time to first id | whole process |")
    print("|---|---:|---:|---:|---:|")
    print(f"| turn 1 (file attached) | {turn1['prompt_tokens']:,} | {turn1['new_prompt_tokens']:,} | "
          f"{turn1['ttft_s']:.2f} s | {wall1:.1f} s |")
    print(f"| resume, evaluated (`--no-state`) | {cold['prompt_tokens']:,} | {cold['new_prompt_tokens']:,} | "
          f"{cold['ttft_s']:.2f} s | {wall_cold:.1f} s |")
    print(f"| resume, state loaded | {warm['prompt_tokens']:,} | {warm['new_prompt_tokens']:,} | "
          f"{warm['ttft_s']:.2f} s | {wall_warm:.1f} s |")
    print()
    ratio = cold["ttft_s"] / warm["ttft_s"] if warm["ttft_s"] > 0 else float("inf")
    print(f"- first id: **{ratio:.0f}x** sooner with the state ({cold['ttft_s']:.2f} s -> {warm['ttft_s']:.2f} s); "
          f"the two replies are {'the same text' if reply_cold == reply_warm else 'DIFFERENT'}")
    print(f"- state note: `state: {warm['state']}`")
    if load and saved_ids:
        print(f"- state: {saved_ids:,} ids in {state_bytes / 2**20:.1f} MiB on disk, "
              f"{state_bytes / saved_ids * 1000 / 2**20:.1f} MiB per 1,000 ids; loaded (read, checked, into "
              f"llama.cpp) in {float(load.group(2)):.2f} s")
    if saves:
        _, _, copy_s, write_s = saves[0]
        print(f"- saving after turn 1: the copy on the engine's thread {copy_s * 1000:.0f} ms "
              f"({copy_s / wall1 * 100:.2f}% of the turn's {wall1:.1f} s); the write beside it (sha256, write, "
              f"fsync, rename) {write_s * 1000:.0f} ms")
    else:
        print("- no state was saved by turn 1 (see the engine log)")


if __name__ == "__main__":
    main()
