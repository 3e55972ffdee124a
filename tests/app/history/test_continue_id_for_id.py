"""``--resume N --continue`` is, id for id, the reply generated in one go, under the repeat penalty (issue 44 C10).

A headless continue starts a new engine: the reply's ids are part of its
prompt, and llama.cpp's logits for a position differ between one batch and
one id at a time (by up to 0.7 on SmolLM2).  With SmolLM2's default repeat
penalty 1.1 a reply of emoji has near ties, and a cut at 45 ids continued
in one batch picked another id at 49.  The engine now evaluates the reply's
own ids one at a time, as when it generated them.  The cuts are found on the
reply itself (its length moves with llama.cpp's kernels): one in its middle
and one inside a character whose UTF-8 bytes span two ids.

Real parts: SmolLM2 on the real llama.cpp engine (no KV state kept between
runs: each continue is cold), the real SQLite history, headless as the CLI
runs it.  The oracle is tokchat's own reply generated in one go.
"""
from __future__ import annotations

import io

from app.chat.headless import run_headless
from app.history.recorder import HistoryRecorder
from app.history.store import ChatStore
from app.settings.options import ChatOptions
from backends import SamplingParams

PROMPT = "Say hi 👋 to 世界"
ONE_GO = 57


def _options(model, **kwargs) -> ChatOptions:
    # greedy with the default repeat penalty (1.1, the last 64 ids), speculation off: plain decode steps
    sampling = SamplingParams(temperature=0.0, max_tokens=kwargs.pop("max_tokens"))
    assert sampling.repeat_penalty == 1.1 and sampling.repeat_last_n == 64
    return ChatOptions(model=str(model), ctx=1024, backend="cpu", sampling=sampling, speculative="off", **kwargs)


def _run(options, db) -> str:
    out, err = io.StringIO(), io.StringIO()
    recorder = HistoryRecorder(store_path=db, notify=lambda n: err.write(n + "\n"))
    try:
        status = run_headless(options, recorder=recorder, out=out, err=err)
    finally:
        recorder.close()
    assert status == 0, err.getvalue()
    return out.getvalue()


def _last_reply(db):
    with ChatStore(db) as store:
        conv_id = store.last_conversation_id()
        return conv_id, store.load(conv_id).messages[-1]


def _cuts(ids: list[int], token_bytes) -> list[int]:
    """The middle of the reply, and the last cut that falls inside a character (its prefix not whole UTF-8)."""
    inside = []
    for cut in range(2, len(ids) - 2):
        try:
            b"".join(token_bytes(i) for i in ids[:cut]).decode("utf-8")
        except UnicodeDecodeError:
            inside.append(cut)
    return sorted({len(ids) // 2, *inside[-1:]})


def test_a_cut_reply_continued_cold_is_the_one_go_reply_id_for_id(smollm_path, tmp_path):
    from tokenizer import load_tokenizer

    db = tmp_path / "history.sqlite3"
    one_go = _run(_options(smollm_path, prompt=PROMPT, max_tokens=ONE_GO), db)
    _, whole = _last_reply(db)
    assert len(whole.reply_ids) >= 24, whole.reply_ids  # long enough to cut in two places
    cuts = _cuts(list(whole.reply_ids), load_tokenizer(smollm_path).token_bytes)
    assert len(cuts) == 2, cuts  # an emoji reply: some character's bytes span two ids
    for cut in cuts:
        first = _run(_options(smollm_path, prompt=PROMPT, max_tokens=cut), db)
        conv_id, part = _last_reply(db)
        assert list(part.reply_ids) == list(whole.reply_ids[:cut])
        more = _run(_options(smollm_path, resume=conv_id, continue_reply=True, max_tokens=ONE_GO - cut), db)
        _, reply = _last_reply(db)
        assert reply.id == part.id
        assert list(reply.reply_ids) == list(whole.reply_ids), f"cut at {cut}"
        assert reply.content == whole.content
        assert first.rstrip("\n") + more.rstrip("\n") == one_go.rstrip("\n")
