"""Start-up and footprint: tokchat against the engine alone, as whole processes.

Every figure comes from a fresh process, so imports, file reads and the
engine's own load are all counted, as a user would feel them:

* **headless answer**: ``tokchat --prompt hi --max-tokens 16 --temperature 0``
  on SmolLM2 against a 5-line llama-cpp-python script doing the same
  generation (same model, same n_ctx and threads, greedy, 16 tokens);
* **peak memory** of those two runs;
* **tokenize**: ``tokchat tokenize --model qwen.gguf hi`` against llama.cpp
  loading the same file's vocabulary alone (``vocab_only=True``);
* **tokenizer load** (in one fresh process): Qwen's 151,936-token vocabulary
  from the GGUF to a tokenizer that has encoded its first text (merge table,
  pre-tokenizer tables and all), beside llama.cpp's ``vocab_only`` load;
* **TUI** (in tmux, ``capture-pane`` polled every 20 ms): first paint (the
  header line is on screen) beside a bare Textual app with one ``Static``
  (the floor any Textual app pays), and model ready (the header names the
  engine) beside the engine's own load as a whole process (import +
  ``Llama(...)``).

How each whole process is measured: a tiny wrapper process runs the command
once with ``time.perf_counter`` around ``subprocess.run`` and reports
``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss``, so each peak belongs to
exactly one run.  tokchat and its peer alternate (the order flips every
round) after one unrecorded warm-up each; the tables show medians.  History,
settings and tokchat's table cache go to a temporary directory (the warm-up
fills the cache, as any earlier run on a user's machine would).  Python may
write its bytecode cache, as it does for a user: this machine sets
``PYTHONDONTWRITEBYTECODE=1``, which would recompile tokchat's modules in
every run while the engine's, installed by pip, come precompiled.

    .venv/bin/python bench/bench_startup.py [--rounds 5] [--only headless,tokenize,load,tui]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from support.assets import asset_path  # noqa: E402

#: runs one command and prints its wall time and peak memory (KiB on Linux) as JSON
WRAPPER = r"""
import json, resource, subprocess, sys, time
t = time.perf_counter()
done = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
wall = time.perf_counter() - t
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
peak, cpu = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
print(json.dumps({"wall": wall, "peak_kib": peak, "cpu": cpu, "rc": done.returncode,
                  "stdout": done.stdout.decode("utf-8", "replace"),
                  "stderr": done.stderr.decode("utf-8", "replace")[-2000:]}))
"""

#: the same generation as `tokchat --prompt hi --max-tokens 16 --temperature 0`, with the engine alone
LLAMA_GENERATE = """import sys
from llama_cpp import Llama
n_ctx, threads = int(sys.argv[2]), int(sys.argv[3])
llm = Llama(model_path=sys.argv[1], n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, verbose=False)
out = llm.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=16, temperature=0)
print(out["choices"][0]["message"]["content"])
"""

#: llama.cpp's tokenizer alone: load the vocabulary only, tokenize "hi"
LLAMA_TOKENIZE = """import sys
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], vocab_only=True, verbose=False)
print(llm.tokenize(b"hi", add_bos=False, special=False))
"""

#: the engine's own model load, as a whole process (what "model ready" is compared with)
LLAMA_LOAD = """import sys
from llama_cpp import Llama
n_ctx, threads = int(sys.argv[2]), int(sys.argv[3])
Llama(model_path=sys.argv[1], n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, verbose=False)
"""

#: the floor for a first paint: a bare Textual app with one line of text (what tokchat's TUI is built on)
TEXTUAL_MINIMAL = """from textual.app import App
from textual.widgets import Static
class Minimal(App):
    def compose(self):
        yield Static("tokchat · a bare Textual app")
Minimal().run()
"""

#: in one fresh process: import, load, first encode of our tokenizer; then llama.cpp's vocab_only load
TOKENIZER_LOAD = """import json, sys, time
t0 = time.perf_counter()
from tokenizer import load_tokenizer
t1, c1 = time.perf_counter(), time.process_time()
tok = load_tokenizer(sys.argv[1])
t2 = time.perf_counter()
ids = tok.encode("hi")
t3, c3 = time.perf_counter(), time.process_time()
from llama_cpp import Llama
t4, c4 = time.perf_counter(), time.process_time()
llm = Llama(model_path=sys.argv[1], vocab_only=True, verbose=False)
t5, c5 = time.perf_counter(), time.process_time()
assert ids == llm.tokenize(b"hi", add_bos=False, special=False), "ids differ from llama.cpp"
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "first_encode": t3 - t2, "ready": t3 - t1,
                  "ready_cpu": c3 - c1, "llama_vocab_only": t5 - t4, "llama_cpu": c5 - c4}))
"""


def measure(cmd: list[str], env: dict[str, str]) -> dict:
    """One fresh run of ``cmd`` through the wrapper: wall seconds, peak KiB, exit status, output."""
    out = subprocess.run([sys.executable, "-c", WRAPPER, *cmd], capture_output=True, text=True,
                         env=env, cwd=ROOT, check=True)
    result = json.loads(out.stdout)
    if result["rc"] != 0:
        raise SystemExit(f"{' '.join(cmd)} exited with {result['rc']}:\n{result['stderr']}")
    return result


def alternate(a: list[str], b: list[str], rounds: int, env: dict[str, str]) -> tuple[list[dict], list[dict]]:
    """``rounds`` runs of each command, alternating (order flipped every round) after one warm-up each."""
    measure(a, env)
    measure(b, env)
    ra, rb = [], []
    for i in range(rounds):
        if i % 2 == 0:
            ra.append(measure(a, env))
            rb.append(measure(b, env))
        else:
            rb.append(measure(b, env))
            ra.append(measure(a, env))
    return ra, rb


def med(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def engine_settings(model: Path) -> tuple[int, int]:
    """The n_ctx and thread count tokchat's llama.cpp backend picks for ``model`` by default."""
    from backends.llama_cpp import default_threads
    from backends.model_meta import read_model_meta

    return read_model_meta(model).default_ctx(), default_threads()


def bench_headless(rounds: int, env: dict[str, str]) -> list[str]:
    model = asset_path("smollm2.gguf")
    n_ctx, threads = engine_settings(model)
    ours = [sys.executable, "-m", "app", "--model", str(model), "--prompt", "hi", "--max-tokens", "16",
            "--temperature", "0"]
    peer = [sys.executable, "-c", LLAMA_GENERATE, str(model), str(n_ctx), str(threads)]
    a, b = alternate(ours, peer, rounds, env)
    wall_a, wall_b = med(a, "wall"), med(b, "wall")
    mem_a, mem_b = med(a, "peak_kib") / 1024, med(b, "peak_kib") / 1024
    same = a[-1]["stdout"].strip() == b[-1]["stdout"].strip()
    return [
        f"| `tokchat --prompt hi --max-tokens 16 --temperature 0` on SmolLM2, wall | {wall_a:.2f} s "
        f"| {wall_b:.2f} s | {wall_a / wall_b:.2f}x |",
        f"| CPU time of that run (user + system) | {med(a, 'cpu'):.2f} s | {med(b, 'cpu'):.2f} s "
        f"| {med(a, 'cpu') / med(b, 'cpu'):.2f}x |",
        f"| peak memory of that run | {mem_a:.0f} MiB | {mem_b:.0f} MiB | {mem_a - mem_b:+.0f} MiB |",
        f"<!-- n_ctx {n_ctx}, {threads} thread(s); same reply: {same} "
        f"({a[-1]['stdout'].strip()[:60]!r} / {b[-1]['stdout'].strip()[:60]!r}) -->",
    ]


def bench_tokenize(rounds: int, env: dict[str, str]) -> list[str]:
    model = asset_path("qwen2.5-coder-0.5b.gguf")
    ours = [sys.executable, "-m", "app", "tokenize", "--model", str(model), "hi"]
    peer = [sys.executable, "-c", LLAMA_TOKENIZE, str(model)]
    a, b = alternate(ours, peer, rounds, env)
    wall_a, wall_b = med(a, "wall"), med(b, "wall")
    same = json.loads(a[-1]["stdout"]) == json.loads(b[-1]["stdout"])
    return [f"| `tokchat tokenize --model qwen.gguf hi` (llama.cpp: vocab_only load + tokenize), wall "
            f"| {wall_a:.2f} s | {wall_b:.2f} s | {wall_a / wall_b:.2f}x |",
            f"| CPU time of that run | {med(a, 'cpu'):.2f} s | {med(b, 'cpu'):.2f} s | {med(a, 'cpu') / med(b, 'cpu'):.2f}x |",
            f"| peak memory of that run | {med(a, 'peak_kib') / 1024:.0f} MiB "
            f"| {med(b, 'peak_kib') / 1024:.0f} MiB | {(med(a, 'peak_kib') - med(b, 'peak_kib')) / 1024:+.0f} MiB |",
            f"<!-- same ids: {same} -->"]


def bench_load(rounds: int, env: dict[str, str]) -> list[str]:
    model = asset_path("qwen2.5-coder-0.5b.gguf")
    cmd = [sys.executable, "-c", TOKENIZER_LOAD, str(model)]
    measure(cmd, env)  # warm-up
    runs = [json.loads(measure(cmd, env)["stdout"]) for _ in range(rounds)]
    ready, vocab = med(runs, "ready"), med(runs, "llama_vocab_only")
    cpu, vocab_cpu = med(runs, "ready_cpu"), med(runs, "llama_cpu")
    parts = ", ".join(f"{k} {med(runs, k):.3f} s" for k in ("import", "load", "first_encode"))
    return [f"| Qwen vocabulary (151,936 tokens) GGUF -> ready to encode, in-process, wall "
            f"(llama.cpp: `vocab_only` load) | {ready:.3f} s | {vocab:.3f} s | {ready / vocab:.2f}x |",
            f"| the same, CPU time of the process | {cpu:.3f} s | {vocab_cpu:.3f} s | {cpu / vocab_cpu:.2f}x |",
            f"<!-- {parts} -->"]


class Tmux:
    """One detached tmux session on a private socket."""

    def __init__(self, tmp: Path) -> None:
        if shutil.which("tmux") is None:
            raise SystemExit("tmux is not installed: apt-get install tmux")
        self.name = f"bench-{uuid.uuid4().hex[:8]}"
        self.socket = str(tmp / f"{self.name}.sock")  # one server per run: a killed one may linger

    def screen(self) -> str:
        return subprocess.run(["tmux", "-S", self.socket, "capture-pane", "-p", "-t", self.name],
                              capture_output=True, text=True).stdout

    def kill(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True)


def tui_once(model: Path | None, env: dict[str, str], tmp: Path) -> tuple[float, float]:
    """(first paint, model ready) in seconds after the launch of ``tokchat --model MODEL`` in tmux.

    ``model`` None runs the bare Textual app instead (ready = painted).
    """
    tmux = Tmux(tmp)
    if model is None:
        script = tmp / "minimal_textual.py"
        script.write_text(TEXTUAL_MINIMAL)
        command = f"{sys.executable} {script}; sleep 30"
    else:
        command = f"{sys.executable} -m app --model {model}; sleep 30"
    # the server first: its start-up is not tokchat's
    subprocess.run(["tmux", "-S", tmux.socket, "new-session", "-d", "-s", "idle", "-x", "110", "-y", "34"],
                   check=True, env=env)
    try:
        t0 = time.perf_counter()
        subprocess.run(["tmux", "-S", tmux.socket, "new-session", "-d", "-s", tmux.name, "-x", "110", "-y", "34",
                        command], check=True, env=env, cwd=ROOT)
        paint = ready = None
        deadline = t0 + 120
        while ready is None:
            screen = tmux.screen()
            now = time.perf_counter() - t0
            if paint is None and "tokchat ·" in screen:
                paint = now
            if " on CPU · " in screen or (model is None and paint is not None):
                ready = now
            if time.perf_counter() > deadline:
                raise SystemExit(f"the TUI did not get ready; the screen was:\n{screen}")
            time.sleep(0.02)
        return paint or ready, ready
    finally:
        tmux.kill()


def bench_tui(rounds: int, env: dict[str, str]) -> list[str]:
    model = asset_path("smollm2.gguf")
    n_ctx, threads = engine_settings(model)
    load = [sys.executable, "-c", LLAMA_LOAD, str(model), str(n_ctx), str(threads)]
    env = {**env, "TERM": "xterm-256color"}
    with tempfile.TemporaryDirectory() as tmp:
        tui_once(model, env, Path(tmp))  # warm-up
        tui_once(None, env, Path(tmp))
        measure(load, env)
        paints, readies, loads, bare = [], [], [], []
        for _ in range(rounds):
            paint, ready = tui_once(model, env, Path(tmp))
            paints.append(paint)
            readies.append(ready)
            bare.append(tui_once(None, env, Path(tmp))[0])
            loads.append(measure(load, env)["wall"])
    paint, ready, engine = statistics.median(paints), statistics.median(readies), statistics.median(loads)
    floor = statistics.median(bare)
    return [f"| TUI first paint (tmux, polled every 20 ms; peer: a bare Textual app with one Static) "
            f"| {paint:.2f} s | {floor:.2f} s | {paint - floor:+.2f} s |",
            f"| TUI model ready (peer: import + `Llama(...)` as a whole process) | {ready:.2f} s "
            f"| {engine:.2f} s | {ready - engine:+.2f} s |",
            f"<!-- first paint {min(paints):.2f}-{max(paints):.2f} s, ready {min(readies):.2f}-{max(readies):.2f} s -->"]


BENCHES = {"headless": bench_headless, "tokenize": bench_tokenize, "load": bench_load, "tui": bench_tui}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="measured runs of each command (default 5)")
    parser.add_argument("--only", default=",".join(BENCHES), help="comma-separated: " + ", ".join(BENCHES))
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in BENCHES]
    if unknown:
        parser.error(f"unknown benchmark {unknown[0]!r}: choose from {', '.join(BENCHES)}")
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "TOKCHAT_DATA_DIR": str(Path(home) / "data"), "TOKCHAT_CACHE_DIR": str(Path(home) / "cache"),
               "TOKCHAT_CONFIG_DIR": str(Path(home) / "config"), "PYTHONPATH": str(ROOT)}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        load = os.getloadavg()[0]
        print(f"medians of {args.rounds} fresh processes each; load average {load:.1f} at the start "
              f"(on {os.cpu_count()} CPUs: wall times stretch with it, CPU times much less)\n")
        print("| what | tokchat | the engine alone (llama-cpp-python) | ratio / difference |")
        print("| --- | ---: | ---: | ---: |")
        for name in chosen:
            for line in BENCHES[name](args.rounds, env):
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
