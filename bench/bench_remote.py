"""Remote vs local: the same model through llama-server on loopback and through our llama.cpp backend.

A 10-turn greedy chat on SmolLM2 (``--model qwen`` for Qwen2.5-Coder-0.5B), turns
alternating between the two so both see the same machine load:

* TTFT of turn 1 and turn 10 and their ratio: both reuse their prompt cache
  (llama-server's slot with ``cache_prompt``, our backend's prefix reuse);
* decode tokens/s as tokchat measures it on arrival, and for the remote side the
  server's own ``timings.predicted_per_second``: their ratio is what the HTTP client,
  the SSE parsing and the accounting cost (goal: >= 0.9).

Both engines run one thread (this machine has two cores, shared).  The server is the
``llama-server`` test asset (``python tests/support/assets.py``).

    .venv/bin/python bench/bench_remote.py [--model smollm|qwen] [--turns 10] [--max-tokens 48]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "backends"))

from support.assets import asset_path  # noqa: E402
from support.remote_servers import LlamaServer  # noqa: E402

from app.settings.options import ChatOptions  # noqa: E402
from app.chat.open import open_chat  # noqa: E402
from app.conversation.session import ChatSession  # noqa: E402
from backends.base import LoadOptions, SamplingParams  # noqa: E402
from backends.remote import RemoteSettings  # noqa: E402

QUESTIONS = [
    "What is the capital of France?", "And of Spain?", "Which of the two is bigger?",
    "Name a river in each.", "Which river is longer?", "What language do they speak there?",
    "Say hello in both languages.", "What food is each country known for?",
    "Which one would you visit in winter?", "Summarize our conversation in one sentence.",
]
MODELS = {"smollm": "smollm2.gguf", "qwen": "qwen2.5-coder-0.5b.gguf"}


def local_session(model: Path, sampling: SamplingParams, ctx: int, log: Path) -> ChatSession:
    from backends.llama_cpp import LlamaCppBackend

    # llama.cpp in this process, one thread: the same engine the server runs, without the hop
    backend = LlamaCppBackend()
    backend.load(model, LoadOptions(n_ctx=ctx, n_threads=1, log_path=log))
    return open_chat(ChatOptions(model=str(model), sampling=sampling, ctx=ctx), backend=backend).session


def remote_session(url: str, model: Path, sampling: SamplingParams) -> ChatSession:
    return open_chat(ChatOptions(model=str(model), server=RemoteSettings(url=url), sampling=sampling)).session


def turn(session: ChatSession, question: str):
    stats = None
    for event in session.send(question):
        if event.kind == "error":
            raise SystemExit(f"error: {event.text}")
        stats = event.stats or stats
    return stats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="smollm")
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()
    model = asset_path(MODELS[args.model])
    sampling = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, seed=1)
    ctx = 2048
    with tempfile.TemporaryDirectory() as tmp:
        server = LlamaServer(model, Path(tmp), ctx=ctx).start()
        try:
            local = local_session(model, sampling, ctx, Path(tmp) / "local.log")
            remote = remote_session(server.url, model, sampling)
            rows: dict[str, list] = {"local": [], "remote": []}
            server_speed: list[float] = []
            for question in QUESTIONS[: args.turns]:
                rows["local"].append(turn(local, question))
                rows["remote"].append(turn(remote, question))
                server_speed.append(remote.generation_stats.tokens_per_s or 0.0)  # the server's own timing
            local.backend.close()
            remote.backend.close()
        finally:
            server.stop()

    def speed(stats_list):
        return statistics.median(s.tokens_per_s for s in stats_list if s.completion_tokens > 1)

    print(f"**Remote vs local** ({args.model}, {args.turns} turns, greedy, {args.max_tokens} tokens max, 1 thread each)\n")
    print("| engine | TTFT turn 1 | TTFT turn 10 | turn 10 / turn 1 | evaluated turn 10 / prompt | decode tok/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, stats in rows.items():
        first, last = stats[0], stats[-1]
        print(f"| {'llama-server (tokchat --server)' if name == 'remote' else 'llama.cpp (local)'} "
              f"| {first.ttft_s * 1000:.0f} ms | {last.ttft_s * 1000:.0f} ms | {last.ttft_s / first.ttft_s:.2f} "
              f"| {last.new_prompt_tokens} / {last.prompt_tokens} | {speed(stats):.1f} |")
    ours = [s.tokens_per_s for s in rows["remote"] if s.completion_tokens > 1]
    ratios = [a / b for a, b in zip(ours, server_speed) if b]
    print(f"\nremote tok/s as tokchat measured it / the server's own predicted_per_second: median "
          f"{statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}) over {len(ratios)} turns; "
          f"remote / local decode: {speed(rows['remote']) / speed(rows['local']):.2f}; "
          f"every remote turn verified: {all(s.verified for s in rows['remote'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
