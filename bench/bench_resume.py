"""Instant resume (issue 45): a stored conversation resumed with and without the engine's saved state, side by side.

1. **turn 1**, a whole ``tokchat`` process as a user runs it (its own data, config,
   cache and log folders under one temporary directory): ``tokchat -m MODEL --attach
   FILE --prompt ...`` with a file of about ``--ids`` prompt ids; its engine saves its
   state when the reply ends, and the process ends (a bounded wait for the write);
2. the conversation resumed twice in this process, as ``--resume 1 --prompt "And in two
   words?"`` does (:func:`app.history.resume.resume_into`), each on a fresh engine
   process whose model is loaded before the clock starts, each on its own copy of the
   history: **evaluated** (states off: today's path, the whole conversation evaluated)
   and **loaded** (its longest saved prefix loaded, only the new message evaluated).

Reported: each turn's time to the first id (TurnStats.ttft_s: from the message sent to
the first reply id), the ratio of the two resumes', whether their replies are the same
ids (greedy), the state's size per 1,000 ids, its load time (the stats' ``state``
note), and what saving cost turn 1: the copy of the KV cache on the engine's thread
(the one part on the reply's path) and the write beside it (sha256, write, fsync,
rename), both from the engine log, the copy also as a share of the turn's wall time.

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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from support.assets import asset_path  # noqa: E402
from support.process_env import child_env  # noqa: E402

#: the attached file: tokchat's own sources, cut to about the asked number of ids (about 4.1 characters an id in Qwen2.5)
SOURCES = ("backends/llama_cpp.py", "backends/engine_client.py", "backends/state_cache.py")
QUESTION = "Summarise what this file does in three sentences."
FOLLOW_UP = "And in two words?"


def _file_of(ids: int, folder: Path) -> Path:
    text = "".join((ROOT / name).read_text() for name in SOURCES)
    path = folder / "attached.py"
    path.write_text(text[: int(ids * 4.1)])
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


def _resume(model: Path, ctx: int, threads: int | None, data: Path, state_dir: Path | None) -> tuple[Any, tuple[int, ...]]:
    """Conversation 1 of the history in ``data`` resumed with the follow-up, on a fresh engine already loaded:
    the turn's stats and the reply's ids."""
    from app.chat.open import open_chat
    from app.history.resume import resume_into
    from app.settings.options import ChatOptions
    from backends.base import SamplingParams

    os.environ["TOKCHAT_DATA_DIR"] = str(data)
    chat = open_chat(ChatOptions(model=str(model), ctx=ctx, threads=threads, state_dir=state_dir,
                                 sampling=SamplingParams(temperature=0.0, max_tokens=16)))
    try:
        resume_into(chat.session, 1)
        done = [e for e in chat.session.send(FOLLOW_UP) if e.kind == "done"][-1]
        return done.stats, tuple(chat.session.messages[-1].reply_ids)
    finally:
        chat.backend.close()


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
    parser.add_argument("--threads", type=int, default=0, help="the engine's threads (0: llama.cpp's default)")
    args = parser.parse_args()
    model_path = asset_path(args.model)  # before the folders below replace XDG_CACHE_HOME, where the assets are
    model = ("-m", str(model_path), "--ctx", str(args.ctx), *(["--threads", str(args.threads)] if args.threads else []))
    with tempfile.TemporaryDirectory(prefix="bench-resume-") as tmp:
        base = Path(tmp)
        env = child_env(base)
        os.environ.update(env)  # the resumes below run here: the same folders as turn 1's process
        attached = _file_of(args.ids, base)
        wall1, _, turn1 = _run(env, *model, "--attach", str(attached), "--prompt", QUESTION)
        for _ in range(50):  # the engine wrote its state before it ended (a bounded wait): read its log line
            if _saves(env):
                break
            time.sleep(0.1)
        saves = _saves(env)
        states = sorted(Path(env["XDG_CACHE_HOME"]).rglob("state/*/*.kv"))
        state_bytes = sum(p.stat().st_size for p in states)

        resumed = {}
        for name, state_dir in (("evaluated", None), ("loaded", Path(env["XDG_CACHE_HOME"]) / "tokchat" / "state")):
            data = base / f"data-{name}"
            shutil.copytree(env["TOKCHAT_DATA_DIR"], data)
            resumed[name] = _resume(model_path, args.ctx, args.threads or None, data, state_dir)
    (cold, reply_cold), (warm, reply_warm) = resumed["evaluated"], resumed["loaded"]

    load = re.match(r"loaded (\d+) ids from disk in ([\d.]+) s", warm.state)
    saved_ids = saves[0][0] if saves else 0
    print(f"# bench_resume: {args.model}, n_ctx {args.ctx}, threads {args.threads or 'default'}, {_cpu()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    print()
    print("| turn | prompt ids | evaluated | time to first id | reply tok/s |")
    print("|---|---:|---:|---:|---:|")
    print(f"| turn 1, a `tokchat --attach` process ({wall1:.0f} s in all) | {turn1['prompt_tokens']:,} | "
          f"{turn1['new_prompt_tokens']:,} | {turn1['ttft_s']:.2f} s | {turn1['tokens_per_s']:.2f} |")
    for label, stats in (("resumed, evaluated (states off, as before)", cold), ("resumed, state loaded", warm)):
        print(f"| {label} | {stats.prompt_tokens:,} | {stats.new_prompt_tokens:,} | {stats.ttft_s:.2f} s | "
              f"{stats.tokens_per_s:.2f} |")
    print()
    ratio = cold.ttft_s / warm.ttft_s if warm.ttft_s > 0 else float("inf")
    # the evaluated resume computes the first reply's ids in one batch, the engine that generated them one at a
    # time: llama.cpp's kernels may differ in the last bits between the two, so greedy replies may part; the state
    # itself is what an engine that never exited holds (tests/backends/test_state_cache.py)
    same = "the same ids" if reply_cold == reply_warm else "different ids (see the comment above this line)"
    print(f"- first id: **{ratio:.0f}x** sooner with the state ({cold.ttft_s:.2f} s -> {warm.ttft_s:.2f} s); "
          f"the replies of the two resumes: {same}")
    print(f"- state note: `state: {warm.state}`")
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
