"""A reply cut inside a character, then continued, is the reply generated in one go (issue 44 T3).

SmolLM2 writes an emoji as three byte-level ids, so ``max_tokens`` can cut a
reply between the bytes of one character.  The cut reply must not keep
U+FFFD for the bytes still arriving (they stay in its ids), and
``--resume N --continue`` must complete the character: stdout of the two
runs, and the stored message, equal the one-go reply's byte for byte.

Real parts: SmolLM2 on the real llama.cpp engine, the real SQLite history,
headless as the CLI runs it.  The oracle is the same reply generated in one
go; the cut is chosen from its own ids (the first one inside a character).
"""
from __future__ import annotations

import io

from app.chat.headless import run_headless
from app.history.recorder import HistoryRecorder
from app.history.store import ChatStore
from app.settings.options import ChatOptions
from backends import SamplingParams

PROMPT = "Say hi 👋 to 世界"
ONE_GO = 30


def _options(model, **kwargs) -> ChatOptions:
    sampling = SamplingParams(temperature=0.0, max_tokens=kwargs.pop("max_tokens"))
    return ChatOptions(model=str(model), ctx=1024, backend="cpu", sampling=sampling, **kwargs)


def _run(options, db) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    recorder = HistoryRecorder(store_path=db, notify=lambda n: err.write(n + "\n"))
    try:
        status = run_headless(options, recorder=recorder, out=out, err=err)
    finally:
        recorder.close()
    return status, out.getvalue(), err.getvalue()


def _cut_inside_a_character(tokenizer, ids) -> int:
    """The first length at which the reply's bytes end inside a character (the one-go text has none there)."""
    for n in range(1, len(ids)):
        data = b"".join(tokenizer.token_bytes(t) for t in ids[:n])
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.reason == "unexpected end of data":
                return n
    raise AssertionError("the one-go reply has no multi-byte character to cut inside")


def test_a_reply_cut_inside_a_character_continues_into_the_one_go_text(smollm_path, tmp_path):
    from tokenizer import load_tokenizer

    db = tmp_path / "history.sqlite3"
    status, one_go, _ = _run(_options(smollm_path, prompt=PROMPT, max_tokens=ONE_GO), db)
    assert status == 0
    with ChatStore(db) as store:
        whole = store.load(store.last_conversation_id()).messages[-1]
    assert len(whole.reply_ids) == ONE_GO
    cut = _cut_inside_a_character(load_tokenizer(smollm_path), whole.reply_ids)

    status, first, _ = _run(_options(smollm_path, prompt=PROMPT, max_tokens=cut), db)
    assert status == 0
    with ChatStore(db) as store:
        conv_id = store.last_conversation_id()
        part = store.load(conv_id).messages[-1]
    assert part.finish_reason == "length" and list(part.reply_ids) == list(whole.reply_ids[:cut])
    # the character still arriving is neither printed nor stored as U+FFFD
    assert "\ufffd" not in first and "\ufffd" not in part.content
    assert whole.content.startswith(part.content)

    status, more, err = _run(_options(smollm_path, resume=conv_id, continue_reply=True,
                                      max_tokens=ONE_GO - cut), db)
    assert status == 0, err
    assert first.rstrip("\n") + more.rstrip("\n") == one_go.rstrip("\n")
    with ChatStore(db) as store:
        reply = store.load(conv_id).messages[-1]
    assert reply.id == part.id and list(reply.reply_ids) == list(whole.reply_ids)
    assert reply.content == whole.content and "\ufffd" not in reply.content
