"""The local engine against the same engine's own server, side by side in one run.

* **decode**: tokchat's local backend (the engine host, default settings:
  llama.cpp's own thread count and flash attention) against ``llama-server``
  started with nothing but the model, both built from the same llama.cpp
  sources: greedy, no repetition penalty, ``--ids`` ids per round, tok/s after
  the first id (the server's own ``timings.predicted_per_second``; ours from
  the ids' arrival times); ``--preset NAME`` sends both the sampling of
  ``configs/models/NAME.toml`` (its repeat penalty, top-k, top-p, min-p) at
  each of ``--temperatures`` (0 = greedy; one seed for both), and the greedy
  replies' ids are compared;
* **sampling**: the sampling step alone on the real logits of the bench's
  prompt, microseconds per id, tokchat's sampler against llama.cpp's own chain
  as llama-server builds it (its penalties sampler over the whole vocabulary),
  at each of ``--temperatures`` with the preset's sampling;
* **prompt**: a ``--prompt-ids``-id prompt evaluated from an empty cache, ids/s
  (the server's ``timings.prompt_per_second``; ours ``new ids / time to the
  first id``);
* **amx** (on a CPU with AMX): the same two measures with llama.cpp's weight
  repacking on (the AMX kernel, with tokchat's patch) and off (``--no-repack``),
  for tokchat's local backend and for ``llama-server``, four contestants in
  rotating order;
* **start-up**: ``tokchat --prompt`` as a whole process against a bare
  llama-cpp-python script doing the same generation (``Llama(...)`` with the
  same n_ctx and threads, greedy, 16 ids), wall time and the peak memory of the
  whole process tree (parent + engine child; sampled every 10 ms from /proc), as
  summed RSS and as summed PSS (which counts a page the two share once), in 3
  rounds of their own (wall times come from rounds without the sampler).

Rounds alternate tokchat and the server (the order flips every round) after
one unrecorded warm-up each; the table shows medians and the ratio.

    .venv/bin/python bench/bench_engine.py [--model qwen2.5-coder-0.5b.gguf] [--rounds 3]
    .venv/bin/python bench/bench_engine.py --only decode,sampling --preset qwen2.5 --temperatures 0,0.8
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from dataclasses import replace
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "backends")]

import httpx  # noqa: E402
from support.assets import asset_path  # noqa: E402

from backends import LoadOptions, SamplingParams, open_backend  # noqa: E402
from backends.cpu import cpu_model, has_amx, llama_default_threads  # noqa: E402
from tokenizer import load_tokenizer  # noqa: E402

QUESTION = "Write a Python function that parses a CSV file and returns the rows as dictionaries, with comments."
BARE_SCRIPT = r"""
import sys, llama_cpp
llm = llama_cpp.Llama(sys.argv[1], n_ctx=int(sys.argv[2]), n_threads=int(sys.argv[3]), n_threads_batch=int(sys.argv[3]),
                      flash_attn=True, verbose=False)
out = llm.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=16, temperature=0)
print(out["choices"][0]["message"]["content"])
"""


def tree_peak_memory(pid: int, stop: threading.Event, out: list[tuple[int, int]]) -> None:
    """Sample ``pid`` and its descendants until ``stop``; the peaks of their summed RSS and PSS (KiB) go to
    ``out``.  RSS counts the pages parent and engine share (the interpreter, libc) twice; PSS splits each
    shared page between the processes that map it, so its sum is what the tree takes from the machine."""
    peak_rss = peak_pss = 0
    while not stop.is_set():
        rss = pss = 0
        pids = [pid]
        while pids:
            p = pids.pop()
            try:
                for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1])
                for task in Path(f"/proc/{p}/task").iterdir():
                    pids.extend(int(c) for c in (task / "children").read_text().split())
            except OSError:
                continue  # the process ended between two reads
        peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
        time.sleep(0.01)
    out.append((peak_rss, peak_pss))


def whole_process(cmd: list[str], env: dict[str, str], memory: bool) -> tuple[float, float, float]:
    """Wall seconds, peak tree RSS and peak tree PSS (MiB; 0 unless ``memory``) of one run of ``cmd``.

    Wall times come from runs without the memory sampler: reading smaps_rollup every 10 ms takes
    CPU from the 2 cores the runs share, and more of it from the run with two processes."""
    stop, peak = threading.Event(), [(0, 0)]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    if memory:
        peak.clear()
        sampler = threading.Thread(target=tree_peak_memory, args=(proc.pid, stop, peak))
        sampler.start()
    proc.wait()
    wall = time.perf_counter() - started
    if memory:
        stop.set()
        sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} exited {proc.returncode}")
    return wall, peak[0][0] / 1024, peak[0][1] / 1024


#: the decode rounds' sampling without --preset: greedy, no repetition penalty
PLAIN = SamplingParams(temperature=0, repeat_penalty=1.0)


def preset_sampling(name: str | None, temperature: float, seed: int) -> SamplingParams:
    """The ``[sampling]`` of ``configs/models/NAME.toml`` at ``temperature`` (None: :data:`PLAIN` at it)."""
    if name is None:
        return replace(PLAIN, temperature=temperature, seed=seed)
    table = tomllib.loads((ROOT / "configs" / "models" / f"{name}.toml").read_text())["sampling"]
    fields = {k: table[k] for k in ("top_p", "top_k", "min_p", "repeat_penalty", "repeat_last_n") if k in table}
    return SamplingParams(temperature=temperature, seed=seed, **fields)


def local_round(backend, prompt: list[int], n: int, sampling: SamplingParams = PLAIN
                ) -> tuple[float, float, list[int]]:
    """(decode tok/s, prompt ids/s, the ids) of one reply from an empty cache."""
    sampling = replace(sampling, max_tokens=n)
    list(backend.generate([prompt[0]], SamplingParams(temperature=0, max_tokens=1), set()))  # empty the cache
    started = time.perf_counter()
    first = last = None
    ids: list[int] = []
    generation = backend.generate(prompt, sampling, set())
    for token in generation:
        now = time.perf_counter()
        first = first or now
        last = now
        ids.append(token)
    assert first is not None and last is not None and len(ids) == n
    return (n - 1) / (last - first), generation.stats.prompt_evaluated / (first - started), ids


def server_round(url: str, prompt: list[int], n: int, sampling: SamplingParams = PLAIN
                 ) -> tuple[float, float, list[int]]:
    """The same from llama-server, sent the same sampling (and seed)."""
    body = {"prompt": prompt, "n_predict": n, "temperature": sampling.temperature, "top_k": sampling.top_k,
            "top_p": sampling.top_p, "min_p": sampling.min_p, "repeat_penalty": sampling.repeat_penalty,
            "repeat_last_n": sampling.repeat_last_n, "cache_prompt": False, "ignore_eos": True,
            "return_tokens": True}
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    reply = httpx.post(url + "/completion", json=body, timeout=600).json()
    timings = reply["timings"]
    return timings["predicted_per_second"], timings["prompt_per_second"], reply.get("tokens", [])


def sampling_table(model: Path, temperatures: list[float], preset: str | None, seed: int, ids: int) -> None:
    """The sampling step alone, microseconds per id, on the logits after the bench's chat prompt.

    tokchat's :class:`LlamaCppSampler` against the chain llama-server runs
    (:func:`llama_chain` with llama.cpp's penalties sampler, fed the same
    window), each sampling ``ids`` times in a row from the same logits (each
    pick joins its window), rotated over 5 rounds; medians.
    """
    import llama_cpp

    from backends.base import penalty_window
    from backends.llama_engine import EngineParams, LlamaEngine
    from backends.llama_sampler import LlamaCppSampler, llama_chain, penalty_last_n

    from backends.engine_log import capture_llama_log

    chat, _ = bench_prompts(model, 64)
    log = capture_llama_log(Path(tempfile.gettempdir()) / "tokchat-bench-sampling.log")  # not on the table
    engine = LlamaEngine(model, EngineParams(n_ctx=2048, n_threads=llama_default_threads()))
    try:
        engine.decode(chat)

        class ServerChain:
            def __init__(self, sampling: SamplingParams) -> None:
                self.chain = llama_chain(sampling, seed, engine.n_vocab, penalty_last_n(sampling, 2048))
                for token in penalty_window(chat, sampling):
                    llama_cpp.llama_sampler_accept(self.chain, token)

            def sample(self, ctx) -> int:
                return llama_cpp.llama_sampler_sample(self.chain, ctx, -1)

            def close(self) -> None:
                llama_cpp.llama_sampler_free(self.chain)

        def per_id(make) -> float:
            sampler = make()
            try:
                started = time.perf_counter()
                for _ in range(ids):
                    sampler.sample(engine.ctx)
                return (time.perf_counter() - started) / ids * 1e6
            finally:
                sampler.close()

        print(f"\nsampling step, {engine.n_vocab:,} ids in the vocabulary, preset {preset or 'none'}: "
              f"microseconds per id, medians of 5 rounds of {ids} (llama.cpp's log: {log})")
        print("| temperature | penalty | tokchat | llama.cpp's chain (llama-server's) | ratio |")
        print("|---:|---|---:|---:|---:|")
        for temperature in temperatures:
            sampling = preset_sampling(preset, temperature, seed)
            ours, theirs = [], []
            for r in range(5):
                for who in (("ours", "theirs") if r % 2 == 0 else ("theirs", "ours")):
                    if who == "ours":
                        ours.append(per_id(lambda: LlamaCppSampler(sampling, seed, engine.n_vocab, 2048, chat)))
                    else:
                        theirs.append(per_id(lambda: ServerChain(sampling)))
            o, t = statistics.median(ours), statistics.median(theirs)
            penalty = f"{sampling.repeat_penalty} over {sampling.repeat_last_n}"
            print(f"| {temperature} | {penalty} | {o:.1f} | {t:.1f} | {o / t:.2f}x |")
    finally:
        engine.close()


def bench_prompts(model: Path, prompt_ids: int) -> tuple[list[int], list[int]]:
    """The chat prompt decode rounds reply to, and a ``prompt_ids``-id prompt ending in it."""
    tok = load_tokenizer(model)
    chat = tok.encode(f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n", special=True)
    filler = tok.encode("The tide was high at dawn and the boats went out. " * 400)
    return chat, filler[: prompt_ids - len(chat)] + chat


def start_server(model: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    """``llama-server`` (the tests' build, with tokchat's patches) on ``model`` with its defaults plus ``extra``."""
    from support.remote_servers import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([str(asset_path("llama-server") / "llama-server"), "-m", str(model),
                               "--host", "127.0.0.1", "--port", str(port), *extra],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    return server, url


def amx_table(model: Path, rounds: int, ids: int, prompt_ids: int) -> None:
    """Repacking on (AMX) against off, for our local backend and for llama-server, rotating every round."""
    chat, long_prompt = bench_prompts(model, prompt_ids)
    runs: dict[str, tuple[list[float], list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        contestants = {}
        for name, extra in (("llama-server, defaults (AMX)", ()), ("llama-server, --no-repack", ("--no-repack",))):
            server, url = start_server(model, *extra)
            stack.callback(server.wait, 30)
            stack.callback(server.terminate)
            server_round(url, chat, 8)
            contestants[name] = ("server", url)
        # no remembered AMX fault turns repacking off behind our back
        stack.enter_context(mock.patch.dict(os.environ, {"XDG_CACHE_HOME": tmp}))
        for name, repack in (("tokchat, repacking on (AMX)", True), ("tokchat, repacking off", False)):
            backend = open_backend(model, LoadOptions(backend="cpu", repack=repack, log_path=Path(tmp) / f"{repack}.log"))
            stack.callback(backend.close)
            local_round(backend, chat, 8)
            contestants[name] = ("local", backend)
        names = list(contestants)
        for r in range(rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:
                kind, handle = contestants[name]
                one = local_round if kind == "local" else server_round
                d, _, _ = one(handle, chat, ids)
                _, p, _ = one(handle, long_prompt, 2)
                runs.setdefault(name, ([], []))[0].append(d)
                runs[name][1].append(p)
        amx_logged = "AMX" in (Path(tmp) / "True.log").read_text()
    print(f"\nAMX weights in the repacking-on engine's log: {'yes' if amx_logged else 'NO'}; "
          f"threads {llama_default_threads()}; medians of {rounds} rotating rounds")
    print(f"| engine | prompt, {len(long_prompt)} ids, ids/s | decode, {ids} ids, tok/s |")
    print("|---|---:|---:|")
    for name, (d, p) in runs.items():
        print(f"| {name} | {statistics.median(p):.0f} ({', '.join(f'{x:.0f}' for x in p)}) | "
              f"{statistics.median(d):.1f} ({', '.join(f'{x:.1f}' for x in d)}) |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b.gguf", help="a test asset name or a path")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ids", type=int, default=128)
    parser.add_argument("--prompt-ids", type=int, default=1500)
    parser.add_argument("--only", default="decode,startup", help="of decode,startup,sampling,amx")
    parser.add_argument("--preset", default=None,
                        help="decode and sampling with configs/models/NAME.toml's sampling (default: greedy, no "
                             "repetition penalty)")
    parser.add_argument("--temperatures", default="0", help="decode at each, e.g. 0,0.8 (0 = greedy)")
    parser.add_argument("--seed", type=int, default=7, help="the seed both sides sample with")
    parser.add_argument("--speculative", default="auto", help="tokchat's speculative setting (its default: auto)")
    parser.add_argument("--server-args", default="", help="more llama-server arguments for the decode rounds, "
                                                           "e.g. '-np 1' (one slot: one KV stream, as tokchat's)")
    args = parser.parse_args()
    model = Path(args.model) if Path(args.model).exists() else asset_path(args.model)
    only = set(args.only.split(","))
    load = os.getloadavg()[0]
    print(f"CPU: {cpu_model()} (AMX {'yes' if has_amx() else 'no'}), {os.cpu_count()} CPUs, load average {load:.1f}; "
          f"model {model.name}")
    if "amx" in only:
        amx_table(model, args.rounds, args.ids, args.prompt_ids)
    temperatures = [float(t) for t in args.temperatures.split(",")]
    if "sampling" in only:
        sampling_table(model, temperatures, args.preset, args.seed, 200)
    if "decode" in only:
        chat, long_prompt = bench_prompts(model, args.prompt_ids)
        rows = []
        with tempfile.TemporaryDirectory() as tmp:
            server, url = start_server(model, *shlex.split(args.server_args))
            backend = open_backend(model, LoadOptions(backend="cpu", log_path=Path(tmp) / "engine.log",
                                                      speculative=args.speculative))
            try:
                server_round(url, chat, 8)
                local_round(backend, chat, 8)
                for temperature in temperatures:
                    sampling = preset_sampling(args.preset, temperature, args.seed)
                    ours_d, theirs_d, ours_p, theirs_p, same = [], [], [], [], []
                    for r in range(args.rounds):
                        order = ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours")
                        replies = {}
                        for who in order:
                            if who == "ours":
                                d, _, replies[who] = local_round(backend, chat, args.ids, sampling)
                                _, p, _ = local_round(backend, long_prompt, 2, sampling)
                                ours_d.append(d)
                                ours_p.append(p)
                            else:
                                d, _, replies[who] = server_round(url, chat, args.ids, sampling)
                                _, p, _ = server_round(url, long_prompt, 2, sampling)
                                theirs_d.append(d)
                                theirs_p.append(p)
                        a, b = replies["ours"], replies["theirs"]
                        same.append(len(a) if a == b else next(
                            (i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b))))
                    rows.append((sampling, ours_d, theirs_d, ours_p, theirs_p, same))
            finally:
                backend.close()
                server.terminate()
                server.wait(30)
        print(f"\nthreads: tokchat {llama_default_threads()} (llama.cpp's default), llama-server its default; "
              f"tokchat speculative {args.speculative}; sampling: {args.preset or 'no repetition penalty'}; "
              f"medians of {args.rounds} paired rounds")
        print(f"| measure | tokchat | llama-server ({args.server_args or 'defaults'}) | ratio |")
        print("|---|---:|---:|---:|")
        for sampling, ours_d, theirs_d, ours_p, theirs_p, same in rows:
            md, td = statistics.median(ours_d), statistics.median(theirs_d)
            mp, tp = statistics.median(ours_p), statistics.median(theirs_p)
            label = f"temperature {sampling.temperature}, penalty {sampling.repeat_penalty}/{sampling.repeat_last_n}"
            print(f"| decode, {args.ids} ids, {label}, tok/s | {md:.1f} | {td:.1f} | {md / td:.2f}x |")
            print(f"| prompt, {len(long_prompt)} ids, {label}, ids/s | {mp:.0f} | {tp:.0f} | {mp / tp:.2f}x |")
            agree = ", ".join(f"{k}/{args.ids}" for k in same)
            print(f"(rounds: tokchat decode {[round(x, 1) for x in ours_d]}, server {[round(x, 1) for x in theirs_d]};"
                  f" ids equal before the first difference: {agree}"
                  f"{'' if sampling.greedy else ' (sampled, one seed: equal only as far as the two draws agree)'})")
    if "startup" in only:
        threads = str(llama_default_threads())
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, XDG_DATA_HOME=tmp, XDG_CONFIG_HOME=tmp, XDG_CACHE_HOME=tmp, XDG_STATE_HOME=tmp)
            ctx = "2048"
            ours = [sys.executable, "-m", "app", "--model", str(model), "--prompt", "hi", "--max-tokens", "16",
                    "--temperature", "0", "--ctx", ctx, "--backend", "cpu", "--no-history"]
            bare = [sys.executable, "-c", BARE_SCRIPT, str(model), ctx, threads]
            whole_process(ours, env, memory=False)
            whole_process(bare, env, memory=False)
            walls: dict[str, list[float]] = {"ours": [], "bare": []}
            rss: dict[str, list[float]] = {"ours": [], "bare": []}
            pss: dict[str, list[float]] = {"ours": [], "bare": []}
            for r in range(args.rounds):
                for who in (("ours", "bare") if r % 2 == 0 else ("bare", "ours")):
                    walls[who].append(whole_process(ours if who == "ours" else bare, env, memory=False)[0])
            for r in range(3):  # memory: its own rounds, sampled
                for who in (("ours", "bare") if r % 2 == 0 else ("bare", "ours")):
                    _, peak_rss, peak_pss = whole_process(ours if who == "ours" else bare, env, memory=True)
                    rss[who].append(peak_rss)
                    pss[who].append(peak_pss)
        ow, bw = statistics.median(walls["ours"]), statistics.median(walls["bare"])
        orss, brss = statistics.median(rss["ours"]), statistics.median(rss["bare"])
        opss, bpss = statistics.median(pss["ours"]), statistics.median(pss["bare"])
        print("\n| one-shot `--prompt hi`, 16 ids | tokchat (parent + engine) | bare llama-cpp-python script | ratio |")
        print("|---|---:|---:|---:|")
        print(f"| wall time | {ow:.2f} s | {bw:.2f} s | {ow / bw:.2f}x |")
        print(f"| peak memory, summed RSS | {orss:.0f} MiB | {brss:.0f} MiB | +{orss - brss:.0f} MiB |")
        print(f"| peak memory, summed PSS | {opss:.0f} MiB | {bpss:.0f} MiB | +{opss - bpss:.0f} MiB |")
        print(f"(rounds: tokchat {[round(x, 2) for x in walls['ours']]} s, "
              f"script {[round(x, 2) for x in walls['bare']]} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
