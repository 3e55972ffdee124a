"""The C whole-fragment path (``tokenizer._accel.encode_text``): the per-piece ids, without per-piece Python work.

A byte-level BPE GGUF whose pre-tokenizer the C splitter knows (gpt2,
starcoder, qwen2, qwen35, and llama3 types without ``ignore_merges``)
encodes each fragment in one C call that splits, merges and caches pieces
itself.  Issue 49: a cold encode of multilingual text spent half its time
on a Python string, a set entry, a dict entry and a list extend per piece,
and fell behind tiktoken.  Speed is measured by ``bench/bench_tokenizer.py``
(no timing here); these tests pin the ids and the absence of per-piece
Python work.
"""
from __future__ import annotations

import random
import sys
from typing import Callable

import pytest
from support.tokenizer_oracles import llama, ours
from support.tok_corpus import corpus

from support.assets import asset_path
from tokenizer import load_tokenizer
from tokenizer.accel import SPLIT_MODES, accel_module, flag_table
from tokenizer.gguf import read_gguf
from tokenizer.gguf_vocab import read_vocab
from tokenizer.merger import make_merger

accel = accel_module()
pytestmark = pytest.mark.skipif(accel is None, reason="the C accelerator is not built here (no C compiler)")

#: letters of a few scripts, for text with many distinct pieces
_LETTERS = "abcdefghijklmnopqrstuvwxyzабвгдежзийклмнопрстуфхцчшщэюяαβγδεζηθικλμνξοπρστυφχψω"
_CJK = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持音送"


def _distinct_words(count: int, seed: int = 7) -> str:
    """``count`` words, nearly all different, each one qwen2 piece (" word"), in several scripts."""
    rng = random.Random(seed)
    words = []
    for _ in range(count):
        if rng.random() < 0.3:
            words.append("".join(rng.choice(_CJK) for _ in range(rng.randrange(2, 7))))
        else:
            words.append("".join(rng.choice(_LETTERS[:26] if rng.random() < 0.5 else _LETTERS[26:])
                                 for _ in range(rng.randrange(3, 9))))
    return " ".join(words)


def _python_calls(fn: Callable[[], object]) -> int:
    """How many Python functions and builtins ``fn()`` calls (``sys.setprofile`` sees each one)."""
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count


@pytest.fixture(scope="module")
def qwen():
    return ours(str(asset_path("qwen2.5-coder-0.5b.gguf")))


@pytest.fixture(scope="module")
def qwen_merger():
    g = read_gguf(asset_path("qwen2.5-coder-0.5b.gguf"))
    return make_merger(g.kv["tokenizer.ggml.merges"], read_vocab(g)["ids"], first_wins=True, raw=g.raw)


def _per_piece(merger, text: str, mode: int) -> list[int]:
    """The ids of the per-piece C path: split, then Merger.encode on each piece."""
    return [i for piece in accel.split(text, mode, flag_table()) for i in merger.encode(piece)]


@pytest.mark.parametrize("name", ["qwen2.5-coder-0.5b.gguf", "qwen2.5-tokenizer"])
def test_a_cold_encode_does_no_python_work_per_piece(name):
    """Ten times the distinct pieces, the same Python calls: the pieces never surface in Python."""
    tok = ours(str(asset_path(name)))
    small, large = _distinct_words(300), _distinct_words(3000, seed=8)
    tok.encode("warm-up: the merger and the flag table are built on first use")
    calls = []
    for text in (small, large):
        tok.clear_cache()
        calls.append(_python_calls(lambda text=text: tok.encode(text)))
    assert calls[0] == calls[1], f"{calls[0]} Python calls for 300 distinct words, {calls[1]} for 3,000"


#: one vocabulary per C splitter mode (llama3's llama-bpe GGUF with ignore_merges), and the
#: tokenizer.json files whose one Split regex the C splitter knows
_FRAGMENT_VOCABS = {"qwen2": "qwen2.5-coder-0.5b.gguf", "starcoder": "smollm2.gguf", "gpt2": "ggml-vocab-gpt-2.gguf",
                    "qwen35": "ggml-vocab-qwen35.gguf", "starcoder-vocab": "ggml-vocab-starcoder.gguf",
                    "llama3-ignore-merges": "ggml-vocab-llama-bpe.gguf",
                    "qwen2-json": "qwen2.5-tokenizer", "llama3-json": "llama3.2-tokenizer"}


@pytest.mark.parametrize("mode", sorted(_FRAGMENT_VOCABS))
def test_the_fragment_path_gives_the_pure_python_ids(mode, monkeypatch):
    """Every C splitter mode, on the corpus and on what the C path hands back to Python: a lone
    surrogate (no UTF-8), a piece over 1,024 bytes, a byte-level piece with every byte."""
    name = _FRAGMENT_VOCABS[mode]
    path = asset_path("llama.cpp-models") / name if name.startswith("ggml-vocab-") else asset_path(name)
    fast = ours(str(path))
    assert any(isinstance(c, accel.PieceCache) for c in fast._caches), "the fragment path is not taken"
    monkeypatch.setenv("TOKCHAT_NO_ACCEL", "1")
    pure = load_tokenizer(path)
    monkeypatch.delenv("TOKCHAT_NO_ACCEL")
    texts = corpus() + ["\ud800 lone \udfff surrogates 中文", "中" * 400 + " after a long piece",
                        "x" * 1500, bytes(range(256)).decode("latin-1"), _distinct_words(500)]
    for text in texts:
        fast.clear_cache()
        cold = fast.encode(text)
        assert cold == pure.encode(text), text[:40]
        assert fast.encode(text) == cold, f"warm differs from cold: {text[:40]!r}"


def test_past_its_limit_the_piece_cache_starts_again_with_the_same_ids(qwen_merger):
    """300,000 distinct pieces overflow the cache (2**18 pieces): it is emptied and refilled, ids unchanged."""
    text = _distinct_words(300_000, seed=9)
    cache = accel.PieceCache()
    mode = SPLIT_MODES["qwen2"]
    ids = accel.encode_text(qwen_merger, text, mode, flag_table(), cache)
    assert 0 < len(cache) < 2**18
    assert ids == _per_piece(qwen_merger, text, mode)


def test_clear_cache_empties_the_c_piece_cache(qwen, qwen_merger):
    cache = accel.PieceCache()
    text = _distinct_words(200)
    first = accel.encode_text(qwen_merger, text, SPLIT_MODES["qwen2"], flag_table(), cache)
    assert len(cache) > 100
    assert accel.encode_text(qwen_merger, text, SPLIT_MODES["qwen2"], flag_table(), cache) == first
    cache.clear()
    assert len(cache) == 0
    assert accel.encode_text(qwen_merger, text, SPLIT_MODES["qwen2"], flag_table(), cache) == first
    # the tokenizer's own: Tokenizer.clear_cache (what the benchmark's "cold" relies on) reaches it
    qwen.encode(text)
    c_caches = [c for c in qwen._caches if isinstance(c, accel.PieceCache)]
    assert c_caches and all(len(c) > 0 for c in c_caches)
    qwen.clear_cache()
    assert all(len(c) == 0 for c in c_caches)


def test_encode_text_refuses_a_bad_mode_or_flag_table(qwen_merger):
    cache = accel.PieceCache()
    with pytest.raises(ValueError, match="bad mode or flag table"):
        accel.encode_text(qwen_merger, "text", 99, flag_table(), cache)
    with pytest.raises(ValueError, match="bad mode or flag table"):
        accel.encode_text(qwen_merger, "text", SPLIT_MODES["qwen2"], b"\x01" * 100, cache)
    with pytest.raises(TypeError):
        accel.encode_text(qwen_merger, "text", SPLIT_MODES["qwen2"], flag_table(), {})
    with pytest.raises(ValueError, match="whole must be a dict or None"):
        accel.encode_text(qwen_merger, "text", SPLIT_MODES["qwen2"], flag_table(), cache, ["not", "a", "dict"])


def test_with_ignore_merges_a_piece_that_is_a_token_stays_whole():
    """Llama 3 (ignore_merges): tokens that merging their bytes would not rebuild still come out whole,
    as llama.cpp gives them (the C path looks each new piece up in the vocabulary first)."""
    path = asset_path("llama.cpp-models") / "ggml-vocab-llama-bpe.gguf"
    g = read_gguf(path)
    merger = make_merger(g.kv["tokenizer.ggml.merges"], read_vocab(g)["ids"], first_wins=True, raw=g.raw)
    tok, mode = ours(str(path)), SPLIT_MODES["llama3"]
    unmergeable = []
    for tid in range(tok.vocab_size):
        try:
            text = tok.token_bytes(tid).decode("utf-8")
        except UnicodeDecodeError:
            continue
        if (not tok.is_special(tid) and accel.split(text, mode, flag_table()) == [text]
                and merger.encode(text) not in (None, [tid])):
            unmergeable.append(text)
    assert len(unmergeable) > 10
    oracle = llama(str(path))
    tok.clear_cache()
    for text in unmergeable[:200]:
        assert tok.encode(text) == oracle.tokenize(text.encode("utf-8"), add_bos=False, special=False), text
