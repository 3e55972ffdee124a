"""``/model`` in the TUI: the picker (Pilot), and a download from the hub stand-in beside a usable chat.

The app runs for real with a scripted backend (the real tokenizer and
template of whichever model is opened); downloads use the real
huggingface_hub client against tests/support/hub_standin.py on loopback.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.tui_helpers import SIZE, send, wait_for, wait_loaded, wait_reply

from app.settings.options import ChatOptions
from app.tui.widgets.assistant_message import AssistantMessage
from app.tui.widgets.model_picker import ModelPicker
from support.hub_standin import SMOLLM_FILE, SMOLLM_REPO, serving_smollm, sha256_of

pytestmark = pytest.mark.anyio

REPO, FILE = SMOLLM_REPO, SMOLLM_FILE
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def machine(tmp_path, monkeypatch, smollm_path, gemma_path):
    """SmolLM2 in an HF cache, Gemma in a models directory, a fresh history directory."""
    storage = tmp_path / "hf" / "hub" / ("models--" + REPO.replace("/", "--"))
    (storage / "blobs").mkdir(parents=True)
    (storage / "blobs" / sha256_of(smollm_path)).symlink_to(smollm_path)
    (storage / "snapshots" / COMMIT).mkdir(parents=True)
    (storage / "snapshots" / COMMIT / FILE).symlink_to(Path("../../blobs") / sha256_of(smollm_path))
    (storage / "refs").mkdir()
    (storage / "refs" / "main").write_text(COMMIT)
    models = tmp_path / "models"
    models.mkdir()
    (models / "gemma-3-270m.gguf").symlink_to(gemma_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("TOKCHAT_DATA_DIR", str(tmp_path / "data"))
    return {"models": models, "gemma": models / "gemma-3-270m.gguf"}


def picker_rows(app) -> list[str]:
    return [str(option.prompt) for option in app.screen.query_one("#models").options]


async def test_model_opens_a_picker_that_lists_and_switches(scripted_app, machine, smollm_path):
    options = ChatOptions(model=str(smollm_path), theme="textual-dark", model_dirs=[machine["models"]])
    app = scripted_app(["hi from smollm", "hi from gemma"], options=options)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "/model")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelPicker) and app.screen.entries, what="the list")
        rows = picker_rows(app)
        gemma_row = next(i for i, row in enumerate(rows) if str(machine["gemma"]) in row)
        hf_row = next(i for i, row in enumerate(rows) if f"hf:{REPO}/{FILE}" in row)
        assert "gemma3" in rows[gemma_row] and "Q4_K_M" in rows[gemma_row] and "32k" in rows[gemma_row]
        assert rows[hf_row].startswith("● ") and "Q4_1" in rows[hf_row]  # the loaded model is marked
        assert not rows[gemma_row].startswith("●")
        assert any(row.endswith("\n  the bundled model") for row in rows)
        assert "models" in str(app.screen.query_one("#status").render())

        for _ in range(gemma_row):
            await pilot.press("down")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.chat is not None and app.chat.model_path == machine["gemma"]
                       and app.query_one("ModelBar").state == "ready", what="gemma to load")
        assert not isinstance(app.screen, ModelPicker)
        assert "gemma-3-270m" in app.query_one("ModelBar").text
        await send(pilot, "hello")
        await wait_reply(pilot)
        assert app.query(AssistantMessage).last().content == "hi from smollm"  # the turn cycle goes on

        # the palette's /model opens the same picker; Esc closes it and nothing changes
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"/model")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelPicker), what="the picker from the palette")
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ModelPicker), what="the picker to close")
        assert app.chat.model_path == machine["gemma"]


@pytest.fixture
def hub(tmp_path, monkeypatch, smollm_path):
    with serving_smollm(smollm_path, tmp_path / "hf", monkeypatch) as server:
        monkeypatch.setenv("TOKCHAT_DATA_DIR", str(tmp_path / "data"))
        yield server


async def test_a_download_runs_beside_the_chat_esc_cancels_and_the_next_resumes(scripted_app, hub, tmp_path,
                                                                                  gemma_path, smollm_path):
    hosted = hub.file(REPO, FILE)
    hosted.hold_after = 30_000_000
    options = ChatOptions(model=str(gemma_path), theme="textual-dark")
    app = scripted_app(["still chatting", "and after"], options=options)
    blobs = tmp_path / "hf" / "hub" / ("models--" + REPO.replace("/", "--")) / "blobs"
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        bar = app.query_one("ModelBar")
        await send(pilot, f"/model hf:{REPO}:Q4_1")
        await wait_for(pilot, lambda: "MB/98.4 MB" in bar.download, what="download progress")
        assert bar.download.startswith(f"↓ {FILE} ") and "/s" in bar.download and "Esc cancels" in bar.download
        assert "tokchat · " in str(bar.render()) and bar.download in str(bar.render())

        # the chat goes on with the loaded model while the download waits on the hub
        await send(pilot, "hello")
        await wait_reply(pilot)
        assert app.query(AssistantMessage).last().content == "still chatting"
        assert app.chat.model_path == gemma_path and app.pull.pulling

        await pilot.press("escape")
        await wait_for(pilot, lambda: not app.pull.pulling and bar.download == "", what="the download to stop")
        hosted.release.set()
        await wait_for(pilot, lambda: not [w for w in app.workers if w.group == "pull" and w.is_running],
                       what="the download thread to end")
        (partial,) = blobs.glob("*.incomplete")
        kept = partial.stat().st_size
        assert 0 < kept < smollm_path.stat().st_size and app.chat.model_path == gemma_path

        # the same command resumes where it stopped, then opens the model
        hosted.hold_after = None
        await send(pilot, f"/model hf:{REPO}:Q4_1")
        await wait_for(pilot, lambda: app.chat.model_path.name == FILE and bar.state == "ready" and not app.pull.pulling,
                       timeout_s=120, what="the pulled model to load")
        assert hub.gets(FILE)[-1].range == f"bytes={kept}-"
        assert sha256_of(app.chat.model_path) == sha256_of(smollm_path)
        assert os.path.realpath(app.chat.model_path).startswith(str(blobs))
        await send(pilot, "hello again")
        await wait_reply(pilot)
        assert len(app.query(AssistantMessage)) == 2  # the conversation went on with the new model
        assert app.session.messages[-2].content == "hello again"


async def test_a_failed_download_is_one_notice_and_the_chat_stays(scripted_app, hub, gemma_path):
    options = ChatOptions(model=str(gemma_path), theme="textual-dark")
    app = scripted_app(["ok"], options=options)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "/model hf:nobody/nothing-GGUF:Q4_K_M")
        await wait_for(pilot, lambda: not app.pull.pulling, what="the lookup to fail")
        await pilot.pause()
        (note,) = [n for n in app._notifications if n.title == "Download failed"]
        assert note.message.startswith("hf:nobody/nothing-GGUF:Q4_K_M: no such repo on http://127.0.0.1")
        assert app.chat.model_path == gemma_path and app.query_one("ModelBar").download == ""


async def test_a_vocabulary_only_file_is_not_offered_and_the_status_says_so(scripted_app, machine, smollm_path,
                                                                           llamacpp_models_dir):
    """Issue 34: the picker offered tokenizer test files (no weights), and choosing one failed to load."""
    from support.screen_text import drawn, words

    (machine["models"] / "ggml-vocab-qwen2.gguf").symlink_to(llamacpp_models_dir / "ggml-vocab-qwen2.gguf")
    options = ChatOptions(model=str(smollm_path), theme="textual-dark", model_dirs=[machine["models"]])
    app = scripted_app(["hi"], options=options)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(pilot)
        await send(pilot, "/model")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelPicker) and app.screen.entries, what="the list")
        await pilot.pause()
        rows = picker_rows(app)
        assert any(str(machine["gemma"]) in row for row in rows)
        assert not any("ggml-vocab-qwen2" in row for row in rows)
        status = words(drawn(app, app.screen.query_one("#status")))
        assert "1 vocabulary-only file(s) not offered (no weights)" in status, status
