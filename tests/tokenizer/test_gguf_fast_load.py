"""The fast vocabulary load gives exactly what the careful one gives.

Two C shortcuts (``tokenizer/_accel_gguf.c``) sit on the load path: the
string arrays are walked and decoded in C, and the merge table is built from
the GGUF's raw arrays instead of Python strings.  Each is compared with the
path it replaces on real vocabularies, and fed malformed input, where it
must step aside so the Python reader can name the problem.
"""
from __future__ import annotations

import struct

import pytest
from support.gguf_build import build_gguf

from tokenizer import _accel
from tokenizer.bytelevel import BYTE_TO_CHAR, from_byte_chars
from tokenizer.errors import GGUFError
from tokenizer.gguf import RAW_KEYS, parse_gguf, read_gguf
from tokenizer.gguf_vocab import read_vocab
from tokenizer.loader import load_gguf_tokenizer
from tokenizer.merger import make_merger

BPE_VOCABS = ["ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-bpe.gguf", "ggml-vocab-qwen2.gguf",
              "ggml-vocab-deepseek-coder.gguf", "ggml-vocab-falcon.gguf", "ggml-vocab-mpt.gguf",
              "ggml-vocab-command-r.gguf", "ggml-vocab-starcoder.gguf", "ggml-vocab-refact.gguf"]


@pytest.fixture(params=["qwen", "smollm", *BPE_VOCABS])
def bpe_path(request, qwen_path, smollm_path, llamacpp_models_dir):
    if request.param == "qwen":
        return qwen_path
    if request.param == "smollm":
        return smollm_path
    return llamacpp_models_dir / request.param


def pieces_of(tokens: list[str]) -> list[str]:
    """Every token that is whole UTF-8 text, as the raw piece a pre-tokenizer would hand over."""
    out = []
    for token in tokens:
        data = from_byte_chars(token)
        if data:
            try:
                out.append(data.decode("utf-8"))
            except UnicodeDecodeError:
                continue  # part of a character: no piece of text spells it alone
    return out


def test_merge_table_from_raw_arrays_equals_the_one_from_strings(bpe_path):
    g = read_gguf(bpe_path)
    assert set(g.raw) == RAW_KEYS
    v = read_vocab(g)
    merges = g.kv["tokenizer.ggml.merges"]
    from_raw = _accel.merger_from_gguf(*g.raw["tokenizer.ggml.tokens"], *g.raw["tokenizer.ggml.merges"],
                                       BYTE_TO_CHAR, True)
    from_strings = _accel.Merger(merges, v["ids"], BYTE_TO_CHAR, True)
    pieces = pieces_of(v["tokens"])
    assert len(pieces) > 0.9 * len(v["tokens"]) - 300
    # every token of the vocabulary, merged from its bytes: all merges are exercised
    assert [from_raw.encode(p) for p in pieces] == [from_strings.encode(p) for p in pieces]


def test_tokenizer_uses_the_raw_table_and_encodes_as_before(qwen_path):
    fast = load_gguf_tokenizer(qwen_path)
    g = read_gguf(qwen_path)
    g.raw.clear()  # what a reader without the raw arrays hands over: the string-built table
    slow = load_gguf_tokenizer(qwen_path, g)
    text = "Hello, wörld! 日本語のテキスト 🙂 def f(x):\n    return x ** 2  # café"
    assert fast.encode(text) == slow.encode(text)
    g = read_gguf(qwen_path)
    v = read_vocab(g)
    merger = make_merger(g.kv["tokenizer.ggml.merges"], v["ids"], True, g.raw)
    assert type(merger).__name__ == "Merger" and merger.encode("hello") == slow.encode("hello")


def test_reader_with_and_without_c_gives_the_same_file(bpe_path, monkeypatch):
    fast = read_gguf(bpe_path)
    monkeypatch.setenv("TOKCHAT_NO_ACCEL", "1")
    slow = read_gguf(bpe_path)
    assert fast.kv == slow.kv and fast.types == slow.types and fast.kv_end == slow.kv_end
    assert fast.raw == slow.raw


def _strings(*items: bytes) -> bytes:
    return b"".join(struct.pack("<Q", len(s)) + s for s in items)


def test_c_walker_decodes_and_refuses_what_is_wrong():
    data = b"xx" + _strings(b"a", "ünï".encode(), b"", b"x" * 300)
    assert _accel.gguf_strings(data, 2, 4, True) == (len(data), ["a", "ünï", "", "x" * 300])
    assert _accel.gguf_strings(data, 2, 4, False) == (len(data), None)
    assert _accel.gguf_strings(data, 2, 5, True) is None  # one more than there is
    assert _accel.gguf_strings(data, 2, 1 << 60, True) is None  # a count that cannot fit
    assert _accel.gguf_strings(data, len(data) + 1, 0, True) is None  # an offset past the end
    assert _accel.gguf_strings(_strings(b"ok", b"\xff\xfe"), 0, 2, True) is None  # not UTF-8
    assert _accel.gguf_strings(_strings(b"\xed\xa0\x80"), 0, 1, True) is None  # a lone surrogate
    assert _accel.gguf_strings(struct.pack("<Q", 1 << 62) + b"ab", 0, 1, True) is None  # length past the end


def test_bad_utf8_in_a_vocabulary_is_still_named_by_the_python_reader():
    tokens = ["a", "b", "ab"]
    kvs = [("tokenizer.ggml.model", "string", "gpt2"), ("tokenizer.ggml.tokens", "array:string", tokens),
           ("tokenizer.ggml.merges", "array:string", ["a b", b"\xc3(".decode("latin-1")])]
    data = bytearray(build_gguf(kvs))
    bad = data.index("Ã(".encode("utf-8"))
    data[bad : bad + 3] = b"\xc3(" + b" "  # invalid UTF-8, same length as the original bytes
    with pytest.raises(GGUFError, match=r"tokenizer.ggml.merges\[1\] is not valid UTF-8"):
        parse_gguf(bytes(data), len(data))


def test_merges_that_are_not_tokens_or_an_empty_token_leave_the_decision_to_python():
    bad_merge = build_gguf([("tokenizer.ggml.tokens", "array:string", ["a", "b", "ab"]),
                            ("tokenizer.ggml.merges", "array:string", ["a b", "a c"])])
    g = parse_gguf(bad_merge, len(bad_merge))
    with pytest.raises(ValueError, match="not tokens"):
        _accel.merger_from_gguf(*g.raw["tokenizer.ggml.tokens"], *g.raw["tokenizer.ggml.merges"], BYTE_TO_CHAR, True)
    assert make_merger(g.kv["tokenizer.ggml.merges"], {"a": 0, "b": 1, "ab": 2}, True, g.raw) is None

    empty = build_gguf([("tokenizer.ggml.tokens", "array:string", ["a", "", "b", "ab"]),
                        ("tokenizer.ggml.merges", "array:string", ["a b"])])
    g = parse_gguf(empty, len(empty))
    with pytest.raises(ValueError, match="empty token"):
        _accel.merger_from_gguf(*g.raw["tokenizer.ggml.tokens"], *g.raw["tokenizer.ggml.merges"], BYTE_TO_CHAR, True)
    # the string-built table (with the vocabulary's renamed empty token) is used instead
    ids = {"a": 0, "[EMPTY_1]": 1, "b": 2, "ab": 3}
    merger = make_merger(g.kv["tokenizer.ggml.merges"], ids, True, g.raw)
    assert merger is not None and merger.encode("ab") == [3]


def test_a_duplicate_token_maps_to_its_last_id_in_both_tables():
    tokens = ["a", "b", "ab", "x", "ab"]
    kvs = [("tokenizer.ggml.tokens", "array:string", tokens), ("tokenizer.ggml.merges", "array:string", ["a b"])]
    data = build_gguf(kvs)
    g = parse_gguf(data, len(data))
    from_raw = _accel.merger_from_gguf(*g.raw["tokenizer.ggml.tokens"], *g.raw["tokenizer.ggml.merges"],
                                       BYTE_TO_CHAR, True)
    from_strings = _accel.Merger(["a b"], dict(zip(tokens, range(len(tokens)))), BYTE_TO_CHAR, True)
    assert from_raw.encode("ab") == from_strings.encode("ab") == [4]


def test_token_ids_is_dict_of_zip_with_the_last_id_winning(qwen_path):
    tokens = read_gguf(qwen_path).kv["tokenizer.ggml.tokens"]
    assert _accel.token_ids(tokens) == dict(zip(tokens, range(len(tokens))))
    assert _accel.token_ids(["a", "b", "a", ""]) == {"a": 2, "b": 1, "": 3}


def test_c_walker_checks_without_keeping():
    """Mode 2 (an array left as its bytes): the same lengths and UTF-8 refused as a decode, nothing returned."""
    data = b"xx" + _strings(b"a", "ünï".encode(), b"", b"x" * 300)
    assert _accel.gguf_strings(data, 2, 4, 2) == (len(data), None)
    assert _accel.gguf_strings(_strings(b"ok", b"\xff\xfe"), 0, 2, 2) is None  # not UTF-8
    assert _accel.gguf_strings(_strings(b"\xed\xa0\x80"), 0, 1, 2) is None  # a lone surrogate
    assert _accel.gguf_strings(data, 2, 5, 2) is None  # one more than there is


def test_a_header_read_for_its_facts_keeps_the_merges_as_bytes(bpe_path):
    """The chat's path (a deferred header, then the tokenizer): the merges are never Python strings, the header
    keeps none of the vocabulary's arrays (it lives as long as the chat), and the ids are the whole read's."""
    from tokenizer.gguf import VOCAB_ARRAYS

    whole = read_gguf(bpe_path)
    facts = read_gguf(bpe_path, defer=VOCAB_ARRAYS)
    fast = load_gguf_tokenizer(bpe_path, facts)
    assert not set(VOCAB_ARRAYS) & set(facts.kv) and not facts.raw  # handed to the tokenizer, not kept here
    slow = load_gguf_tokenizer(bpe_path, whole)
    text = "Hello, wörld! 日本語のテキスト 🙂 def f(x):\n    return x ** 2  # café"
    assert fast.encode(text) == slow.encode(text)
    arrays = facts.vocab_arrays(leave_raw=("tokenizer.ggml.merges",))
    assert "tokenizer.ggml.merges" not in arrays.kv and arrays.raw == whole.raw
    assert arrays.raw["tokenizer.ggml.merges"].decode() == whole.kv["tokenizer.ggml.merges"]


def test_bad_utf8_in_merges_left_as_bytes_still_fails_the_load(tmp_path):
    """Left as bytes, a merge that is not UTF-8 still stops the load with the reader's own words."""
    from tokenizer import load_tokenizer
    from tokenizer.gguf import VOCAB_ARRAYS

    kvs = [("tokenizer.ggml.model", "string", "gpt2"), ("tokenizer.ggml.tokens", "array:string", ["a", "b", "ab"]),
           ("tokenizer.ggml.merges", "array:string", ["a b", b"\xc3(".decode("latin-1")])]
    data = bytearray(build_gguf(kvs))
    bad = data.index("Ã(".encode("utf-8"))
    data[bad : bad + 3] = b"\xc3(" + b" "
    path = tmp_path / "bad.gguf"
    path.write_bytes(bytes(data))
    for header in (None, read_gguf(path, defer=VOCAB_ARRAYS)):
        with pytest.raises(GGUFError, match=r"tokenizer.ggml.merges\[1\] is not valid UTF-8"):
            load_tokenizer(path, gguf=header)


def test_without_the_accelerator_the_merges_are_decoded(qwen_path, monkeypatch):
    """No C merge table to read the bytes: the deferred merges become the strings the Python merge needs."""
    from tokenizer.gguf import VOCAB_ARRAYS

    text = "Hello, wörld! 日本語のテキスト 🙂 def f(x):"
    with_c = load_gguf_tokenizer(qwen_path, read_gguf(qwen_path, defer=VOCAB_ARRAYS)).encode(text)
    monkeypatch.setenv("TOKCHAT_NO_ACCEL", "1")
    facts = read_gguf(qwen_path, defer=VOCAB_ARRAYS)
    arrays = facts.vocab_arrays(leave_raw=("tokenizer.ggml.merges",))
    assert arrays.kv["tokenizer.ggml.merges"] == read_gguf(qwen_path).kv["tokenizer.ggml.merges"]
    assert load_gguf_tokenizer(qwen_path, facts).encode(text) == with_c


def test_the_text_to_id_dict_is_built_only_when_asked(qwen_path):
    """With the C merge table, a byte-level BPE's text -> id dict (9 MiB for Qwen) waits for a lookup; the
    lookups then answer as the whole dict does, duplicates' last id included."""
    from tokenizer.gguf import VOCAB_ARRAYS
    from tokenizer.gguf_vocab import TokenIds

    tok = load_gguf_tokenizer(qwen_path, read_gguf(qwen_path, defer=VOCAB_ARRAYS))
    text = "Hello, wörld! 日本語のテキスト 🙂 def f(x):\n    return x ** 2  # café"
    ids = tok.encode(text)
    lazy = tok._ids
    assert isinstance(lazy, TokenIds) and lazy._built is None  # loaded and encoding: never built
    whole = read_vocab(read_gguf(qwen_path))["ids"]
    assert tok.encode(text) == ids and tok.token_to_id("Ġhello") == whole["Ġhello"]
    assert lazy._built == whole and tok.token_to_id("no such token") is None
