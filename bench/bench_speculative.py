"""Speculative decoding (issue 22): tokchat's n-gram drafts against llama-server's, side by side in one run.

Same model (the ``qwen2.5-coder-0.5b.gguf`` asset), same thread count
(llama.cpp's default for this CPU, given to both), same machine:

* tokchat's local llama.cpp backend as the chat runs it (the engine host),
  ``speculative = off`` and ``ngram`` (and ``auto``, the default);
* ``llama-server`` (the test asset, built from the same llama.cpp sources)
  with ``--spec-type none``, ``ngram-simple`` and ``ngram-mod`` (its default
  draft settings for each), a fresh server for every reply (see
  :func:`fresh_server_round`).

Workloads, greedy, no repetition penalty, ``--ids`` / ``--prose-ids`` ids each (the end of turn
ignored, as ``bench_engine.py`` does, so every engine emits the same count):

* **code rewrite**: "rewrite this file without its docstrings", a 3.6 kB
  Python file (``backends/cpu.py`` as of commit fcc16f4, pinned so runs compare);
* **fresh prose**: "write a story", where matches are chance (this 0.5B model's story
  soon repeats itself, and n-gram drafts copy the repeats);
* **stdlib rewrite**: the standard library's ``fnmatch`` (this Python's) rewritten without docstrings and
  comments (the model keeps some and edits others: a copy with edits);
* **json rename**: a 12-record JSON array returned with one field renamed in every record;
* **typo fix**: a 1.6 kB text with nine typos returned whole, corrected.

tok/s is the generation speed after the first id (the server's own
``timings.predicted_per_second``; ours from the ids' arrival times), drafted /
accepted are each engine's own counts (its generation's ``stats.draft``; the server's
``timings.draft_n`` / ``draft_n_accepted``).  Rounds rotate the engines' order;
the table shows medians.  "same ids" says whether each speculating engine's
reply equals its own engine without speculation (llama.cpp's batched kernel
rounds differently from the one-id kernel, so a near-tie can tip).

With ``--pair`` the contestants are draft-model speculation on the real pair
of one vocabulary: Qwen2.5-Coder-1.5B (main) with the 0.5B drafting:
tokchat ``off``, ``draft`` and ``auto`` (prompt lookup, then the draft model)
against ``llama-server`` alone and with ``-md`` and ``--spec-type draft-simple`` (its default draft settings).

    .venv/bin/python bench/bench_speculative.py [--rounds 2] [--ids 300] [--pair]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "backends")]

import httpx  # noqa: E402
from support.assets import asset_path  # noqa: E402

from backends import LoadOptions, SamplingParams, open_backend  # noqa: E402
from backends.cpu import cpu_model, has_amx, llama_default_threads  # noqa: E402
from tokenizer import load_tokenizer  # noqa: E402

PINNED_FILE = ("fcc16f4", "backends/cpu.py")
STORY = "Write a story about a lighthouse keeper who finds a message in a bottle."
LOCAL_MODES = ("off", "ngram", "auto")
SERVER_TYPES = ("none", "ngram-simple", "ngram-mod")


def chat_ids(tokenizer, question: str) -> list[int]:
    return tokenizer.encode(f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n", special=True)


#: a standard-library module for the second rewrite (the 0.5B model copies ``fnmatch`` with edits of its own;
#: ``colorsys`` it rewrote from scratch, nothing to copy)
STDLIB_MODULE = "fnmatch"
NAMES = ("Ada Lovelace", "Alan Turing", "Grace Hopper", "Edsger Dijkstra", "Barbara Liskov", "Donald Knuth",
         "Frances Allen", "John Backus", "Margaret Hamilton", "Ken Thompson", "Radia Perlman", "Niklaus Wirth")
CITIES = ("London", "Manchester", "Arlington", "Rotterdam", "Boston", "Stanford")
#: a text with typos in it (about one word in twenty), to be returned whole and corrected
TYPO_TEXT = (
    "The lighthouse stood on the edge of the clif, its white paint peeling after fourty winters of salt and "
    "wind. Every evening the keeper climbed the ninety-nine steps to the lamp room, trimmed the wick, wound "
    "the clockwork that turned the lens, and wrote a line in the log: the weather, the ships that passed, and "
    "anything else worth remembering. Most nights there was nothing to write exept the wind. Ships came less "
    "often now; the new harbour to the south had its own light, brighter and automatic, and the old tower was "
    "kept mostly out of habbit. The keeper did not mind. He liked the quiet, the long hours with a book by the "
    "stove, and the sound of the sea against the rocks below, which never stoped and never repeated itself "
    "exactly. In the spring the puffins came back to the cliffs and he counted them from the gallery, making a "
    "small mark in the margin of the log for every hundered birds. In the autumn the storms came, and on the "
    "worst nights he did not sleep at all, but sat by the lamp and listened to the tower creak around him like "
    "an old ship. One morning after such a storm he walked down to the beach to see what the sea had left "
    "behind. There was driftwood, a tangle of rope, a broken lobster pot, and half buried in the sand a green "
    "glass bottle with a cork in its neck and a rolled paper inside. He carried it back up the path, sat down at "
    "the kitchen table, and for a long while did not open it, because he had waited his whole life for "
    "something like this and was afraid it would be dissapointing.")


def people_json() -> str:
    """A pretty-printed JSON array of twelve records, the same every run."""
    import json

    people = [{"id": 1000 + i, "name": name, "email": name.lower().replace(" ", ".") + "@example.org",
               "city": CITIES[i % len(CITIES)], "active": i % 3 != 0, "score": round(50 + 3.7 * i, 1)}
              for i, name in enumerate(NAMES)]
    return json.dumps(people, indent=2)


def stdlib_source() -> str:
    import importlib
    import inspect

    return Path(inspect.getsourcefile(importlib.import_module(STDLIB_MODULE))).read_text()


def workload_texts() -> dict[str, str]:
    """Each workload's user message: copy-heavy turns of four kinds, and fresh prose."""
    source = subprocess.run(["git", "show", f"{PINNED_FILE[0]}:{PINNED_FILE[1]}"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    return {
        "code rewrite": f"Rewrite this Python file without its docstrings:\n\n```python\n{source}```",
        "fresh prose": STORY,
        "stdlib rewrite": f"Rewrite this Python module without its docstrings and comments:\n\n```python\n"
                          f"{stdlib_source()}```",
        "json rename": "Return this JSON exactly as it is, except that the field \"email\" is renamed to "
                       f"\"contact\" in every record. Reply with the JSON only.\n\n```json\n{people_json()}\n```",
        "typo fix": f"Fix the spelling mistakes in this text and return the whole text, corrected:\n\n{TYPO_TEXT}",
    }


def workloads(tokenizer) -> dict[str, list[int]]:
    return {name: chat_ids(tokenizer, text) for name, text in workload_texts().items()}


def local_round(backend, prompt: list[int], n: int) -> tuple[float, tuple[int, int] | None, list[int]]:
    """(tok/s after the first id, (drafted, accepted), ids) of one greedy reply; the prompt is cached already."""
    sampling = SamplingParams(temperature=0, max_tokens=n, repeat_penalty=1.0)
    first = last = None
    ids = []
    generation = backend.generate(prompt, sampling, set())
    for token in generation:
        now = time.perf_counter()
        first = first or now
        last = now
        ids.append(token)
    assert first is not None and last is not None and len(ids) == n
    counts = generation.stats.draft
    return (n - 1) / (last - first), (counts.drafted, counts.accepted) if counts else None, ids


def forget(backend) -> None:
    """Empty the engine's cache (a one-id reply to a one-id prompt that shares nothing with a chat's).

    A fresh llama-server evaluates the prompt from its first id in one batch; a backend that answered the
    previous workload keeps the chat's common first ids and evaluates the rest, in other batches.  Batches
    round differently, so the greedy replies then part at a near-tie (the prose reply at id 72, and
    the comparison with llama-server's n-gram modes was one of two different replies); from an empty cache
    both evaluate the same batches and give the same ids.
    """
    list(backend.generate([198], SamplingParams(temperature=0, max_tokens=1, repeat_penalty=1.0), set()))


def server_round(url: str, prompt: list[int], n: int) -> tuple[float, tuple[int, int] | None, list[int]]:
    body = {"prompt": prompt, "n_predict": n, "temperature": 0, "repeat_penalty": 1.0, "cache_prompt": True,
            "ignore_eos": True, "return_tokens": True}
    answer = httpx.post(url + "/completion", json=body, timeout=900).json()
    timings = answer["timings"]
    counts = (int(timings["draft_n"]), int(timings["draft_n_accepted"])) if "draft_n" in timings else None
    return float(timings["predicted_per_second"]), counts, [int(t) for t in answer["tokens"]]


#: llama-server's speculation per contestant name: --spec-type, or a draft model (its defaults otherwise)
DRAFT_MODEL_SPEC = "draft model"
#: the pinned llama-server speculates with ``-md`` only when asked for this type: ``-md`` alone loads the draft
#: model and drafts nothing (its timings then have no ``draft_n``); its draft defaults are 3 ids, p_min 0
SERVER_DRAFT_TYPE = "draft-simple"


def server_spec_args(spec: str) -> list[str]:
    if spec == DRAFT_MODEL_SPEC:
        return ["-md", str(asset_path("qwen2.5-coder-0.5b.gguf")), "--spec-type", SERVER_DRAFT_TYPE]
    return ["--spec-type", spec]


def start_server(model: Path, spec: str, threads: int, log_dir: Path):
    from support.remote_servers import free_port

    port = free_port()
    args = [str(asset_path("llama-server") / "llama-server"), "-m", str(model), "--host", "127.0.0.1",
            "--port", str(port), "-c", "4096", "-np", "1", "-t", str(threads), "-tb", str(threads),
            *server_spec_args(spec)]
    log = open(log_dir / f"server-{spec.replace(' ', '-')}.log", "wb")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(1200):
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server --spec-type {spec} exited; log in {log_dir}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"llama-server --spec-type {spec} did not start")


def fresh_server_round(model: Path, spec: str, threads: int, log_dir: Path, prompt: list[int],
                       n: int) -> tuple[float, tuple[int, int] | None, list[int]]:
    """One reply from a llama-server started for it (the prompt cached first by a 4-id request).

    ``ngram-mod`` keeps its n-gram pool across requests, so a server that has
    already answered the same request drafts the whole reply from memory
    (measured: prose at 50, 83, then 128 tok/s over three identical rounds); a
    chat never asks the same thing twice, so every round gets a fresh server.
    """
    proc, url = start_server(model, spec, threads, log_dir)
    try:
        server_round(url, prompt, 4)
        return server_round(url, prompt, n)
    finally:
        proc.terminate()
        proc.wait(30)


def first_difference(a: list[int], b: list[int]) -> str:
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    return "yes" if i is None and len(a) == len(b) else f"no (from id {i})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ids", type=int, default=300, help="ids per copy-heavy reply")
    parser.add_argument("--prose-ids", type=int, default=300, help="ids per prose reply")
    parser.add_argument("--only", default="code rewrite,fresh prose,stdlib rewrite,json rename,typo fix")
    parser.add_argument("--pair", action="store_true", help="the 1.5B with the 0.5B as its draft model")
    args = parser.parse_args()
    model = asset_path("qwen2.5-coder-1.5b.gguf" if args.pair else "qwen2.5-coder-0.5b.gguf")
    draft = asset_path("qwen2.5-coder-0.5b.gguf") if args.pair else None
    local_modes = ("off", "draft", "auto") if args.pair else LOCAL_MODES
    server_types = ("none", DRAFT_MODEL_SPEC) if args.pair else SERVER_TYPES
    reference = f"llama-server {server_types[-1]}"
    threads = llama_default_threads()
    tokenizer = load_tokenizer(model)
    loads = [os.getloadavg()[0]]
    print(f"CPU: {cpu_model()} (AMX {'yes' if has_amx() else 'no'}), {os.cpu_count()} CPUs, {threads} threads "
          f"each; model {model.name}; {args.ids} ids greedy, {args.rounds} round(s)")
    chosen = {k: v for k, v in workloads(tokenizer).items() if k in args.only.split(",")}
    # results[workload][engine] = list of (tok/s, counts, ids)
    results: dict[str, dict[str, list]] = {w: {} for w in chosen}
    with tempfile.TemporaryDirectory() as tmp:
        engines = {}
        backends = {}
        try:
            for mode in local_modes:
                backend = open_backend(model, LoadOptions(backend="cpu", n_ctx=4096, n_threads=threads,
                                                          speculative=mode, draft_model=draft,
                                                          log_path=Path(tmp) / f"{mode}.log"))
                engines[f"tokchat {mode}"] = (lambda p, n, b=backend: local_round(b, p, n))
                backends[f"tokchat {mode}"] = backend
            for spec in server_types:
                engines[f"llama-server {spec}"] = (
                    lambda p, n, s=spec: fresh_server_round(model, s, threads, Path(tmp), p, n))
            names = list(engines)
            for workload, prompt in chosen.items():
                for name in names:
                    if name.startswith("tokchat"):  # warm-up: the prompt is cached, nothing recorded
                        forget(backends[name])
                        engines[name](prompt, 4)
                n = args.prose_ids if workload == "fresh prose" else args.ids
                for r in range(args.rounds):
                    order = names[r % len(names):] + names[: r % len(names)]
                    for name in order:
                        results[workload].setdefault(name, []).append(engines[name](prompt, n))
                        print(f"  {workload} round {r + 1} {name}: {results[workload][name][-1][0]:.1f} tok/s "
                              f"{results[workload][name][-1][1]}", flush=True)
                    loads.append(os.getloadavg()[0])
        finally:
            for backend in backends.values():  # each llama-server is stopped by its own round
                backend.close()
    print(f"\nload average during the run: {min(loads):.1f} to {max(loads):.1f}\n")
    print(f"| workload | engine | tok/s | drafted / accepted (rate) | vs tokchat off | vs {reference} "
          "| same ids as no speculation |")
    print("| --- | --- | ---: | --- | ---: | ---: | --- |")
    for workload, by_engine in results.items():
        speed = {name: statistics.median(r[0] for r in runs) for name, runs in by_engine.items()}
        for name, runs in by_engine.items():
            counts = runs[-1][1]
            drafted = f"{counts[0]} / {counts[1]} ({counts[1] / counts[0]:.0%})" if counts and counts[0] else (
                "0 / 0" if counts else "—")
            base = "tokchat off" if name.startswith("tokchat") else "llama-server none"
            same = "—" if name == base else first_difference(runs[-1][2], by_engine[base][-1][2])
            print(f"| {workload} | {name} | {speed[name]:.1f} | {drafted} | {speed[name] / speed['tokchat off']:.2f}x "
                  f"| {speed[name] / speed[reference]:.2f}x | {same} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
