"""Issue 26 against a real ``llama-server`` on loopback: connect-time patience, the wrong
``--server-kind``, a reply of zero ids, TLS to a plain-HTTP port, bad ports, and the
context-size note.

Every server is the real binary from the test assets (:mod:`remote_servers`), started per
test on a free port and always stopped.
"""
from __future__ import annotations

import argparse
import re
import time

import pytest
from support.remote_servers import LlamaServer, free_port

from app.models.preset_match import load_settings
from app.settings.merge import options_from_settings
from backends.base import BackendError, SamplingParams
from backends.remote import RemoteBackend, RemoteSettings
from backends.remote_connect import connect, open_client
from backends.remote_vllm import VLLMAdapter
from tokenizer import load_tokenizer

pytestmark = pytest.mark.slow


@pytest.fixture
def server(smollm_path, tmp_path):
    started = LlamaServer(smollm_path, tmp_path).start()
    yield started
    started.stop()


def test_a_frozen_server_fails_the_connect_within_the_connect_timeout(server, smollm_path):
    """SIGSTOP: the socket accepts (the kernel does) but nothing answers; before, the
    connect-time requests waited the generation patience (first token + 5 s)."""
    tokenizer = load_tokenizer(smollm_path)
    settings = RemoteSettings(url=server.url, connect_timeout_s=1.0, first_token_timeout_s=120.0)
    server.pause()
    started = time.monotonic()
    with pytest.raises(BackendError) as caught:
        connect(settings, tokenizer, str(smollm_path))
    elapsed = time.monotonic() - started
    message = str(caught.value)
    assert "did not answer /health within 1 s (server.connect_timeout)" in message, message
    assert "\n" not in message
    print(f"frozen server: connect failed in {elapsed:.2f} s")


def test_a_frozen_server_mid_connect_names_the_request(server, smollm_path):
    """Frozen after /health answered: the /props (or probe) request fails in the connect time too."""
    tokenizer = load_tokenizer(smollm_path)
    backend = open_client(RemoteSettings(url=server.url, connect_timeout_s=1.0, first_token_timeout_s=120.0))
    try:
        server.pause()
        with pytest.raises(BackendError) as caught:
            from backends.remote_connect import finish_connect

            finish_connect(backend, tokenizer, str(smollm_path))
        message = str(caught.value)
        # whichever connect-time request comes first (/props, /v1/models, /tokenize) is named
        assert re.search(r"did not answer /[\w/]+ within 1 s \(server\.connect_timeout\)", message), message
    finally:
        backend.close()


def test_a_wrong_server_kind_is_refused_as_the_wrong_protocol(server, smollm_path):
    tokenizer = load_tokenizer(smollm_path)
    for kind, name in (("vllm", "vLLM"), ("sglang", "SGLang")):
        settings = RemoteSettings(url=server.url, kind=kind, trust_server_vocab=True)
        with pytest.raises(BackendError) as caught:
            connect(settings, tokenizer, str(smollm_path))
        message = str(caught.value)
        assert f"is llama-server, which does not speak {name}'s protocol: pass --server-kind llamacpp" in message
        assert "vocabulary" not in message


def test_the_right_server_kind_given_explicitly_still_connects(server, smollm_path):
    backend = connect(RemoteSettings(url=server.url, kind="llamacpp"), load_tokenizer(smollm_path), str(smollm_path))
    try:
        assert backend.adapter.kind == "llamacpp"
    finally:
        backend.close()


def test_a_reply_of_zero_ids_is_an_error_not_a_success(server, smollm_path):
    """llama-server's /v1/completions answers vLLM's request with text and no ``token_ids``."""
    tokenizer = load_tokenizer(smollm_path)
    backend = RemoteBackend(RemoteSettings(url=server.url), VLLMAdapter())
    backend.info.context_size = 512
    prompt = tokenizer.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", special=True)
    try:
        received = []
        with pytest.raises(BackendError, match="ended the reply without sending a single token id"):
            for token in backend.generate(prompt, SamplingParams(temperature=0.0, max_tokens=8), {2}):
                received.append(token)
        assert received == []
    finally:
        backend.close()


def test_https_to_a_plain_http_port_says_it_does_not_speak_tls(server):
    url = server.url.replace("http://", "https://")
    with pytest.raises(BackendError) as caught:
        open_client(RemoteSettings(url=url, connect_timeout_s=1.0))
    message = str(caught.value)
    assert f"does not speak TLS (it answers plain HTTP): use {server.url}" in message, message


def test_https_to_a_closed_port_still_says_cannot_reach():
    with pytest.raises(BackendError, match="cannot reach the server"):
        open_client(RemoteSettings(url=f"https://127.0.0.1:{free_port()}", connect_timeout_s=1.0))


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999", "http://127.0.0.1:0", "http://127.0.0.1:port",
                                 "http://:8080"])
def test_an_impossible_port_or_host_is_refused_before_any_request(url):
    with pytest.raises(BackendError, match=r"--server '.*' (is not a usable URL|names no host or port 0)"):
        open_client(RemoteSettings(url=url))


def _args(**flags) -> argparse.Namespace:
    from app.cli import chat

    parser = argparse.ArgumentParser()
    chat.add_arguments(parser)
    argv = [part for name, value in flags.items() for part in (f"--{name.replace('_', '-')}", str(value))]
    return parser.parse_args(argv)


def test_a_presets_context_size_is_not_reported_as_ctx_against_a_server(server, smollm_path, tmp_path, monkeypatch):
    """SmolLM2's preset says 8192; the server runs 512.  The user passed no --ctx."""
    monkeypatch.setenv("TOKCHAT_CONFIG_DIR", str(tmp_path / "config"))
    options = options_from_settings(load_settings(_args(server=server.url, model=smollm_path)))
    assert options.ctx is None
    backend = connect(options.server, load_tokenizer(smollm_path), str(smollm_path), options.ctx)
    try:
        assert backend.info.context_size == 512
        assert not [n for n in backend.info.notes if "--ctx" in n or "context size asked" in n]
    finally:
        backend.close()
    # a --ctx the user gave is still honoured, and the note names it
    options = options_from_settings(load_settings(_args(server=server.url, model=smollm_path, ctx=8192)))
    assert options.ctx == 8192
    backend = connect(options.server, load_tokenizer(smollm_path), str(smollm_path), options.ctx)
    try:
        assert backend.info.context_size == 512
        assert [n for n in backend.info.notes if "(8192 tokens, --ctx or model.context_size)" in n]
    finally:
        backend.close()
