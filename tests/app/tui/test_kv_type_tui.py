"""--kv-type in the TUI (issue 47, part 1), where the user sees it: the load notes drawn in the chat say the
cache's type and size and why flash attention is on, and a reply streams from the quantized cache."""
from __future__ import annotations

import pytest
from support.screen_text import drawn, words
from support.tui_helpers import SIZE, send, wait_for, wait_loaded, wait_reply

from app.settings.options import ChatOptions
from app.tui.app import ChatApp
from backends.base import SamplingParams
from backends.kv_types import parse_kv_type
from backends.model_meta import kv_cache_bytes, read_model_meta

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_a_q8_0_cache_is_named_with_its_size_and_the_chat_answers(smollm_path, store, tmp_path, monkeypatch):
    # the engine's log of its own: the note's size is read from the log since this load began
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    options = ChatOptions(model=str(smollm_path), backend="cpu", ctx=2048, kv_type="q8_0",
                          sampling=SamplingParams(temperature=0.0, max_tokens=8, seed=1))
    app = ChatApp(options, store=store)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_loaded(pilot)
        await wait_for(pilot, lambda: "KV cache q8_0" in words(drawn(app, app.chat_view)),
                       what="the load note naming the q8_0 cache")
        shown = words(drawn(app, app.chat_view))
        # SmolLM2 at 2,048 ids: 30 layers x 3 KV heads x (64 K + 64 V) values x 34/32 bytes = 23.9 MiB, what
        # llama.cpp reports (the note reads its log); f16 would be 45 MiB
        want = kv_cache_bytes(read_model_meta(smollm_path), 2048, parse_kv_type("q8_0")) / 2**20
        assert f"KV cache q8_0 {want:,.0f} MiB" in shown and round(want) == 24, shown
        assert "flash attention on: the q8_0 V cache needs it" in shown
        await send(pilot, "Hi")
        await wait_reply(pilot)
        reply = app.session.messages[-1]
        assert reply.role == "assistant" and reply.content and reply.stats.completion_tokens == 8
