"""The engine's note on a reply's counts, drawn under the reply (issue 48, item 1).

The real app through a real ``llama-server`` behind :class:`scripted_proxy.ScriptedProxy`, whose
``/completion`` stream counts one generated id fewer than it sends: the stats line under the reply says
what the server counted and what tokchat received (``GenerationStats.note``, held by the turn's stats),
where it said a fixed "the server's count differs".  (``--stats`` and the history: tests/backends/test_remote_note.py.)
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from screen_text import drawn, words
from tui_helpers import SIZE, send, wait_loaded, wait_reply

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "backends"))
from remote_servers import LlamaServer  # noqa: E402
from scripted_proxy import Reply, ScriptedProxy, token_stream  # noqa: E402

from app.settings.options import ChatOptions  # noqa: E402
from app.tui.app import ChatApp  # noqa: E402
from app.tui.widgets.assistant_message import AssistantMessage  # noqa: E402
from backends.base import SamplingParams  # noqa: E402
from backends.remote import RemoteSettings  # noqa: E402
from tokenizer import load_tokenizer  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def server(smollm_path, tmp_path):
    started = LlamaServer(smollm_path, tmp_path).start()
    yield started
    started.stop()


async def test_the_stats_line_under_the_reply_says_what_the_server_counted(server, store, smollm_path):
    tokenizer = load_tokenizer(smollm_path)
    ids = tokenizer.encode("Once upon a time")[:4]
    pieces = [tokenizer.decode([t]) for t in ids]

    def undercounted(body: dict, _upstream) -> Reply:
        events = token_stream(ids, pieces, len(body["prompt"]))
        events[-1]["tokens_predicted"] = len(ids) - 1  # the server's own count, one short
        return Reply(events=events)

    with ScriptedProxy(server.url, {"/completion": undercounted}) as proxy:
        options = ChatOptions(model=str(smollm_path), server=RemoteSettings(url=proxy.url), theme="textual-dark",
                              ctx=512, sampling=SamplingParams(temperature=0.0, max_tokens=12, seed=1))
        app = ChatApp(options, store=store)
        async with app.run_test(size=SIZE) as pilot:
            await wait_loaded(pilot)
            assert app.chat is not None, app.query_one("ModelBar").text
            await send(pilot, "Tell me a story")
            await wait_reply(pilot)
            await pilot.pause()
            shown = words(drawn(app, app.query(AssistantMessage).last()))
    note = f"the server counted {len(ids) - 1} generated ids, tokchat received {len(ids)}"
    assert tokenizer.decode(ids).strip() in shown, shown
    assert f"unverified: {note}" in shown, shown
