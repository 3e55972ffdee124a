"""The local backend is llama.cpp with llama.cpp's own defaults: a default ``llama-server`` answers the same ids.

The server is the real ``llama-server`` built from the same (patched) llama.cpp
sources, started with nothing but the model, host and port: its flash
attention (auto), threads, batch sizes and context are its defaults.  The local
backend is opened the way ``tokchat --model M`` opens it (its own process,
default options).  Greedy, no repetition penalty, so each id is the engine's
argmax.
"""
from __future__ import annotations

import httpx
import pytest
from support.remote_servers import LlamaServer

from backends import LoadOptions, SamplingParams, open_backend
from tokenizer import load_tokenizer

QUESTIONS = ("List three colours and say one thing about each.", "Why is the sky blue?",
             "Write a haiku about the sea.", "What is 17 times 23?")
N = 48


def without_eog(ids: list[int], eog) -> list[int]:
    return ids[:-1] if ids and ids[-1] in eog else ids


class DefaultServer(LlamaServer):
    """``llama-server -m MODEL --host 127.0.0.1 --port PORT``, every other setting its default."""

    def __init__(self, model, log_dir) -> None:
        super().__init__(model, log_dir)
        self.args = [self.args[0], "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port)]


@pytest.mark.slow
def test_greedy_ids_equal_a_default_llama_server(smollm_path, tmp_path):
    tok = load_tokenizer(smollm_path)
    server = DefaultServer(smollm_path, tmp_path).start()
    local = open_backend(smollm_path, LoadOptions(backend="cpu", log_path=tmp_path / "engine.log"))
    try:
        props = httpx.get(server.url + "/props", timeout=10).json()
        assert local.info.context_size == props["default_generation_settings"]["n_ctx"]
        greedy = SamplingParams(temperature=0, max_tokens=N, repeat_penalty=1.0)
        for question in QUESTIONS:
            prompt = tok.encode(f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n", special=True)
            body = {"prompt": prompt, "n_predict": N, "temperature": 0, "repeat_penalty": 1.0, "cache_prompt": False,
                    "return_tokens": True, "samplers": ["top_k"], "top_k": 1}
            served = httpx.post(server.url + "/completion", json=body, timeout=300).json()
            ours = list(local.generate(prompt, greedy, tok.eog_ids))
            theirs = served["tokens"]
            # whether the end-of-generation id is listed differs between the two; the ids before it may not
            assert without_eog(ours, tok.eog_ids) == without_eog(theirs, tok.eog_ids), question
            assert len(without_eog(ours, tok.eog_ids)) > 8
    finally:
        local.close()
        server.stop()
