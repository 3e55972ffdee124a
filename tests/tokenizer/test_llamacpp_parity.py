"""Id-for-id parity with llama.cpp (the llama-cpp-python binding, vocab only).

Every GGUF we support is compared on the shared corpus with ``special``
off and on, on llama.cpp's own golden files, on inputs long enough to need
the heap merge, and on the vocabulary facts the chat relies on: token
attributes, end-of-generation ids, BOS/EOS and add-BOS.
"""
from __future__ import annotations

import llama_cpp
import pytest
from support.tokenizer_oracles import golden_cases, llama, ours, vocab_ggufs
from support.tok_corpus import base64_blob, corpus

CORPUS = corpus()


def _llama_ids(path, text: str, special: bool) -> list[int]:
    return llama(str(path)).tokenize(text.encode("utf-8"), add_bos=False, special=special)


def _mismatches(path, texts: list[str], special: bool) -> list[str]:
    tok = ours(str(path))
    bad = []
    for text in texts:
        want = _llama_ids(path, text, special)
        got = tok.encode(text, special=special)
        if got != want:
            bad.append(f"{text[:40]!r}: llama.cpp {want[:12]} ours {got[:12]}")
    return bad


@pytest.mark.parametrize("special", [False, True], ids=["plain", "special"])
def test_corpus_matches_llama_cpp(any_gguf, special):
    bad = _mismatches(any_gguf, CORPUS, special)
    rate = 100 * (len(CORPUS) - len(bad)) / len(CORPUS)
    assert not bad, f"{any_gguf.name}: {rate:.1f}% match; first mismatches:\n" + "\n".join(bad[:5])


def test_golden_inputs_match_llama_cpp_with_specials(golden_gguf):
    texts = [text for text, _ in golden_cases(golden_gguf)]
    assert not _mismatches(golden_gguf, texts, special=True)


def test_long_inputs_match_llama_cpp(any_gguf):
    # "a" * 10000 and a 50 KB base64 blob take the O(n log n) merge path
    texts = ["a" * 10000, base64_blob(37_500), "ab" * 3000 + " " + "1" * 5000]
    assert not _mismatches(any_gguf, texts, special=False)


def test_vocabulary_facts_match_llama_cpp(any_gguf):
    tok, ref = ours(str(any_gguf)), llama(str(any_gguf))
    vocab = ref._model.vocab
    assert tok.vocab_size == ref.n_vocab()
    attrs = [llama_cpp.llama_vocab_get_attr(vocab, i) for i in range(tok.vocab_size)]
    assert [tok.token_attr(i) for i in range(tok.vocab_size)] == attrs
    eog = {i for i in range(tok.vocab_size) if llama_cpp.llama_vocab_is_eog(vocab, i)}
    assert set(tok.eog_ids) == eog
    assert (tok.bos_id if tok.bos_id is not None else -1) == ref.token_bos()
    assert (tok.eos_id if tok.eos_id is not None else -1) == ref.token_eos()
    assert tok.add_bos == bool(llama_cpp.llama_vocab_get_add_bos(vocab))
    assert tok.add_eos == bool(llama_cpp.llama_vocab_get_add_eos(vocab))
    assert tok.add_sep == bool(llama_cpp.llama_vocab_get_add_sep(vocab))
    assert (tok.sep_id if tok.sep_id is not None else -1) == llama_cpp.llama_vocab_sep(vocab)


def test_every_vocabulary_file_is_supported(llamacpp_models_dir):
    """All 19 ``ggml-vocab-*.gguf`` files llama.cpp ships take part in the tests above."""
    shipped = sorted(llamacpp_models_dir.glob("ggml-vocab-*.gguf"))
    assert len(shipped) == 19
    assert vocab_ggufs(llamacpp_models_dir) == shipped


def test_add_special_frames_like_llama_cpp(any_gguf):
    """``with_special`` adds what llama.cpp's ``add_special=True`` adds (BERT: [CLS] .. [SEP])."""
    tok, ref = ours(str(any_gguf)), llama(str(any_gguf))
    for text in ("Hello world", "", "a [SEP] b"):
        assert tok.with_special(tok.encode(text)) == ref.tokenize(text.encode("utf-8"), add_bos=True, special=False)


def _llama_piece(ref, tid: int) -> bytes:
    import ctypes

    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_token_to_piece(ref._model.vocab, tid, buf, len(buf), 0, True)
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = llama_cpp.llama_token_to_piece(ref._model.vocab, tid, buf, len(buf), 0, True)
    return buf.raw[:n]


def test_normal_tokens_render_like_llama_cpp(any_gguf):
    """token_bytes of every normal and byte token equals llama.cpp's piece."""
    tok, ref = ours(str(any_gguf)), llama(str(any_gguf))
    step = max(1, tok.vocab_size // 5000)  # a spread-out sample keeps this quick
    bad = []
    for i in range(0, tok.vocab_size, step):
        if tok.is_special(i):
            continue
        want = _llama_piece(ref, i)
        if tok.token_bytes(i) != want and b"[UNK_BYTE_" not in want:
            bad.append((i, want, tok.token_bytes(i)))
    assert not bad[:5]
