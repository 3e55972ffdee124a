"""What the engine says of a remote reply, drawn with it (issue 48, item 1).

The real app through a real ``llama-server`` behind :class:`scripted_proxy.ScriptedProxy`.  A ``/completion``
stream that counts one generated id fewer than it sends: the stats line under the reply says what the server
counted and what tokchat received (``GenerationStats.note``, held by the turn's stats), where it said a fixed
"the server's count differs" (``--stats`` and the history: tests/backends/test_remote_note.py).  A reply the
server aborts: drawn with the server's line as its error, and stored as cut ("error").
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support.screen_text import drawn, words
from support.tui_helpers import SIZE, send, wait_loaded, wait_reply

from support.remote_servers import LlamaServer  # noqa: E402
from support.scripted_proxy import Reply, ScriptedProxy, token_stream  # noqa: E402

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


async def test_a_reply_the_server_aborts_is_drawn_and_stored_as_cut(server, store, smollm_path):
    """SGLang's ``finish_reason {"type": "abort"}`` after three ids (the engine's reason, "error", set once by the
    remote backend): the reply is drawn with the server's line as its error, and stored with that reason, where
    before issue 44/48 it was a finished "stop".  (Headless: tests/backends/test_remote_cut_replies.py.)"""
    tokenizer = load_tokenizer(smollm_path)
    ids = tokenizer.encode("Once upon a time")[:3]
    pieces = [tokenizer.decode([t]) for t in ids]

    def aborted(body: dict, _upstream) -> Reply:
        events = []
        for n in range(1, len(ids) + 1):
            finish = {"type": "abort", "message": "request aborted by the scheduler"} if n == len(ids) else None
            events.append({"text": "".join(pieces[:n]), "output_ids": ids[:n],
                           "meta_info": {"id": "r", "prompt_tokens": len(body["input_ids"]), "completion_tokens": n,
                                         "cached_tokens": 0, "finish_reason": finish}})
        return Reply(events=events)

    scripts = {"/generate": aborted,
               "/get_model_info": lambda _b, _u: Reply(body={"model_path": str(smollm_path)}),
               "/get_server_info": lambda _b, _u: Reply(body={"version": "0.4.0", "context_length": 2048}),
               "/props": lambda _b, _u: Reply(status=404, body={"error": {"message": "not found"}})}
    with ScriptedProxy(server.url, scripts) as proxy:
        options = ChatOptions(model=str(smollm_path), theme="textual-dark", ctx=512,
                              server=RemoteSettings(url=proxy.url, kind="sglang", trust_server_vocab=True),
                              sampling=SamplingParams(temperature=0.0, max_tokens=64, seed=1))
        app = ChatApp(options, store=store)
        async with app.run_test(size=SIZE) as pilot:
            await wait_loaded(pilot)
            assert app.chat is not None, app.query_one("ModelBar").text
            await send(pilot, "Tell me a story")
            await wait_reply(pilot)
            await pilot.pause()
            shown = words(drawn(app, app.query(AssistantMessage).last(), inside=True))  # inside its border
    assert tokenizer.decode(ids).strip() in shown, shown
    assert "error: the server at" in shown and 'finish_reason "abort"' in shown and "tok/s · error" in shown, shown
    reply = store.load(1).messages[-1]
    assert (reply.content, reply.finish_reason, reply.completion_tokens) == (tokenizer.decode(ids), "error", 3)
