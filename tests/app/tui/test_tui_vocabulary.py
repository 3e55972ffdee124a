"""A conversation started in the TUI stores its vocabulary's fingerprint, as a headless one does (issue 34).

Without it, ``--resume`` of a TUI conversation against another model (a server restarted with
another model, a ``--model`` of another vocabulary) went on silently: the old replies re-encoded
into ids of another vocabulary.  Real parts: the real app on SmolLM2 (llama.cpp, CPU) driven by
Pilot, the real SQLite history, and a real headless ``python -m app`` process resuming it.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.process_env import child_env
from support.tui_helpers import SIZE, send, wait_loaded, wait_reply

from app.history.model_identity import SETTINGS_KEY, vocabulary_fingerprint
from app.history.store import ChatStore
from app.settings.options import ChatOptions
from app.tui.app import ChatApp
from backends.base import SamplingParams
from tokenizer import load_tokenizer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]


async def test_a_tui_conversation_stores_its_vocabulary_and_a_resume_with_another_is_refused(
        smollm_path, qwen_path, tmp_path):
    env = child_env(tmp_path)
    db = Path(env["TOKCHAT_DATA_DIR"]) / "history.sqlite3"  # where the headless run below looks
    db.parent.mkdir(parents=True)
    options = ChatOptions(model=str(smollm_path), backend="cpu", ctx=1024,
                          sampling=SamplingParams(temperature=0.0, max_tokens=4, seed=1))
    with ChatStore(db) as store:
        app = ChatApp(options, store=store)
        async with app.run_test(size=SIZE) as pilot:
            await wait_loaded(pilot)
            assert app.chat is not None
            await send(pilot, "Say hi")
            await wait_reply(pilot)
        conversation = store.load(1)
    assert [m.role for m in conversation.messages] == ["user", "assistant"]
    assert conversation.info.settings[SETTINGS_KEY] == vocabulary_fingerprint(load_tokenizer(smollm_path))

    done = subprocess.run([sys.executable, "-m", "app", "-m", str(qwen_path), "--resume", "1", "--prompt", "And now?",
                           "--max-tokens", "2"], cwd=ROOT, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=600)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    refusal = [line for line in done.stderr.splitlines() if "--switch-model" in line]
    assert len(refusal) == 1 and "has another vocabulary" in refusal[0], done.stderr
    with ChatStore(db) as store:
        assert len(store.load(1).messages) == 2  # nothing added


async def test_model_in_the_tui_records_the_new_vocabulary(smollm_path, qwen_path, tmp_path):
    """``/model`` goes on with the same conversation in another vocabulary: the switch is recorded, as headless
    ``--switch-model`` records it, so a later ``--resume`` compares against the model that wrote last."""
    from support.tui_helpers import wait_for

    options = ChatOptions(model=str(smollm_path), backend="cpu", ctx=1024,
                          sampling=SamplingParams(temperature=0.0, max_tokens=4, seed=1))
    with ChatStore(tmp_path / "history.sqlite3") as store:
        app = ChatApp(options, store=store)
        async with app.run_test(size=SIZE) as pilot:
            await wait_loaded(pilot)
            await send(pilot, "Say hi")
            await wait_reply(pilot)
            before = store.load(1).info.settings
            await send(pilot, f"/model {qwen_path}")
            await wait_for(pilot, lambda: app.chat is not None and app.chat.model_path == qwen_path, 120,
                           what="the second model")
            await wait_loaded(pilot)
        after = store.load(1).info.settings
    assert before[SETTINGS_KEY] == vocabulary_fingerprint(load_tokenizer(smollm_path))
    assert after[SETTINGS_KEY] == vocabulary_fingerprint(load_tokenizer(qwen_path))
    assert after["preset"] == "qwen2.5" and before["preset"] is None  # the settings it now goes on with
    assert {k: v for k, v in after.items() if k not in (SETTINGS_KEY, "preset")} == \
        {k: v for k, v in before.items() if k not in (SETTINGS_KEY, "preset")}


async def test_a_chat_opened_from_the_sidebar_with_another_vocabulary_goes_on_from_its_text(
        smollm_path, qwen_path, tmp_path):
    """Issue 34's left-out item: the sidebar's resume compares vocabularies as ``--resume`` does.

    The worst case: the loaded model has the same name as the one that wrote the conversation (here a link
    named like SmolLM2's file, to Qwen) but another vocabulary, so ``/continue`` sent the stored reply's
    SmolLM2 ids to Qwen.  Now the reply is encoded again from its text, the notice says so on screen, and the
    switch is recorded.  Real tokenizers and template, real SQLite; the backend replays fixed replies."""
    from support.screen_text import toasts
    from support.tui_helpers import wait_for

    from app.tui.loader import scripted_loader

    same_name = tmp_path / "other" / smollm_path.name
    same_name.parent.mkdir()
    same_name.symlink_to(qwen_path)
    with ChatStore(tmp_path / "history.sqlite3") as store:
        first = ChatApp(ChatOptions(model=str(smollm_path), theme="textual-dark",
                                    sampling=SamplingParams(max_tokens=2)), store=store,
                        loader=scripted_loader(smollm_path, ["stored answer that max_tokens cuts"]))
        async with first.run_test(size=SIZE) as pilot:
            await wait_loaded(pilot)
            await send(pilot, "remember me")
            await wait_reply(pilot)
        cut = store.load(1).messages[-1].content
        assert cut and "max_tokens cuts" not in cut
        app = ChatApp(ChatOptions(model=str(same_name), theme="textual-dark"), store=store,
                      loader=scripted_loader(same_name, ["next answer"]))
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            await wait_loaded(pilot)
            await app.history.resume_conversation(1)
            await pilot.pause()
            shown = " ".join(toasts(app))
            assert "#1 was written by" in shown and "encoded again from their text" in shown, shown
            await send(pilot, "/continue")  # the cut reply goes on from its ids
            await wait_reply(pilot)
            await wait_for(pilot, lambda: store.load(1).messages[-1].content.endswith("next answer"),
                           what="the continued reply stored")
            sent = app.chat.backend._cached  # the prompt the backend was given, in Qwen's ids
        settings = store.load(1).info.settings
    qwen = load_tokenizer(qwen_path)
    assert f"<|im_start|>assistant\n{cut}next answer" in qwen.decode(sent)
    assert settings[SETTINGS_KEY] == vocabulary_fingerprint(qwen)


async def test_model_to_another_vocabulary_sets_the_draft_model_aside_and_takes_it_back_after(
        smollm_path, qwen_path, tmp_path):
    """``/model`` with a draft model configured (``--draft-model``) to a model of another vocabulary used to be
    refused ("… cannot draft for smollm2.gguf"): the draft model, an aid, blocked the model the user asked for.
    Now the new model loads without it and a notice on screen says so; back on a model of the draft's
    vocabulary, it drafts again."""
    from support.screen_text import drawn, words
    from support.tui_helpers import wait_for

    options = ChatOptions(model=str(qwen_path), backend="cpu", ctx=1024, speculative="auto",
                          draft_model=qwen_path, sampling=SamplingParams(temperature=0.0, max_tokens=4, seed=1))
    with ChatStore(tmp_path / "history.sqlite3") as store:
        app = ChatApp(options, store=store)
        async with app.run_test(size=SIZE) as pilot:
            await wait_loaded(pilot)
            assert "draft model qwen2.5-coder-0.5b.gguf" in words(drawn(app))
            await send(pilot, f"/model {smollm_path}")
            await wait_for(pilot, lambda: app.chat is not None and app.chat.model_path == smollm_path, 120,
                           what="the second model")
            await wait_loaded(pilot)
            screen = words(drawn(app).replace("█", " "))  # a notice's left bar starts each of its rows
            assert "Could not load" not in screen
            assert ("draft model qwen2.5-coder-0.5b.gguf set aside for smollm2.gguf: their vocabularies have "
                    "151936 and 49152 tokens" in screen), screen
            await send(pilot, "Say hi")
            await wait_reply(pilot)
            assert app.session.messages[-1].role == "assistant"
            await send(pilot, f"/model {qwen_path}")
            await wait_for(pilot, lambda: app.chat is not None and app.chat.model_path == qwen_path, 120,
                           what="the first model again")
            await wait_loaded(pilot)
            assert any("draft model qwen2.5-coder-0.5b.gguf: drafts" in note for note in app.chat.info.notes)


def test_which_draft_model_a_model_switch_keeps(smollm_path, qwen_path, qwen15_path, tmp_path):
    """``draft_for_model`` on real files: the draft model stays where it fits, is set aside (with the reason)
    where its vocabulary differs or it cannot be read, and is no matter where nothing would load it."""
    from app.tui.loader import draft_for_model

    def switched(model: Path, draft: Path, speculative: str = "auto") -> tuple[ChatOptions, str | None]:
        return draft_for_model(ChatOptions(model=str(model), model_path=model, draft_model=draft,
                                           speculative=speculative))

    kept, notice = switched(qwen15_path, qwen_path)
    assert kept.draft_model == qwen_path and notice is None
    aside, notice = switched(smollm_path, qwen_path, "draft")
    assert aside.draft_model is None and aside.speculative == "auto"  # "draft" has nothing to draft with now
    assert notice == ("draft model qwen2.5-coder-0.5b.gguf set aside for smollm2.gguf: their vocabularies have "
                      "151936 and 49152 tokens; speculation: prompt lookup only")
    gone = tmp_path / "deleted.gguf"
    aside, notice = switched(qwen15_path, gone)
    assert aside.draft_model is None and notice.startswith(
        "draft model deleted.gguf set aside for qwen2.5-coder-1.5b.gguf: it cannot be read: ")
    unused, notice = switched(smollm_path, qwen_path, "ngram")  # ngram loads no draft model
    assert unused.draft_model == qwen_path and notice is None
