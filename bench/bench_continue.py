"""/continue on SmolLM2: what resuming from the reply's ids saves over sending its text again.

A reply is cut at ``--cut`` ids (max_tokens) after a long system prompt, then
continued for ``--more`` ids two ways, side by side on the same engine:

1. **ids** (tokchat's /continue): the prompt plus the reply's ids as generated;
   the engine's cache holds them, so it evaluates about one id;
2. **text, cold** (a client that re-sends the conversation as text to a fresh
   cache, as after a restart): the reply's text encoded again, everything evaluated.

Reported: ids evaluated and the time to the first new id of each, and their
ratio, plus whether the two continuations are the same ids (greedy: they can
differ when re-encoding the text gives other ids).  Ratios, not absolute
times, are what to compare: this machine is shared.

    .venv/bin/python bench/bench_continue.py [--cut 64] [--more 32]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from support.assets import asset_path  # noqa: E402

from app.chat.open import open_chat  # noqa: E402
from app.settings.options import ChatOptions  # noqa: E402
from backends import SamplingParams  # noqa: E402

SYSTEM = " ".join(["You are a careful storyteller who writes long, vivid stories."] * 40)
QUESTION = "Write a long story about a dragon who learns to bake bread."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cut", type=int, default=64)
    parser.add_argument("--more", type=int, default=32)
    args = parser.parse_args()
    path = asset_path("smollm2.gguf")
    chat = open_chat(ChatOptions(model=str(path), backend="cpu", ctx=4096, system=SYSTEM,
                                 sampling=SamplingParams(temperature=0.0, max_tokens=args.cut)))
    session, tok, backend = chat.session, chat.tokenizer, chat.backend
    try:
        list(session.send(QUESTION))
        reply = session.messages[-1]
        head = list(session.last_record.prompt.ids)
        session.sampling = replace(session.sampling, max_tokens=args.more)
        stats = [e for e in session.continue_reply() if e.kind == "done"][0].stats.parts[-1]
        by_ids = list(reply.reply_ids[args.cut:])

        # the same continuation from the reply's text, on a cache that holds nothing of it
        text_ids = head + tok.encode(tok.decode(list(reply.reply_ids[: args.cut])))
        list(backend.generate([tok.eos_id], SamplingParams(temperature=0.0, max_tokens=1), set()))  # flush
        started = time.monotonic()
        first_at = None
        by_text = []
        generation = backend.generate(text_ids, SamplingParams(temperature=0.0, max_tokens=args.more),
                                      session.stop_ids)
        for token in generation:
            first_at = first_at or time.monotonic()
            by_text.append(token)
        cold_ttft = (first_at or time.monotonic()) - started
        cold_evaluated = generation.stats.prompt_evaluated
    finally:
        backend.close()
    load = os.getloadavg()[0]
    print(f"SmolLM2-135M Q4_1, llama.cpp CPU, prompt {len(head)} ids, reply cut at {args.cut}, "
          f"continued for {args.more} (load average {load:.2f})")
    print(f"{'':12} {'evaluated':>10} {'TTFT s':>8}")
    print(f"{'ids':12} {stats['new_prompt_tokens']:>10} {stats['ttft_s']:>8.3f}")
    print(f"{'text, cold':12} {cold_evaluated:>10} {cold_ttft:>8.3f}")
    ratio = cold_ttft / stats["ttft_s"] if stats["ttft_s"] > 0 else float("inf")
    print(f"TTFT ratio (text, cold / ids): {ratio:.1f}x; same continuation: {by_ids == by_text}")


if __name__ == "__main__":
    main()
