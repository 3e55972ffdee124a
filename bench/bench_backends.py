"""Backends on SmolLM2: decode speed of each engine, and what prefix reuse buys in a long chat.

1. tokens/s of llama.cpp, OpenVINO and MLX on the same prompt ids (greedy,
   64 ids, stop ids ignored so every engine generates the same count),
   each loaded alone so their thread pools do not compete;
2. a growing 10-turn conversation: TTFT of turn 10 over turn 1 with the
   engine's prefix cache (only the new ids are evaluated) and naively
   (the cache dropped before every turn, so the whole history is evaluated).
   Naive runs only for llama.cpp: MLX on a CPU evaluates a prompt at roughly
   its decode speed, which would take minutes.

Prompt ids come from llama.cpp's tokenizer (vocab-only load).  Ratios, not
absolute times, are what to compare: this machine is shared.

    .venv/bin/python bench/bench_backends.py [--quick]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from support.assets import asset_path  # noqa: E402

from backends.base import LoadOptions, SamplingParams  # noqa: E402

CHATML = "<|im_start|>{role}\n{text}<|im_end|>\n"
QUESTIONS = [
    "What is the capital of France?", "And of Spain?", "Which of the two is bigger?",
    "Name a river in each.", "Which river is longer?", "What language do they speak there?",
    "Say hello in both languages.", "What food is each country known for?",
    "Which one would you visit in winter?", "Summarize our conversation in one sentence.",
]


def load(engine: str, path: Path):
    if engine == "llama.cpp":
        from backends.llama_cpp import LlamaCppBackend as cls
    elif engine == "openvino":
        from backends.openvino import OpenVINOBackend as cls
    else:
        from backends.mlx import MLXBackend as cls
    backend = cls()
    backend.load(path, LoadOptions(log_path=Path("/tmp/tokchat-bench-engine.log")))
    return backend


def timed(backend, ids, sampling, stops) -> tuple[list[int], float, float]:
    """(reply ids, ttft seconds, decode tokens/s after the first id); the engine's stats in ``timed.stats``."""
    start = time.perf_counter()
    out, first, last = [], None, None
    generation = backend.generate(ids, sampling, stops)
    timed.stats = generation.stats
    for token in generation:
        last = time.perf_counter()
        first = first or last
        out.append(token)
    rate = (len(out) - 1) / (last - first) if len(out) > 1 and last > first else 0.0
    return out, (first or start) - start, rate


def speed_table(path: Path, vocab, n: int) -> list[str]:
    ids = vocab.tokenize(CHATML.format(role="user", text="Write a long story about a dragon.").encode()
                         + b"<|im_start|>assistant\n", add_bos=False, special=True)
    sampling = SamplingParams(temperature=0, max_tokens=n, repeat_penalty=1.0)
    rows, base = [], None
    for engine in ("llama.cpp", "openvino", "mlx"):
        backend = load(engine, path)
        try:
            timed(backend, ids, SamplingParams(temperature=0, max_tokens=2), set())  # warm up
            _, ttft, rate = timed(backend, vocab.tokenize(b"Once upon a time", add_bos=False) + ids, sampling, set())
            base = base or rate
            rows.append(f"| {engine} | {backend.info.device} | {rate:.1f} | {rate / base:.2f} | {ttft * 1000:.0f} |")
        finally:
            backend.close()
    return ["| backend | device | decode tok/s | vs llama.cpp | TTFT ms (cold prompt) |",
            "|---|---|---:|---:|---:|", *rows]


def conversation(backend, vocab, turns: int, naive: bool, reset) -> list[tuple[int, int, float]]:
    """(prompt ids, ids evaluated, ttft) per turn of a growing greedy chat."""
    history = vocab.tokenize(CHATML.format(role="system", text="You are a helpful assistant.").encode(),
                             add_bos=False, special=True)
    sampling = SamplingParams(temperature=0, max_tokens=24, repeat_penalty=1.0)
    eos = vocab.token_eos()
    out = []
    for q in QUESTIONS[:turns]:
        prompt = history + vocab.tokenize((CHATML.format(role="user", text=q) + "<|im_start|>assistant\n").encode(),
                                          add_bos=False, special=True)
        if naive:
            reset(backend)
        reply, ttft, _ = timed(backend, prompt, sampling, {eos})
        out.append((len(prompt), timed.stats.prompt_evaluated, ttft))
        if reply[-1] != eos:
            reply.append(eos)
        history = prompt + reply + vocab.tokenize(b"\n", add_bos=False)
    return out


def _reset_llama(backend) -> None:
    backend._worker.wait_idle()
    backend._llm.reset()


def ttft_table(path: Path, vocab, turns: int) -> list[str]:
    rows = []
    for engine, naive_too in (("llama.cpp", True), ("openvino", False), ("mlx", False)):
        backend = load(engine, path)
        try:
            # warm up on unrelated ids, so turn 1 finds nothing of the conversation cached
            timed(backend, vocab.tokenize(b"Hello world, this is a warm-up.", add_bos=False),
                  SamplingParams(temperature=0, max_tokens=2), set())
            modes = [("prefix reuse", False)] + ([("naive re-evaluation", True)] if naive_too else [])
            for label, naive in modes:
                if engine == "llama.cpp":
                    _reset_llama(backend)
                turns_data = conversation(backend, vocab, turns, naive, _reset_llama)
                (p1, e1, t1), (pn, en, tn) = turns_data[0], turns_data[-1]
                rows.append(f"| {engine} | {label} | {p1} / {pn} | {e1} / {en} | {t1 * 1000:.0f} | {tn * 1000:.0f} | {tn / t1:.2f} |")
        finally:
            backend.close()
    return [f"| backend | mode | prompt ids turn 1 / {turns} | evaluated turn 1 / {turns} | TTFT turn 1 ms | "
            f"TTFT turn {turns} ms | turn {turns} / turn 1 |", "|---|---|---:|---:|---:|---:|---:|", *rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer ids and turns")
    args = parser.parse_args()
    import llama_cpp

    path = asset_path("smollm2.gguf")
    vocab = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    print("### Decode speed on SmolLM2-135M Q4_1 (greedy, same prompt ids)\n")
    print("\n".join(speed_table(path, vocab, 24 if args.quick else 64)))
    turns = 4 if args.quick else 10
    print(f"\n### TTFT in a growing {turns}-turn conversation\n")
    print("\n".join(ttft_table(path, vocab, turns)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
