"""The chat view's speed: tokens/s it absorbs while streaming Markdown, and opening a long chat.

1. **Streaming.**  A scripted backend replays a long Markdown reply (prose;
   prose with fenced code blocks; headings, lists, tables and code) as
   SmolLM2's real token ids, with no
   delay, through the real ChatSession (stream decoder, think filter) into
   the real ChatApp (headless, 100x30), from Enter until the reply is
   finished and on screen.  Reported beside it, in the same run:
   the session alone with no UI (the ceiling: the UI cannot absorb more
   than is produced), and the same app with the reply re-rendered in full
   on every update, the quadratic pattern ``Markdown.get_stream`` avoids.
   Target: >= 2,000 tok/s absorbed, far above any local model on a CPU.
   A burst makes only a few updates, so appending and re-rendering cost
   about the same there; a second run paces the engine at 1,000 tok/s (many
   small updates), where the difference shows.
2. **Opening a stored 500-message conversation** from a SQLite history:
   the store read, ``ChatSession.load_messages`` (re-tokenizing every
   message) and showing it (the newest 10 messages are mounted; older
   ones load a page at a time on request), until the screen has refreshed.

The machine is shared, so each figure is the best of a few runs.

    .venv/bin/python bench/bench_tui.py [--quick]
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from support.assets import asset_path  # noqa: E402

from app.settings.options import ChatOptions  # noqa: E402
from app.history.store import ChatStore  # noqa: E402
from app.tui.app import ChatApp  # noqa: E402
from app.tui.loader import scripted_loader  # noqa: E402
from app.tui.widgets.assistant_message import AssistantMessage  # noqa: E402
from backends.base import SamplingParams  # noqa: E402

SIZE = (100, 30)
CONTEXT = 65536


PROSE = ("The tokenizer splits the text with a **pre-tokenizer** regex, then merges byte pairs by rank "
         "until no merge applies; each merge is looked up in a table of `(int, int) -> int`. ")
CODE = ("```python\ndef merge(ids, pair, new_id):\n    out, i = [], 0\n    while i < len(ids):\n"
        "        if ids[i:i + 2] == list(pair):\n            out.append(new_id)\n            i += 2\n"
        "        else:\n            out.append(ids[i])\n            i += 1\n    return out\n```\n\n")
LIST = "- pairs are counted once per word\n- the lowest rank merges first\n- ids come out in order\n\n"
TABLE = "| stage | input | output |\n|---|---|---|\n| split | text | words |\n| merge | bytes | ids |\n\n"

#: reply kind -> one section; a reply repeats its section
SECTIONS = {
    "prose": PROSE * 3 + "\n\n",
    "prose + code blocks": PROSE * 3 + "\n\n" + CODE,
    "headings, lists, tables, code": "## Step\n\n" + PROSE * 2 + "\n\n" + LIST + TABLE + CODE,
}


def markdown_reply(sections: int, kind: str = "prose + code blocks") -> str:
    return SECTIONS[kind] * sections


def options(model: Path) -> ChatOptions:
    return ChatOptions(model=str(model), history=False,
                       sampling=SamplingParams(temperature=0.0, max_tokens=CONTEXT - 512))


def session_alone(model: Path, reply: str) -> tuple[int, float]:
    """(completion tokens, seconds): the session's event stream consumed with no UI."""
    chat = scripted_loader(model, [reply], context_size=CONTEXT)(options(model), lambda _text: None)
    start = time.perf_counter()
    for event in chat.session.send("Explain BPE merging."):
        if event.kind == "done":
            stats = event.stats
    return stats.completion_tokens, time.perf_counter() - start


async def through_ui(model: Path, reply: str, *, naive: bool = False, delay_s: float = 0.0
                     ) -> tuple[int, float, bool]:
    """(completion tokens, seconds, text on screen == session text) from Enter to the reply done."""
    app = ChatApp(options(model), loader=scripted_loader(model, [reply], context_size=CONTEXT, delay_s=delay_s))
    async with app.run_test(size=SIZE) as pilot:
        while app.query_one("ModelBar").state != "ready":
            await pilot.pause(0.01)
        app.prompt_input.load_text("Explain BPE merging.")
        start = time.perf_counter()
        await pilot.press("enter")
        while app.generating or app.reply is not None:
            await asyncio.sleep(0.01)
        await pilot.pause()
        elapsed = time.perf_counter() - start
        message = app.session.messages[-1]
        shown = app.query(AssistantMessage).last().content
        return message.stats.completion_tokens, elapsed, shown == message.content


async def naive_add_content(self: AssistantMessage, text: str) -> None:
    """The anti-pattern: re-parse and re-render the whole message on every update."""
    from textual.widgets import Markdown

    self.content += text
    await self.query_one(Markdown).update(self.content)


def stored_conversation(store: ChatStore, messages: int) -> int:
    """``messages`` messages: half prompts, half replies (prose and a code block) with stats."""
    conv = store.new_conversation("smollm2.gguf", "chatml", "", {}, model_name="bench")
    reply = markdown_reply(1, "prose + code blocks")
    for n in range(messages // 2):
        store.add_message(conv, _Message("user", f"Question {n}: how does merge step {n} work?"))
        stats = {"new_prompt_tokens": 20, "prompt_tokens": 40 + n, "completion_tokens": 180,
                 "reasoning_tokens": 0, "ttft_s": 0.1, "tokens_per_s": 100.0, "context_used": 200 + n,
                 "context_limit": CONTEXT, "finish_reason": "stop", "dropped_turns": 0,
                 "backend": "scripted", "device": "CPU"}
        store.add_message(conv, _Message("assistant", reply, stats=stats, finish_reason="stop"))
    return conv


class _Message:
    def __init__(self, role, content, stats=None, finish_reason=None):
        self.role, self.content, self.reasoning = role, content, ""
        self.stats, self.finish_reason = stats, finish_reason


async def open_conversation(model: Path, store: ChatStore, conv_id: int) -> dict[str, float]:
    app = ChatApp(replace(options(model), history=True), store=store,
                  loader=scripted_loader(model, ["ok"], context_size=CONTEXT))
    async with app.run_test(size=SIZE) as pilot:
        while app.query_one("ModelBar").state != "ready":
            await pilot.pause(0.01)
        t0 = time.perf_counter()
        conversation = store.load(conv_id)
        t1 = time.perf_counter()
        app.session.load_messages(conversation.chat_messages())
        t2 = time.perf_counter()
        await app.history.resume_conversation(conv_id)
        await pilot.pause()
        t3 = time.perf_counter()
        assert len(app.session.messages) == len(conversation.messages)
        assert app.query(AssistantMessage).last().content == conversation.messages[-1].content
        return {"store read": t1 - t0, "session.load_messages": t2 - t1,
                "resume (read + load + mount + refresh)": t3 - t2}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller replies, one run each")
    args = parser.parse_args()
    model = asset_path("smollm2.gguf")
    runs = 1 if args.quick else 3
    sections = 5 if args.quick else 25

    print(f"## Streaming a reply into the chat view (terminal {SIZE[0]}x{SIZE[1]}, best of {runs})\n")
    print("| reply | tokens | session alone (ceiling) tok/s | ChatApp tok/s | full re-render tok/s | "
          "ChatApp vs re-render |")
    print("|---|---:|---:|---:|---:|---:|")
    target = None
    for kind in SECTIONS:
        reply = markdown_reply(sections, kind)
        alone = min((session_alone(model, reply) for _ in range(runs)), key=lambda r: r[1])
        ui = min((asyncio.run(through_ui(model, reply)) for _ in range(runs)), key=lambda r: r[1])
        assert ui[2], "the screen's text differs from the session's"
        original = AssistantMessage.add_content
        AssistantMessage.add_content = naive_add_content
        try:
            naive = asyncio.run(through_ui(model, reply, naive=True))
        finally:
            AssistantMessage.add_content = original
        rate, naive_rate = ui[0] / ui[1], naive[0] / naive[1]
        if kind == "prose + code blocks":
            target = rate
        print(f"| {kind} | {ui[0]} | {alone[0] / alone[1]:,.0f} | {rate:,.0f} | {naive_rate:,.0f} | "
              f"{rate / naive_rate:.1f}x |")
    print(f"\nMarkdown with code blocks: {target:,.0f} tok/s absorbed; target >= 2,000 tok/s "
          f"{'met' if target >= 2000 else 'NOT met on this machine'}\n")

    # paced like a (very fast) engine: many small updates instead of one burst, which is where
    # appending beats re-rendering the whole message
    pace = 1 / 1000
    reply = markdown_reply(max(2, sections // 3), "prose + code blocks")
    ui = asyncio.run(through_ui(model, reply, delay_s=pace))
    original = AssistantMessage.add_content
    AssistantMessage.add_content = naive_add_content
    try:
        naive = asyncio.run(through_ui(model, reply, naive=True, delay_s=pace))
    finally:
        AssistantMessage.add_content = original
    produce = ui[0] * pace
    print("## Paced at 1,000 tok/s (prose + code blocks): time from Enter to the reply on screen\n")
    print(f"| path | tokens | seconds | seconds beyond the pace ({produce:.2f} s) |")
    print("|---|---:|---:|---:|")
    print(f"| ChatApp, Markdown.get_stream (tokchat) | {ui[0]} | {ui[1]:.2f} | {ui[1] - produce:.2f} |")
    print(f"| ChatApp, full re-render per update | {naive[0]} | {naive[1]:.2f} | {naive[1] - produce:.2f} |")
    print()

    with tempfile.TemporaryDirectory() as tmp:
        with ChatStore(Path(tmp) / "history.sqlite3") as store:
            conv = stored_conversation(store, 500)
            timings = [asyncio.run(open_conversation(model, store, conv)) for _ in range(runs)]
    print(f"## Opening a stored 500-message conversation (best of {runs})\n")
    print("| step | seconds |")
    print("|---|---:|")
    for key in timings[0]:
        print(f"| {key} | {min(t[key] for t in timings):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
