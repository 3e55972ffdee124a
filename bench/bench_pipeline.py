"""Pipeline overhead: a raw ``Llama.generate`` loop vs tokchat's whole headless pipeline.

Both sides run llama.cpp on SmolLM2 with the same prompt ids, the same
greedy settings, the same thread count and the same context size, in
alternating rounds.  The tokchat side is everything ``tokchat --prompt``
does per token: the backend's worker thread and queue, the session's
stream decoder, think filter and accounting (``app.conversation.session.ChatSession``).
Decode tokens/s is counted from the first to the last id, so prompt
evaluation (and prefix reuse) does not enter.  Target: tokchat >= 0.98 of raw.
The best round of each side is reported next to the medians: on a shared
machine it is the round least disturbed by other processes.

    .venv/bin/python bench/bench_pipeline.py [--rounds N] [--tokens N]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from support.assets import asset_path  # noqa: E402

from app.chat.open import open_chat  # noqa: E402
from app.settings.options import ChatOptions  # noqa: E402
from backends.base import SamplingParams  # noqa: E402
from backends.llama_cpp import default_threads  # noqa: E402

PROMPT = "Write a long story about a dragon who learns to cook."


def raw_round(llm, ids: list[int], n: int, stops: frozenset[int]) -> tuple[int, float]:
    """(ids generated, decode tokens/s) of a plain Llama.generate loop."""
    count, first, last = 0, None, None
    for token in llm.generate(ids, temp=0.0, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.0):
        last = time.perf_counter()
        first = first or last
        count += 1
        if token in stops or count >= n:
            break
    return count, (count - 1) / (last - first)


def tokchat_round(session, n: int) -> tuple[int, float, list[int]]:
    """(ids generated, decode tokens/s, prompt ids) of one headless turn."""
    session.reset()
    first = last = None
    stats = None
    for event in session.send(PROMPT):
        now = time.perf_counter()
        if event.kind in ("content", "reasoning"):
            first = first or now
            last = now
        elif event.kind == "done":
            last = now
            stats = event.stats
    return stats.completion_tokens, (stats.completion_tokens - 1) / (last - first), list(session.last_prompt.ids)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--tokens", type=int, default=96)
    args = parser.parse_args()
    import llama_cpp

    path = asset_path("smollm2.gguf")
    sampling = SamplingParams(temperature=0, max_tokens=args.tokens, repeat_penalty=1.0)
    session = open_chat(ChatOptions(model=str(path), sampling=sampling, history=False)).session
    threads = default_threads()
    llm = llama_cpp.Llama(str(path), n_ctx=session.backend.info.context_size, n_threads=threads,
                          n_threads_batch=threads, verbose=False)
    _, _, ids = tokchat_round(session, args.tokens)  # warm up both, and take the exact prompt ids
    raw_round(llm, ids, 4, frozenset())
    raws, ours, counts = [], [], set()
    for _ in range(args.rounds):
        n_raw, r = raw_round(llm, ids, args.tokens, session.stop_ids)
        n_ours, o, _ = tokchat_round(session, args.tokens)
        raws.append(r)
        ours.append(o)
        counts.update({n_raw, n_ours})
    ratios = [o / r for o, r in zip(ours, raws)]
    print(f"SmolLM2-135M Q4_1, llama.cpp CPU, {threads} thread(s), {len(ids)} prompt ids, "
          f"{sorted(counts)} generated ids per round, {args.rounds} alternating rounds\n")
    # the best round of each side is the one least disturbed by other load on a shared machine
    print("| pipeline | decode tok/s (best round) | decode tok/s (median) | best / raw best | median of paired ratios |")
    print("|---|---:|---:|---:|---:|")
    print(f"| raw Llama.generate loop | {max(raws):.1f} | {statistics.median(raws):.1f} | 1.000 | 1.000 |")
    print(f"| tokchat headless session | {max(ours):.1f} | {statistics.median(ours):.1f} | "
          f"{max(ours) / max(raws):.3f} | {statistics.median(ratios):.3f} |")
    print(f"\nper-round ratios: {', '.join(f'{x:.3f}' for x in ratios)}")
    session.backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
