"""The three server adapters on the request and response shapes their servers document.

No server runs here (the real llama-server tests are in ``test_remote_llamacpp_server.py``);
vLLM and SGLang cannot run on this machine, so their adapters are checked against the
shapes in their sources: vLLM ``vllm/entrypoints/openai/completion/protocol.py``
(``CompletionStreamResponse``, ``CompletionResponseStreamChoice.token_ids``,
``UsageInfo.prompt_tokens_details``), SGLang ``tokenizer_manager_components/
output_processor.py`` (``{"text", "output_ids", "meta_info"}``, cumulative by default,
incremental with ``--incremental-streaming-output``).
"""
from __future__ import annotations

import pytest

from backends.base import SamplingParams
from backends.remote_llamacpp import HeldBackIds, LlamaCppAdapter
from backends.remote_protocol import error_message
from backends.remote_sglang import SGLangAdapter
from backends.remote_vllm import VLLMAdapter
from tokenizer import load_tokenizer

SAMPLING = SamplingParams(temperature=0.0, top_p=0.9, top_k=0, min_p=0.1, repeat_penalty=1.0, max_tokens=7)


# -- llama-server ---------------------------------------------------------------------------

def test_llamacpp_request_sends_ids_slot_cache_and_every_sampler():
    body = LlamaCppAdapter(slot=2).completion([1, 2, 3], SAMPLING, {9}, seed=42).body
    assert body["prompt"] == [1, 2, 3] and body["n_predict"] == 7 and body["stream"] is True
    assert body["cache_prompt"] is True and body["id_slot"] == 2 and body["timings_per_token"] is True
    # the server's own defaults would otherwise apply: temperature 0.8, its penalties, DRY, XTC, mirostat
    assert body["temperature"] == 0.0 and body["top_k"] == 0 and body["top_p"] == 0.9 and body["min_p"] == 0.1
    assert body["repeat_penalty"] == 1.0 and body["seed"] == 42
    assert body["dry_multiplier"] == 0.0 and body["xtc_probability"] == 0.0 and body["mirostat"] == 0
    assert "stop_token_ids" not in body  # llama-server has no stop-on-id field


def test_llamacpp_stream_counts_and_finish():
    parser = LlamaCppAdapter().parser([1, 2, 3])
    got = []
    got += parser.feed({"content": "Hi", "tokens": [10], "stop": False, "tokens_predicted": 1,
                        "tokens_evaluated": 3, "timings": {"cache_n": 2, "prompt_n": 1, "predicted_n": 1}})
    got += parser.feed({"content": "!", "tokens": [11], "stop": False, "tokens_predicted": 2, "tokens_evaluated": 3})
    got += parser.feed({"content": "", "tokens": [], "stop": True, "tokens_predicted": 2, "tokens_evaluated": 3,
                        "stop_type": "limit", "timings": {"cache_n": 2, "prompt_n": 1, "predicted_per_second": 50.0}})
    assert got == [10, 11] and parser.finished()
    c = parser.counts
    assert (c.prompt_tokens, c.cached_tokens, c.evaluated_tokens, c.completion_tokens) == (3, 2, 1, 2)
    assert c.finish == "length" and c.tokens_per_s == 50.0 and parser.unrecovered == 0


def server_events(tokenizer, ids):
    """The events llama-server's ``process_token`` sends for ``ids`` (server-context.cpp).

    A token that leaves the text ending inside a UTF-8 character is not sent; the next
    sent event carries all unsent bytes in ``content`` but only its own id in ``tokens``.
    """
    text, sent = b"", 0
    for n, tid in enumerate(ids, 1):
        text += tokenizer.token_bytes(tid)
        try:
            text.decode("utf-8")
        except UnicodeDecodeError:
            continue
        yield {"content": text[sent:].decode("utf-8"), "tokens": [tid], "stop": False, "tokens_predicted": n}
        sent = len(text)
    yield {"content": "", "tokens": [], "stop": True, "stop_type": "eos", "tokens_predicted": len(ids)}


@pytest.mark.parametrize("text", ["日本語のテキスト", "🙂👍🏽 ok 🇯🇵", "中文字符和emoji😀"])
def test_llamacpp_held_back_ids_are_recovered_from_the_bytes(smollm_path, text):
    tok = load_tokenizer(smollm_path)
    ids = tok.encode(text)
    partial = [t for t in ids if _incomplete(tok.token_bytes(t))]
    assert partial, "the text must contain ids that end inside a character"
    events = list(server_events(tok, ids))
    assert sum(len(e["tokens"]) for e in events) < len(ids)  # the stream really drops ids

    held = HeldBackIds(tok.token_bytes, tok.vocab_size, tok.is_special)
    parser = LlamaCppAdapter(held_back=held).parser([1])
    got = [t for e in events for t in parser.feed(e)]
    assert got == ids and parser.unrecovered == 0


def test_llamacpp_held_back_ids_without_a_tokenizer_are_reported(smollm_path):
    tok = load_tokenizer(smollm_path)
    ids = tok.encode("🙂👍🏽")
    parser = LlamaCppAdapter().parser([1])
    got = [t for e in server_events(tok, ids) for t in parser.feed(e)]
    assert len(got) < len(ids) and parser.unrecovered == len(ids) - len(got)


def _incomplete(piece: bytes) -> bool:
    try:
        piece.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def test_llamacpp_tokenize_and_info():
    adapter = LlamaCppAdapter()
    req = adapter.tokenize("hi <|im_end|>")
    assert req.path == "/tokenize" and req.body == {"content": "hi <|im_end|>", "add_special": False,
                                                      "parse_special": True}
    assert adapter.tokenized_ids({"tokens": [1, {"id": 2, "piece": "x"}]}) == [1, 2]
    info = adapter.server_info("http://h:1", {
        "/props": {"build_info": "b1-abc", "model_path": "/m/smol.gguf", "total_slots": 4,
                   "default_generation_settings": {"n_ctx": 512}},
        "/v1/models": {"data": [{"id": "smol.gguf", "meta": {"n_vocab": 49152, "n_ctx": 512}}]},
    })
    assert (info.version, info.model, info.context_size, info.n_vocab, info.slots) == (
        "b1-abc", "/m/smol.gguf", 512, 49152, 4)


# -- vLLM -------------------------------------------------------------------------------------

def test_vllm_request_sends_ids_stop_ids_usage_and_every_sampler():
    adapter = VLLMAdapter(model="Qwen/Qwen2.5-7B-Instruct")
    req = adapter.completion([5, 6], SAMPLING, {151645, 151643}, seed=3)
    body = req.body
    assert req.path == "/v1/completions" and body["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert body["prompt"] == [5, 6] and body["max_tokens"] == 7  # vLLM's default would be 16
    assert body["stop_token_ids"] == [151643, 151645] and body["return_token_ids"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["top_k"] == -1 and body["temperature"] == 0.0 and body["repetition_penalty"] == 1.0
    assert body["seed"] == 3 and body["skip_special_tokens"] is False


def _vllm_chunk(token_ids, finish=None, usage=None, stop_reason=None):
    """A ``CompletionStreamResponse`` as vLLM serialises it."""
    chunk = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
             "choices": [{"index": 0, "text": "x", "logprobs": None, "finish_reason": finish,
                          "stop_reason": stop_reason, "token_ids": token_ids}]}
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def test_vllm_stream_ids_usage_and_cached_tokens():
    parser = VLLMAdapter().parser([1, 2, 3, 4])
    got = parser.feed(_vllm_chunk([7], usage={"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5}))
    got += parser.feed(_vllm_chunk([8, 9], usage={"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}))
    got += parser.feed(_vllm_chunk([151645], finish="stop", stop_reason=151645,
                                   usage={"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8}))
    got += parser.feed({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m", "choices": [],
                        "usage": {"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8,
                                  "prompt_tokens_details": {"cached_tokens": 3}}})
    assert got == [7, 8, 9, 151645] and parser.finished()
    c = parser.counts
    assert (c.prompt_tokens, c.completion_tokens, c.cached_tokens, c.evaluated_tokens, c.finish) == (4, 4, 3, 1, "stop")


def test_vllm_length_finish_and_info():
    parser = VLLMAdapter().parser([1])
    parser.feed(_vllm_chunk([3], finish="length"))
    assert parser.counts.finish == "length"
    adapter = VLLMAdapter()
    info = adapter.server_info("http://h", {"/v1/models": {"data": [{"id": "qwen", "root": "Qwen/Qwen2.5-7B-Instruct",
                                                                      "max_model_len": 32768}]},
                                            "/version": {"version": "0.11.0"}})
    assert (info.model, info.context_size, info.version, adapter.model) == (
        "Qwen/Qwen2.5-7B-Instruct", 32768, "0.11.0", "qwen")
    assert adapter.tokenize("hi").body == {"prompt": "hi", "add_special_tokens": False, "model": "qwen"}
    assert adapter.tokenized_ids({"count": 2, "max_model_len": 10, "tokens": [4, 5]}) == [4, 5]


# -- SGLang -----------------------------------------------------------------------------------

def test_sglang_request_sends_input_ids_and_every_sampler():
    req = SGLangAdapter().completion([5, 6], SAMPLING, {2}, seed=11)
    assert req.path == "/generate" and req.body["input_ids"] == [5, 6] and req.body["stream"] is True
    params = req.body["sampling_params"]
    assert params["max_new_tokens"] == 7 and params["top_k"] == -1 and params["temperature"] == 0.0
    assert params["stop_token_ids"] == [2] and params["sampling_seed"] == 11 and params["repetition_penalty"] == 1.0


def _meta(completion, finish=None, cached=2):
    return {"id": "r", "finish_reason": finish, "prompt_tokens": 4, "completion_tokens": completion,
            "cached_tokens": cached}


@pytest.mark.parametrize("incremental", [False, True])
def test_sglang_cumulative_and_incremental_output_ids(incremental):
    reply = [7, 7, 8, 2]  # a repeated id: a prefix test alone could not tell the two forms apart
    parser = SGLangAdapter().parser([1, 2, 3, 4])
    got = []
    for n in range(1, len(reply) + 1):
        output_ids = reply[n - 1:n] if incremental else reply[:n]
        finish = {"type": "stop", "matched": 2} if n == len(reply) else None
        got += parser.feed({"text": "", "output_ids": output_ids, "meta_info": _meta(n, finish)})
    assert got == reply and parser.finished()
    c = parser.counts
    assert (c.prompt_tokens, c.cached_tokens, c.evaluated_tokens, c.completion_tokens, c.finish) == (4, 2, 2, 4, "stop")


def test_sglang_abort_is_an_error_finish():
    parser = SGLangAdapter().parser([1])
    parser.feed({"output_ids": [3], "meta_info": _meta(1, {"type": "abort", "message": "oom"})})
    assert parser.counts.finish == "error"


def test_error_messages_from_each_servers_error_shape():
    assert error_message({"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}}) \
        == "Invalid API Key"
    assert error_message({"object": "error", "message": "bad", "type": "BadRequestError", "code": 400}) == "bad"
    assert error_message({"detail": "Not Found"}) == "Not Found"
    assert error_message("Internal Server Error\nmore") == "Internal Server Error"
