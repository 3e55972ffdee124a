"""Finding our tokenizer for what a server serves, when ``--model`` is not given (no server needed).

The Hugging Face cache here is a real one in hub layout (``models--ORG--REPO/snapshots/REV``,
``refs/main``), filled with the Qwen2.5 tokenizer asset, and read by huggingface_hub itself.
"""
from __future__ import annotations

import shutil

import pytest

from backends.base import BackendError
from backends.remote_connect import server_tokenizer_source
from backends.remote_protocol import ServerInfo
from tokenizer import load_tokenizer


def test_same_file_on_this_machine(smollm_path):
    assert server_tokenizer_source(ServerInfo("llamacpp", "http://h", model=str(smollm_path))) == smollm_path


def test_hf_repo_from_the_hugging_face_cache(qwen_tokenizer_dir, tmp_path, monkeypatch):
    snapshot = tmp_path / "models--Qwen--Qwen2.5-7B-Instruct" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(qwen_tokenizer_dir / name, snapshot / name)
    (tmp_path / "models--Qwen--Qwen2.5-7B-Instruct" / "refs").mkdir()
    (tmp_path / "models--Qwen--Qwen2.5-7B-Instruct" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    found = server_tokenizer_source(ServerInfo("vllm", "http://h", model="Qwen/Qwen2.5-7B-Instruct"))
    assert found == snapshot
    assert load_tokenizer(found).vocab_size == load_tokenizer(qwen_tokenizer_dir).vocab_size


def test_says_exactly_what_to_pass_when_nothing_is_found(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(BackendError) as caught:
        server_tokenizer_source(ServerInfo("vllm", "http://gpu:8000", model="Org/Big-Model"))
    message = str(caught.value)
    assert "serves Org/Big-Model" in message and "--model PATH.gguf" in message
    assert "hf download Org/Big-Model tokenizer.json tokenizer_config.json" in message
    with pytest.raises(BackendError, match="vocab-only GGUF is enough"):
        server_tokenizer_source(ServerInfo("llamacpp", "http://gpu:8080", model="/srv/models/big.gguf"))
