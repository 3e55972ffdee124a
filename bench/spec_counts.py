"""Speculation counts per workload: drafted, accepted and target-model batches, tokchat against llama-server.

Timings on a shared machine are noise; under greedy decoding the counts are
not.  For every workload of ``bench_speculative.py`` (one greedy reply of
``--ids`` ids, the end of turn ignored) this prints:

* **tokchat** (the llama.cpp backend in this process, ``--modes``, default
  ``auto``): ``stats.draft`` and the engine's decode calls after the first
  id, counted on the engine (a reply's batches: fewer for the same ids is
  what makes speculation pay);
* **llama-server** ``--spec-type`` ngram-mod and ngram-simple (a fresh
  server per reply, as in the bench): ``timings.draft_n`` /
  ``draft_n_accepted``; its batches are ``ids - 1 - accepted`` (each batch
  emits its accepted ids plus one of the model's own);
* whether each reply equals tokchat's reply without speculation.

``--simulate`` needs no model: it replays the drafter and the ``auto``
policy over the greedy replies saved by the last real run (in the temporary
directory, ``tokchat-spec-replies.json``) through the same
:class:`~backends.speculative.Speculator` that ``LlamaCppBackend._decode_loop``
drives, a draft kept as far as it agrees with the saved reply.  The same
counts come out as from the engine unless a batch's kernel rounding
tips a near-tie, so drafter changes can be tried in seconds.

    .venv/bin/python bench/spec_counts.py [--ids 300] [--only "fresh prose,typo fix"] [--no-server]
    .venv/bin/python bench/spec_counts.py --simulate
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench_speculative import forget, server_round, start_server, workloads  # noqa: E402

from backends import LoadOptions, SamplingParams  # noqa: E402
from backends.speculative import DrafterConfig, Speculator  # noqa: E402

SAVED = Path(tempfile.gettempdir()) / "tokchat-spec-replies.json"
SERVER_TYPES = ("ngram-mod", "ngram-simple")


def simulate(prompt: list[int], reply: list[int], mode: str = "auto",
             config: DrafterConfig = DrafterConfig()) -> tuple[int, int, int]:
    """(drafted, accepted, batches) of drafting ``reply`` after ``prompt`` as ``_decode_loop`` does, no engine.

    The draft room is the reply's remaining ids (the context is taken as
    large enough); a draft is kept up to its first id that differs from
    ``reply``, then the reply's own id follows, as a greedy engine emits it.
    """
    speculator = Speculator(mode, prompt, config=config)
    n = len(reply)
    emitted, batches = 1, 0
    while emitted < n:
        token = reply[emitted - 1]
        draft = speculator.draft(token, n - emitted - 1)
        batches += 1
        if not draft:
            speculator.plain_step()
            emitted += 1
            continue
        batch: list[int] = []
        for i in range(len(draft) + 1):
            got = reply[emitted]
            emitted += 1
            batch.append(got)
            if not (i < len(draft) and got == draft[i]) or emitted >= n:
                break
        speculator.verified(batch)
    counts = speculator.counts()
    return (counts.drafted, counts.accepted, batches) if counts is not None else (0, 0, batches)


def simulate_ngram_mod(prompt: list[int], reply: list[int], n: int = 24, n_max: int = 64,
                       n_min: int = 48) -> tuple[int, int, int]:
    """(drafted, accepted, batches) of llama-server's ``ngram-mod`` (its defaults) on ``reply``, no engine.

    As ``common_speculative_impl_ngram_mod`` does it (llama.cpp ``common/speculative.cpp``): a pool maps
    every ``n``-gram of the context to the id that followed its latest occurrence (the reply's n-grams are
    added 32 ids at a time); a draft chains lookups from the last ``n`` ids, each drafted id extending the
    key, and is kept only if at least ``n_min`` ids long, at most ``n_max`` (and the ids the reply still
    takes, less one); five drafts in a row with under a quarter kept empty the pool.  The hash table's
    collisions are left out (4M entries).
    """
    ctx = list(prompt)
    pool: dict[tuple[int, ...], int] = {}

    def add(upto: int, start: int) -> None:
        for i in range(start, upto - n):
            pool[tuple(ctx[i:i + n])] = ctx[i + n]

    add(len(ctx), 0)
    i_last = len(ctx) - n
    emitted, batches, drafted, accepted, n_low = 1, 0, 0, 0, 0
    while emitted < len(reply):
        id_last = reply[emitted - 1]
        if i_last + 32 < len(ctx):
            add(len(ctx), i_last)
            i_last = len(ctx) - n
        key = ctx[len(ctx) - n + 1:] + [id_last]
        draft: list[int] = []
        for i in range(n_max):
            token = pool.get(tuple(key[i:i + n]))
            if token is None:
                if i < n_min:
                    draft = []
                break
            key.append(token)
            draft.append(token)
        draft = draft[:max(0, len(reply) - emitted - 1)]
        batches += 1
        kept = 0
        while kept < len(draft) and draft[kept] == reply[emitted + kept]:
            kept += 1
        if draft:
            drafted += len(draft)
            accepted += kept
            n_low = n_low + 1 if kept < 0.25 * len(draft) else 0
            if n_low >= 5:
                pool.clear()
                n_low, i_last = 0, 0
        ctx.extend(reply[emitted - 1:emitted + kept])
        emitted += kept + 1
    return drafted, accepted, batches


def simulate_ngram_simple(prompt: list[int], reply: list[int], size_n: int = 12,
                          size_m: int = 48) -> tuple[int, int, int]:
    """(drafted, accepted, batches) of llama-server's ``ngram-simple`` (``common_ngram_simple_draft``)."""
    ctx = list(prompt)
    emitted, batches, drafted, accepted = 1, 0, 0, 0
    while emitted < len(reply):
        id_last = reply[emitted - 1]
        draft: list[int] = []
        cur = len(ctx)
        if cur > size_n + size_m + 1:
            pattern = ctx[cur - size_n + 1:] + [id_last]
            match = next((j for j in range(cur - size_n - 1, 0, -1) if ctx[j:j + size_n] == pattern), 0)
            if match:
                copy = min(size_m, cur - (match + size_n))
                if copy >= size_n:
                    draft = ctx[match + size_n:match + size_n + copy]
        draft = draft[:max(0, len(reply) - emitted - 1)]
        batches += 1
        kept = 0
        while kept < len(draft) and draft[kept] == reply[emitted + kept]:
            kept += 1
        drafted += len(draft)
        accepted += kept
        ctx.extend(reply[emitted - 1:emitted + kept])
        emitted += kept + 1
    return drafted, accepted, batches


SIMULATED = {"tokchat auto": lambda p, r: simulate(p, r, "auto"),
             "tokchat ngram": lambda p, r: simulate(p, r, "ngram"),
             "llama-server ngram-mod": simulate_ngram_mod,
             "llama-server ngram-simple": simulate_ngram_simple}


def tokchat_reply(backend, prompt: list[int], n: int) -> tuple[list[int], tuple[int, int] | None, int]:
    """(ids, (drafted, accepted), batches after the first id) of one greedy reply, the prompt cached first."""
    engine = backend._engine
    calls = [0]
    decode = engine.decode

    def counting(ids, *args, **kwargs):
        calls[0] += 1
        return decode(ids, *args, **kwargs)

    sampling = SamplingParams(temperature=0, max_tokens=n, repeat_penalty=1.0)
    forget(backend)  # the prompt evaluated from its first id, as a fresh llama-server does
    list(backend.generate(prompt, SamplingParams(temperature=0, max_tokens=1, repeat_penalty=1.0), set()))
    engine.decode = counting
    try:
        list(backend.generate(prompt, SamplingParams(temperature=0, max_tokens=1, repeat_penalty=1.0), set()))
        prefill = calls[0]  # the cached prompt's own calls, before the first id
        calls[0] = 0
        generation = backend.generate(prompt, sampling, set())
        ids = list(generation)
    finally:
        del engine.decode
    counts = generation.stats.draft
    return ids, (counts.drafted, counts.accepted) if counts else None, calls[0] - prefill


def row(workload: str, engine: str, n: int, counts, batches: int, same: str) -> str:
    drafted, accepted = counts or (0, 0)
    per_batch = (n - 1) / batches if batches else 0.0
    return (f"| {workload} | {engine} | {drafted} | {accepted} | {batches} | {per_batch:.2f} | {same} |")


HEADER = ("| workload | engine | drafted | accepted | batches | ids per batch | same ids as tokchat off |\n"
          "| --- | --- | ---: | ---: | ---: | ---: | --- |")


def real_run(args, chosen: dict[str, list[int]]) -> int:
    from backends.cpu import llama_default_threads
    from backends.llama_cpp import LlamaCppBackend

    threads = llama_default_threads()
    from support.assets import asset_path

    model = asset_path("qwen2.5-coder-0.5b.gguf")
    saved = json.loads(SAVED.read_text()) if SAVED.exists() else {}
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        backends = {}
        try:
            for mode in ("off", *args.modes.split(",")):
                backend = LlamaCppBackend()
                backend.load(model, LoadOptions(n_ctx=4096, n_threads=threads, speculative=mode,
                                                log_path=Path(tmp) / f"{mode}.log"))
                backends[mode] = backend
            for workload, prompt in chosen.items():
                plain, _, plain_batches = tokchat_reply(backends["off"], prompt, args.ids)
                saved[workload] = {"prompt": prompt, "reply": plain}
                lines.append(row(workload, "tokchat off", len(plain), None, plain_batches, "—"))
                for mode, backend in backends.items():
                    if mode == "off":
                        continue
                    ids, counts, batches = tokchat_reply(backend, prompt, args.ids)
                    same = "yes" if ids == plain else "no"
                    lines.append(row(workload, f"tokchat {mode}", len(ids), counts, batches, same))
                    sim = simulate(prompt, plain, mode)
                    lines.append(row(workload, f"(simulated {mode})", len(plain), sim[:2], sim[2], "—"))
                print("\n".join(lines[-3:]), flush=True)
                if args.no_server:
                    continue
                for spec in SERVER_TYPES:
                    proc, url = start_server(model, spec, threads, Path(tmp))
                    try:
                        server_round(url, prompt, 4)
                        _, counts, ids = server_round(url, prompt, args.ids)
                    finally:
                        proc.terminate()
                        proc.wait(30)
                    saved[workload].setdefault("server", {})[spec] = ids
                    accepted = counts[1] if counts else 0
                    same = "yes" if ids == plain else "no"
                    lines.append(row(workload, f"llama-server {spec}", len(ids), counts, len(ids) - 1 - accepted,
                                     same))
                    print(lines[-1], flush=True)
        finally:
            for backend in backends.values():
                backend.close()
    SAVED.write_text(json.dumps(saved))
    print(f"\n{args.ids} ids greedy, Qwen2.5-Coder-0.5B\n{HEADER}")
    print("\n".join(lines))
    return 0


def simulated_run(args) -> int:
    """Every drafter on every saved reply: tokchat's reply without speculation, and llama-server's where it differs."""
    saved = json.loads(SAVED.read_text())
    print(HEADER.replace("same ids as tokchat off", "reply"))
    for workload, run in saved.items():
        if workload not in args.only.split(","):
            continue
        replies = {"tokchat off's": run["reply"]}
        for spec, ids in run.get("server", {}).items():
            if ids not in replies.values():
                replies[f"llama-server {spec}'s"] = ids
        for source, reply in replies.items():
            for name, drafter in SIMULATED.items():
                drafted, accepted, batches = drafter(run["prompt"], reply)
                print(row(workload, f"{name} (simulated)", len(reply), (drafted, accepted), batches, source))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", type=int, default=300)
    parser.add_argument("--only", default="code rewrite,fresh prose,stdlib rewrite,json rename,typo fix")
    parser.add_argument("--modes", default="auto", help="tokchat's speculative modes besides off")
    parser.add_argument("--no-server", action="store_true")
    parser.add_argument("--simulate", action="store_true", help="replay saved replies, no model")
    args = parser.parse_args()
    if args.simulate:
        return simulated_run(args)
    from support.assets import asset_path
    from tokenizer import load_tokenizer

    tokenizer = load_tokenizer(asset_path("qwen2.5-coder-0.5b.gguf"))
    chosen = {k: v for k, v in workloads(tokenizer).items() if k in args.only.split(",")}
    return real_run(args, chosen)


if __name__ == "__main__":
    sys.exit(main())
