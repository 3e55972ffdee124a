"""The token inspector on a full 8k context: how long it takes to open, and to scroll a page.

A scripted backend (SmolLM2's real tokenizer and template) answers a few
long turns until the prompt holds about 8,000 ids in an 8,192-token
context; then, in the real ChatApp (headless, 80x30):

1. **Open**: from F2 until the inspector is on screen and painted (the
   breakdown is computed, the pieces laid out, the first rows drawn).
2. **Scroll**: a page down through the whole prompt, per page, until painted
   (without the key's scroll animation, which is time spent on purpose).

The floor beside it: pushing an empty screen with a footer, which costs
what any screen costs on this machine.

Beside it, in the same run, the same rows written into Textual's
``RichLog`` (every row rendered up front, the usual way to show long
styled text): the cost the line-API view avoids.  Target: open < 0.3 s.
Each figure is the best of a few runs (the machine is shared).

    .venv/bin/python bench/bench_inspector.py [--quick]
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from support.assets import asset_path  # noqa: E402

from app.settings.options import ChatOptions  # noqa: E402
from app.history.store import ChatStore  # noqa: E402
from app.tui.app import ChatApp  # noqa: E402
from app.tui.loader import scripted_loader  # noqa: E402
from app.tui.screens.token_inspector import TokenInspector  # noqa: E402
from app.tui.widgets.token_view import TokenView  # noqa: E402
from backends.base import SamplingParams  # noqa: E402

SIZE = (80, 30)
CONTEXT = 8192
TURN = "Explain how byte pair encoding merges the most frequent pair of symbols, step by step. " * 40


async def _wait(pilot, condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        await pilot.pause(0.001)


async def one_run(model: Path, store: ChatStore, turns: int) -> dict[str, float]:
    options = ChatOptions(model=str(model), theme="textual-dark",
                          sampling=SamplingParams(temperature=0.0, max_tokens=200))
    app = ChatApp(options, loader=scripted_loader(model, [TURN[:600]], context_size=CONTEXT), store=store)
    out: dict[str, float] = {}
    async with app.run_test(size=SIZE) as pilot:
        await _wait(pilot, lambda: app.query_one("ModelBar").state == "ready")
        for _ in range(turns):
            app.prompt_input.load_text(TURN)
            await pilot.press("enter")
            await pilot.pause()
            await _wait(pilot, lambda: not app.generating)
        out["prompt_ids"] = len(app.session.last_record.ids)
        start = time.perf_counter()
        await pilot.press("f2")
        await _wait(pilot, lambda: isinstance(app.screen, TokenInspector) and app.screen.query(TokenView)
                    and app.screen.query_one(TokenView).row_count > 0)
        await pilot.pause()
        out["open_s"] = time.perf_counter() - start
        view = app.screen.query_one(TokenView)
        rows = view.row_count
        pages = 0
        start = time.perf_counter()
        while view.scroll_offset.y + view.size.height < rows and pages < 400:
            view.scroll_page_down(animate=False)  # the key animates the scroll; here only drawing counts
            await pilot.pause()
            pages += 1
        out["page_s"] = (time.perf_counter() - start) / max(1, pages)
        out["rows"] = rows

        # the floor: pushing an empty screen with a footer, nothing computed
        from textual.screen import Screen
        from textual.widgets import Footer, Static

        class Empty(Screen):
            def compose(self):
                yield Static("empty")
                yield Footer()

        start = time.perf_counter()
        await app.push_screen(Empty())
        await pilot.pause()
        out["empty_s"] = time.perf_counter() - start
        app.pop_screen()
        await pilot.pause()

        # the same rows written into a RichLog, rendered up front
        from rich.text import Text
        from textual.widgets import RichLog

        lines = [view.row_strip(y) for y in range(rows)]
        texts = [Text.assemble(*[(seg.text, seg.style) for seg in strip]) for strip in lines]
        log = RichLog(wrap=False, markup=False)
        start = time.perf_counter()
        await app.screen.mount(log)
        for text in texts:
            log.write(text)
        await pilot.pause()
        out["richlog_s"] = time.perf_counter() - start
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one run instead of three")
    args = parser.parse_args()
    model = asset_path("smollm2.gguf")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(1 if args.quick else 3):
            with ChatStore(Path(tmp) / f"h{n}.sqlite3") as store:
                runs.append(asyncio.run(one_run(model, store, turns=9)))
    best = {key: min(r[key] for r in runs) for key in runs[0]}
    print(f"prompt: {int(best['prompt_ids'])} ids of {CONTEXT}, {int(best['rows'])} rows at {SIZE[0]} columns\n")
    print("| what | seconds | vs TokenView open |")
    print("|---|---:|---:|")
    print(f"| open the inspector (F2 to painted) | {best['open_s']:.3f} | 1.00 |")
    print(f"| one page scrolled, painted | {best['page_s']:.4f} | {best['page_s'] / best['open_s']:.2f} |")
    print(f"| floor: an empty screen with a footer pushed | {best['empty_s']:.3f} | "
          f"{best['empty_s'] / best['open_s']:.2f} |")
    print(f"| the same rows written into a RichLog | {best['richlog_s']:.3f} | "
          f"{best['richlog_s'] / best['open_s']:.2f} |")
    opens = [r["open_s"] for r in runs]
    print(f"\n(open times over the runs: {', '.join(f'{t:.3f}' for t in opens)}; "
          f"median {statistics.median(opens):.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
