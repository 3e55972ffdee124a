"""Regenerate docs/screenshot.svg: the real app on the real SmolLM2 after two turns.

    .venv/bin/python tests/app/tui/make_screenshot.py [docs/screenshot.svg]

Not a test (the file name keeps pytest away): the picture holds real
timings, which differ on every run.
"""
from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parent), str(HERE)]

from support.assets import asset_path  # noqa: E402
from support.tui_helpers import send, wait_loaded, wait_reply  # noqa: E402

from app.settings.options import ChatOptions  # noqa: E402
from app.history.store import ChatStore  # noqa: E402
from app.tui.app import ChatApp  # noqa: E402
from backends.base import SamplingParams  # noqa: E402


async def shoot(target: Path) -> None:
    options = ChatOptions(model=str(asset_path("smollm2.gguf")), backend="cpu", ctx=4096,
                          system="You are a concise assistant.",
                          sampling=SamplingParams(temperature=0.0, max_tokens=160))
    with tempfile.TemporaryDirectory() as tmp, ChatStore(Path(tmp) / "history.sqlite3") as store:
        app = ChatApp(options, store=store)
        async with app.run_test(size=(110, 40)) as pilot:
            await wait_loaded(pilot)
            await send(pilot, "What is the capital of France?")
            await wait_reply(pilot, 600)
            await send(pilot, "Write a Python function that reverses a string.")
            await wait_reply(pilot, 600)
            app.prompt_input.load_text("Now explain how it works")
            await pilot.pause(0.5)
            app.prompt_input.cursor_blink = False
            await pilot.pause()
            target.parent.mkdir(parents=True, exist_ok=True)
            app.save_screenshot(filename=target.name, path=str(target.parent))


if __name__ == "__main__":
    asyncio.run(shoot(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/screenshot.svg")))
