"""Pre-tokenizers: fused fast paths equal llama.cpp's regex-after-regex procedure."""
from __future__ import annotations

import pytest
from support.gguf_build import build_gguf
from hypothesis import given, settings
from hypothesis import strategies as st
from support.tok_corpus import corpus

from tokenizer import TokenizerError, load_tokenizer
from tokenizer.pretokenize import PRE_NAMES, PRE_TYPES, make_pretokenizer, resolve_pre, sequential_splitter

CORPUS = corpus()
TYPES = sorted(PRE_TYPES)


@pytest.mark.parametrize("pre_type", TYPES)
def test_fast_splitter_equals_sequential_on_corpus(pre_type):
    fast, slow = make_pretokenizer(pre_type).split, sequential_splitter(pre_type)
    for text in CORPUS:
        assert fast(text) == slow(text), text[:40]
        assert "".join(fast(text)) == text


# U+1C89 and U+0558 are letters to ``regex`` but unassigned in llama.cpp's tables
_ALPHABET = list("ab1 2\n\t'sS.,!é٣\u00a0\u3000-\u1c89\u0558")


@settings(max_examples=300, deadline=None)
@given(text=st.text(st.sampled_from(_ALPHABET), max_size=30), pre_type=st.sampled_from(TYPES))
def test_fast_splitter_equals_sequential_anywhere(text, pre_type):
    assert make_pretokenizer(pre_type).split(text) == sequential_splitter(pre_type)(text)


@settings(max_examples=300, deadline=None)
@given(text=st.text(st.sampled_from(_ALPHABET), max_size=30), pre_type=st.sampled_from(TYPES))
def test_pure_python_splitter_equals_sequential_anywhere(text, pre_type):
    """Without the C accelerator: ``regex``'s plain classes unless a newer code point is present."""
    assert make_pretokenizer(pre_type, accelerated=False).split(text) == sequential_splitter(pre_type)(text)


@pytest.mark.parametrize("pre_type", TYPES)
def test_pure_python_splitter_equals_sequential_on_corpus(pre_type):
    fast, slow = make_pretokenizer(pre_type, accelerated=False).split, sequential_splitter(pre_type)
    for text in CORPUS + ["x\u1c89y \u0558 z"]:
        assert fast(text) == slow(text), text[:40]


def test_every_name_resolves_to_a_known_type():
    for name, (pre_type, _) in PRE_NAMES.items():
        assert pre_type in PRE_TYPES, name
    assert resolve_pre(None) == ("default", False)
    assert resolve_pre("llama-bpe") == ("llama3", True)


def _bpe_gguf(tmp_path, pre: str | None):
    kvs = [("tokenizer.ggml.model", "string", "gpt2"),
           ("tokenizer.ggml.tokens", "array:string", ["a", "b", "ab", "Ġ"]),
           ("tokenizer.ggml.merges", "array:string", ["a b"])]
    if pre is not None:
        kvs.append(("tokenizer.ggml.pre", "string", pre))
    path = tmp_path / "v.gguf"
    path.write_bytes(build_gguf(kvs))
    return path


def test_unknown_pre_is_a_clear_error(tmp_path):
    with pytest.raises(TokenizerError, match="unknown pre-tokenizer 'kimi-k2000'"):
        load_tokenizer(_bpe_gguf(tmp_path, "kimi-k2000"))


def test_missing_pre_falls_back_to_default_like_llama_cpp(tmp_path):
    tok = load_tokenizer(_bpe_gguf(tmp_path, None))
    assert tok.pre is None and tok.encode("ab a") == [2, 3, 0]
