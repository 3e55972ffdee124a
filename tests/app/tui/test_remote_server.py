"""The real app chatting through a real ``llama-server`` on loopback (``--server`` and ``/server``).

What the window shows (the model bar, the stats line under each reply) must be the
session's own accounting, which for a remote turn is checked against the server's count.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support.tui_helpers import SIZE, send, wait_loaded, wait_reply

from support.remote_servers import LlamaServer, RpcWorker  # noqa: E402

from app.settings.options import ChatOptions  # noqa: E402
from app.tui.app import ChatApp  # noqa: E402
from app.tui.format import stats_line  # noqa: E402
from app.tui.widgets.assistant_message import AssistantMessage  # noqa: E402
from backends.base import SamplingParams  # noqa: E402
from backends.remote import RemoteSettings  # noqa: E402

pytestmark = [pytest.mark.anyio]


@pytest.fixture
def server(smollm_path, tmp_path):
    started = LlamaServer(smollm_path, tmp_path).start()
    yield started
    started.stop()


@pytest.mark.slow
async def test_chat_through_the_server_shows_the_counts(server, store, smollm_path):
    options = ChatOptions(model=str(smollm_path), server=RemoteSettings(url=server.url), theme="textual-dark",
                          ctx=512,
                          sampling=SamplingParams(temperature=0.0, max_tokens=12, seed=1))
    app = ChatApp(options, store=store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        assert app.chat is not None, app.query_one("ModelBar").text
        bar = str(app.query_one("ModelBar").render())
        assert "remote on llamacpp at 127.0.0.1" in bar and "smollm2.gguf" in bar and "ctx 512" in bar
        for question in ("What is 2+2?", "And 3+3?"):
            await send(pilot, question)
            await wait_reply(pilot)
            reply = app.query(AssistantMessage).last()
            stats = app.session.messages[-1].stats
            assert stats.verified and stats.backend == "remote" and stats.completion_tokens > 0
            shown = str(reply.query_one(".stats").render())
            assert shown == stats_line(stats) and "unverified" not in shown
        # the second turn reused the server's cache: its numbers (timings.prompt_n), on screen
        assert stats.new_prompt_tokens == app.session.generation_stats.prompt_evaluated < stats.prompt_tokens

        # /server off goes back to the local engine and the conversation goes on
        await send(pilot, "/server off")
        await wait_loaded(pilot)
        assert "llama.cpp" in str(app.query_one("ModelBar").render())
        assert len(app.session.messages) == 4


def test_an_unverified_turn_says_so_under_the_reply():
    from app.conversation.session import TurnStats

    assert "unverified" in stats_line(TurnStats(completion_tokens=3, verified=False))
    assert "unverified" not in stats_line(TurnStats(completion_tokens=3))


@pytest.mark.slow
async def test_escape_closes_the_stream_and_the_server_stops(store, smollm_path, tmp_path):
    """Escape closes the HTTP stream, and the server, finding it closed, stops generating.

    The server is held (SIGSTOP) once the reply is on screen, so Escape lands mid-reply
    however slowly this machine runs; what the server generated is read from its log's
    "stop processing: n_tokens = N" line, which stays after the reply (``/slots`` resets its
    count when a reply ends, so polling it raced the reply's end).
    """
    import re

    from support.tui_helpers import wait_for

    limit = 1500
    server = LlamaServer(smollm_path, tmp_path, ctx=2048).start()
    try:
        options = ChatOptions(model=str(smollm_path), server=RemoteSettings(url=server.url),
                              theme="textual-dark", ctx=2048,
                              sampling=SamplingParams(temperature=0.0, max_tokens=limit, seed=1))
        app = ChatApp(options, store=store)
        async with app.run_test(size=SIZE) as pilot:
            await wait_loaded(pilot)
            await send(pilot, "Count from 1 to 1000, one number per line.")

            def reply_shown() -> bool:
                replies = app.query(AssistantMessage)
                return bool(replies) and len(replies.last().content) >= 10

            await wait_for(pilot, reply_shown, what="the reply to show")
            server.pause()
            assert app.generating, "the reply ended before the server was held"
            await pilot.press("escape")
            await wait_reply(pilot)
            stats = app.session.messages[-1].stats
            assert stats.finish_reason == "cancelled" and 0 < stats.completion_tokens < limit
            server.resume()
            await wait_for(pilot, lambda: not server.slots()[0]["is_processing"], 30, what="the server to stop")
        stopped = re.findall(r"stop processing: n_tokens = (\d+)", server.log.read_text())
        assert stopped, "the server never logged the end of the reply"
        generated = int(stopped[-1]) - stats.prompt_tokens
        assert stats.completion_tokens <= generated < limit
    finally:
        server.stop()


@pytest.fixture
def rpc_server(smollm_path, tmp_path):
    workers = [RpcWorker(tmp_path).start() for _ in range(2)]
    started = None
    try:
        started = LlamaServer(smollm_path, tmp_path, rpc=[w.endpoint for w in workers]).start()
        yield started
    finally:
        if started is not None:
            started.stop()  # before its workers
        for worker in workers:
            worker.stop()


@pytest.mark.slow
async def test_chat_through_a_server_split_over_two_rpc_workers(rpc_server, store):
    options = ChatOptions(server=RemoteSettings(url=rpc_server.url), theme="textual-dark",
                          sampling=SamplingParams(temperature=0.0, max_tokens=12, seed=1))
    app = ChatApp(options, store=store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        assert app.chat is not None, app.query_one("ModelBar").text
        for question in ("What is 2+2?", "And 3+3?"):
            await send(pilot, question)
            await wait_reply(pilot)
            stats = app.session.messages[-1].stats
            assert stats.verified and stats.completion_tokens > 0
            assert str(app.query(AssistantMessage).last().query_one(".stats").render()) == stats_line(stats)
        assert stats.new_prompt_tokens == app.session.generation_stats.prompt_evaluated < stats.prompt_tokens
