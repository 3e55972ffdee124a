"""WordPiece (``bert``) and Unigram (``t5``) GGUF vocabularies against llama.cpp, code point by code point.

The shared parity tests cover the corpus, long inputs and the golden files;
these sweep every Unicode code point through both tokenizers, which checks
the carried llama.cpp Unicode tables (categories, lower-casing, its
one-code-point NFD) and the precompiled charsmap walk.
"""
from __future__ import annotations

import pytest
from support.tokenizer_oracles import llama, ours

_CODE_POINTS = [c for c in range(1, 0x110000) if not 0xD800 <= c < 0xE000]


def _sweep(path, cps: list[int], chunk: int) -> list[str]:
    tok, ref = ours(str(path)), llama(str(path))
    bad = []
    for sep in (" ", ""):
        for k in range(0, len(cps), chunk):
            text = sep.join(map(chr, cps[k : k + chunk]))
            want = ref.tokenize(text.encode("utf-8"), add_bos=False, special=False)
            if tok.encode(text) != want:
                bad.append(f"code points {cps[k]:#x}..{cps[min(k + chunk, len(cps)) - 1]:#x} joined by {sep!r}")
    return bad


def test_wordpiece_every_code_point(llamacpp_models_dir):
    assert not _sweep(llamacpp_models_dir / "ggml-vocab-bert-bge.gguf", _CODE_POINTS, 2000)


def test_unigram_code_points(llamacpp_models_dir):
    # every code point below U+3400 and a stride through the rest (the full sweep takes minutes)
    cps = [c for c in _CODE_POINTS if c < 0x3400 or c % 17 == 0]
    assert not _sweep(llamacpp_models_dir / "ggml-vocab-nomic-bert-moe.gguf", cps, 2000)


@pytest.mark.parametrize("text, ids_len", [("", 2), ("hello", 3)])
def test_wordpiece_framing_is_cls_sep(llamacpp_models_dir, text, ids_len):
    tok = ours(str(llamacpp_models_dir / "ggml-vocab-bert-bge.gguf"))
    framed = tok.with_special(tok.encode(text))
    assert len(framed) == ids_len
    assert tok.id_to_token(framed[0]) == "[CLS]" and tok.id_to_token(framed[-1]) == "[SEP]"


def test_wordpiece_decode_joins_continuations(llamacpp_models_dir):
    """Word starts render with a space, continuations (BERT's ``##``) attach: lower-cased, accents gone."""
    tok = ours(str(llamacpp_models_dir / "ggml-vocab-bert-bge.gguf"))
    ids = tok.encode("Tokenization of Café")
    assert len(ids) > 3
    assert tok.decode(ids) == " tokenization of cafe"
