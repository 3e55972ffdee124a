"""Start-up: the window paints before the model loads, and typing works while it loads.

The loader here is the real chain (our tokenizer, the template, a scripted
backend) held at a gate until the test opens it, so "while it loads" is a
state the test controls rather than a race.  The import checks run in a
fresh interpreter, where ``sys.modules`` shows what the first frame needed.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from support.tui_helpers import SIZE, send, wait_for, wait_loaded, wait_reply

from app.settings.options import ChatOptions
from app.tui.app import ChatApp
from app.tui.loader import scripted_loader

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[3]


def gated_loader(model_path: Path, gate: threading.Event, started: threading.Event):
    inner = scripted_loader(model_path, ["loaded and answering"])

    def load(options, progress):
        started.set()
        if not gate.wait(60):
            raise TimeoutError("the test never opened the gate")
        return inner(options, progress)

    return load


async def test_the_window_works_while_the_model_loads(smollm_path, store):
    gate, started = threading.Event(), threading.Event()
    app = ChatApp(ChatOptions(model=str(smollm_path)), loader=gated_loader(smollm_path, gate, started),
                  store=store)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, started.is_set, what="the load to start")
            bar = app.query_one("ModelBar")
            assert bar.state == "loading" and app.chat is None
            # typing goes into the prompt box while the loader is still busy
            await pilot.press(*"hello")
            await pilot.press("ctrl+j")
            await pilot.press(*"there")
            assert app.prompt_input.text == "hello\nthere"
            # sending before the model is ready is refused, and the draft is kept
            await pilot.press("enter")
            await pilot.pause()
            assert app.prompt_input.text == "hello\nthere" and app.chat is None
            gate.set()
            await wait_loaded(pilot)
            assert bar.state == "ready"
            app.prompt_input.load_text("")
            await send(pilot, "hi")
            await wait_reply(pilot)
            assert app.session.messages[-1].content == "loaded and answering"
    finally:
        gate.set()


async def test_the_load_starts_after_the_first_frame(smollm_path, store):
    gate, started = threading.Event(), threading.Event()
    app = ChatApp(ChatOptions(model=str(smollm_path)), loader=gated_loader(smollm_path, gate, started),
                  store=store)
    frames: list[object] = []
    real_display, real_start_load = app._display, app.start_load
    frames_before_load: list[int] = []

    def display(screen, renderable) -> None:  # every frame the screen hands to the terminal
        if renderable is not None:
            frames.append(renderable)
        real_display(screen, renderable)

    def start_load() -> None:
        frames_before_load.append(len(frames))
        real_start_load()

    app._display, app.start_load = display, start_load
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, started.is_set, what="the load to start")
            assert len(frames_before_load) == 1 and frames_before_load[0] >= 1
    finally:
        gate.set()


def test_the_first_frame_needs_no_markdown_jinja_sqlite_or_engine():
    code = (
        "import sys\n"
        "from app.tui.app import ChatApp\n"
        "from app.settings.options import ChatOptions\n"
        "app = ChatApp(ChatOptions())\n"
        "import json\n"
        "heavy = ('markdown_it', 'pygments', 'jinja2', 'sqlite3', 'llama_cpp', 'openvino', 'mlx',\n"
        "         'app.tui.widgets.assistant_message', 'app.tui.screens.token_inspector')\n"
        "print(json.dumps({m: m in sys.modules for m in heavy}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert not any(loaded.values()), loaded


async def test_the_preset_and_header_are_read_in_the_load_thread_once(smollm_path, store, monkeypatch, tmp_path):
    import tokenizer.gguf
    from app.cli import build_parser
    from app.models.preset_match import chat_options
    from app.tui.loader import load_chat

    monkeypatch.setenv("TOKCHAT_CONFIG_DIR", str(tmp_path / "config"))
    parses: list[str] = []
    real_parse = tokenizer.gguf.parse_gguf

    def counting(buf, size, path="<memory>", keys=None, defer=()):
        parses.append(threading.current_thread().name)
        return real_parse(buf, size, path, keys, defer)

    monkeypatch.setattr(tokenizer.gguf, "parse_gguf", counting)
    args = build_parser().parse_args(["--model", str(smollm_path), "--ctx", "256"])
    first = chat_options(args, preset=False)
    assert first.preset is None and parses == []  # what the first frame is built from reads no model file
    seen: list[tuple[str | None, str]] = []

    def loader(options, progress):
        seen.append((options.preset, threading.current_thread().name))
        return load_chat(options, progress)

    app = ChatApp(first, loader=loader, store=store, with_preset=lambda: chat_options(args))
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        assert app.query_one("ModelBar").state == "ready"
        assert app.options.preset == "smollm2" and app.chat.context_size == 256
    assert [preset for preset, _ in seen] == ["smollm2"]
    main = threading.main_thread().name
    assert seen[0][1] != main and len(parses) == 1 and parses[0] != main
