"""The optional C accelerator gives exactly the ids of the pure-Python code.

Without the extension built, both sides are the pure-Python path and the
comparison is trivially true; with it, every corpus text, the long inputs
and arbitrary text must agree id for id.
"""
from __future__ import annotations

import pytest
from support.tokenizer_oracles import ours
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.tok_corpus import base64_blob, corpus

from support.assets import asset_path
from tokenizer import load_tokenizer
from tokenizer.accel import SPLIT_MODES
from tokenizer.pretokenize import make_pretokenizer

TEXTS = corpus() + ["a" * 10000, base64_blob(20_000), "中文" * 400, "it'ſ, IT'S, 'ſt, ''ſ 'ſ"]


@pytest.fixture(scope="module",
                params=["qwen", "smollm", "qwen-json", "llama32-json", "llama-bpe", "gemma", "phi-3",
                        "bert-bge", "nomic-bert-moe", "minilm-json", "mon-json"])
def pair(request, qwen_path, smollm_path, gemma_path, qwen_tokenizer_dir, llama32_tokenizer_dir, llamacpp_models_dir):
    path = {"qwen": qwen_path, "smollm": smollm_path, "qwen-json": qwen_tokenizer_dir, "gemma": gemma_path,
            "llama32-json": llama32_tokenizer_dir,
            "llama-bpe": llamacpp_models_dir / "ggml-vocab-llama-bpe.gguf",
            "phi-3": llamacpp_models_dir / "ggml-vocab-phi-3.gguf",
            "bert-bge": llamacpp_models_dir / "ggml-vocab-bert-bge.gguf",
            "nomic-bert-moe": llamacpp_models_dir / "ggml-vocab-nomic-bert-moe.gguf",
            "minilm-json": asset_path("minilm-l6-tokenizer.json"),
            "mon-json": asset_path("mon-unigram-tokenizer.json")}[request.param]
    mp = pytest.MonkeyPatch()
    mp.setenv("TOKCHAT_NO_ACCEL", "1")
    pure = load_tokenizer(path)
    mp.undo()
    return ours(str(path)), pure


def test_the_accelerator_has_the_merge_free_loops():
    """With the extension built (as on this machine), WordPiece and Unigram have their C twins."""
    from tokenizer.accel import accel_module

    accel = accel_module()
    assert accel is None or (hasattr(accel, "WordPiece") and hasattr(accel, "Unigram"))


def test_accelerated_equals_pure_python(pair):
    fast, pure = pair
    for text in TEXTS:
        assert fast.encode(text) == pure.encode(text), text[:40]
        assert fast.encode(text, special=True) == pure.encode(text, special=True), text[:40]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text())
def test_accelerated_equals_pure_python_anywhere(pair, text):
    fast, pure = pair
    assert fast.encode(text) == pure.encode(text)


@pytest.mark.parametrize("pre_type", sorted(SPLIT_MODES))
def test_c_splitter_equals_regex(pre_type):
    fast, slow = make_pretokenizer(pre_type).split, make_pretokenizer(pre_type, accelerated=False).split
    for text in TEXTS:
        assert fast(text) == slow(text), text[:40]
