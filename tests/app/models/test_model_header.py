"""A chat reads its model file's metadata once: preset matching, tokenizer and backend share one header.

Every GGUF parse goes through :func:`tokenizer.gguf.parse_gguf`, so counting
its calls counts the reads, whoever makes them.  The chats are real: the
SmolLM2 GGUF, our tokenizer, llama.cpp on the CPU.
"""
from __future__ import annotations

import io
from pathlib import Path

import pytest

import tokenizer.gguf
from app.cli import build_parser
from app.models.preset_match import chat_options
from app.chat.headless import run_headless
from app.models.header import take_header
from app.settings.options import ChatOptions
from app.tui.loader import load_chat
from backends.model_meta import read_model_meta


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKCHAT_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("TOKCHAT_DATA_DIR", str(tmp_path / "data"))


@pytest.fixture
def parses(monkeypatch) -> list[str]:
    """The paths of every GGUF header parsed from here on."""
    seen: list[str] = []
    real = tokenizer.gguf.parse_gguf

    def counting(buf, size, path="<memory>", keys=None, defer=()):
        seen.append(str(path))
        return real(buf, size, path, keys, defer)

    monkeypatch.setattr(tokenizer.gguf, "parse_gguf", counting)
    return seen


def options_for(*argv: str) -> ChatOptions:
    return chat_options(build_parser().parse_args(list(argv)))


def test_headless_chat_reads_the_header_once(smollm_path, parses):
    options = options_for("--model", str(smollm_path), "--prompt", "hi", "--max-tokens", "4", "--temp", "0",
                          "--ctx", "256", "--no-history")
    assert options.preset == "smollm2"  # the preset was matched on the header read here
    out, err = io.StringIO(), io.StringIO()
    assert run_headless(options, out=out, err=err) == 0
    assert out.getvalue().strip()
    assert parses == [str(smollm_path)]


def test_tui_loader_reads_the_header_once(smollm_path, parses):
    options = options_for("--model", str(smollm_path), "--ctx", "256")
    chat = load_chat(options, lambda text: None)
    try:
        assert chat.info.backend == "llama.cpp" and chat.info.model_name.startswith("Smollm2 135M")
        assert chat.tokenizer.encode("Hello") == chat.session.tokenizer.encode("Hello")
    finally:
        chat.backend.close()
    assert parses == [str(smollm_path)]
    # handed over once: the options no longer hold it, so a reload reads the file as it is then
    assert options.model_meta is None


def test_options_without_a_header_still_read_once(smollm_path, parses):
    options = ChatOptions(model=str(smollm_path), ctx=256)
    chat = load_chat(options, lambda text: None)
    chat.backend.close()
    assert parses == [str(smollm_path)]


def test_a_header_of_another_file_is_not_used(smollm_path, qwen_path, parses):
    options = ChatOptions(model=str(qwen_path))
    options.model_meta = read_model_meta(smollm_path)
    header = take_header(Path(qwen_path), options)
    assert header.path == Path(qwen_path) and header.architecture == "qwen2"
    assert parses == [str(smollm_path), str(qwen_path)]
    assert options.model_meta is None


def test_an_unreadable_model_leaves_the_error_to_the_tokenizer(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + bytes(20))
    assert take_header(bad, ChatOptions(model=str(bad))) is None
