"""The GGUF metadata reader: every value type, real files, and hostile input."""
from __future__ import annotations

import struct

import pytest
from support.gguf_build import build_gguf, sample_kvs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenizer import GGUFError, TokenizerError, load_tokenizer
from tokenizer.gguf import parse_gguf, read_gguf


def _parse(data: bytes):
    return parse_gguf(data, len(data))


def test_every_value_type_round_trips(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(build_gguf(sample_kvs()))
    g = read_gguf(path)
    assert g.version == 3 and g.tensor_count == 0
    for key, vtype, value in sample_kvs():
        if vtype == "float32":
            assert g.kv[key] == pytest.approx(value)
        else:
            assert g.kv[key] == value, key
    assert g.types["nested"] == "array[array]" and g.types["words"] == "array[string]"
    assert g.kv_end == path.stat().st_size


def test_selected_keys_only(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(build_gguf(sample_kvs()))
    g = read_gguf(path, keys={"u8", "words"})
    assert g.kv == {"u8": 200, "words": ["a", "ünï", "", "x" * 300]}
    assert set(g.types) == {k for k, _, _ in sample_kvs()}


def test_strings_with_nul_bytes_take_the_careful_path():
    data = build_gguf([("t", "array:string", ["a\x00b", "\x00" * 9, "c"])])
    assert _parse(data).kv["t"] == ["a\x00b", "\x00" * 9, "c"]


def test_real_model_metadata(qwen_path):
    g = read_gguf(qwen_path)
    assert g.kv["tokenizer.ggml.model"] == "gpt2"
    assert len(g.kv["tokenizer.ggml.tokens"]) == len(g.kv["tokenizer.ggml.token_type"])
    assert g.kv_end < qwen_path.stat().st_size  # tensor infos and data follow, unread


def test_tensor_data_is_never_read(qwen_path, tmp_path):
    """A copy cut right after the key/values (no tensors at all) reads identically."""
    g = read_gguf(qwen_path)
    cut = tmp_path / "head.gguf"
    with open(qwen_path, "rb") as fh:
        cut.write_bytes(fh.read(g.kv_end))
    assert read_gguf(cut).kv == g.kv


def _offset_and_problem(data: bytes) -> GGUFError:
    with pytest.raises(GGUFError) as info:
        _parse(data)
    err = info.value
    assert 0 <= err.offset <= len(data) and err.problem and str(err.offset) in str(err)
    return err


def test_wrong_magic():
    assert "magic" in _offset_and_problem(b"GGML" + bytes(20)).problem


@pytest.mark.parametrize("version", [0, 1, 4, 0x03000000])
def test_unsupported_versions(version):
    data = b"GGUF" + struct.pack("<IQQ", version, 0, 0)
    assert _offset_and_problem(data).offset == 4


def test_every_truncation_is_a_clean_error():
    data = build_gguf(sample_kvs())
    for n in range(len(data)):
        with pytest.raises(GGUFError):
            _parse(data[:n])


def test_absurd_counts_and_lengths():
    huge = 2**63
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    key = struct.pack("<Q", 1) + b"k"
    cases = {
        "kv count": b"GGUF" + struct.pack("<IQQ", 3, 0, huge),
        "key length": head + struct.pack("<Q", huge),
        "string length": head + key + struct.pack("<IQ", 8, huge),
        "string array": head + key + struct.pack("<IIQ", 9, 8, huge),
        "int array": head + key + struct.pack("<IIQ", 9, 5, huge),
        "nested array": head + key + struct.pack("<IIQ", 9, 9, huge),
        "unknown type": head + key + struct.pack("<I", 99),
        "unknown element": head + key + struct.pack("<IIQ", 9, 77, 1),
    }
    for name, data in cases.items():
        err = _offset_and_problem(data + bytes(16))
        assert err.problem, name


def test_invalid_utf8_names_its_offset():
    data = build_gguf([("t", "array:string", ["ok", b"\xff\xfe"])])
    err = _offset_and_problem(data)
    assert data[err.offset] == 0xFF
    assert "UTF-8" in err.problem


def test_deep_nesting_is_refused():
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<I", 9)
    data = head + struct.pack("<IQ", 9, 1) * 40 + struct.pack("<IQ", 5, 0)
    assert "nested" in _offset_and_problem(data).problem


def test_bad_bool_and_duplicate_key():
    flag = build_gguf([("b", "bool", True)])
    assert "bool" in _offset_and_problem(flag[:-1] + b"\x05").problem
    dup = build_gguf([("k", "uint8", 1), ("k", "uint8", 2)])
    assert "duplicate" in _offset_and_problem(dup).problem


def test_load_tokenizer_reports_bad_files(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + bytes(3))
    with pytest.raises(GGUFError):
        load_tokenizer(bad)
    no_vocab = tmp_path / "novocab.gguf"
    no_vocab.write_bytes(build_gguf([("general.architecture", "string", "llama")]))
    with pytest.raises(TokenizerError, match="no tokenizer"):
        load_tokenizer(no_vocab)
    with pytest.raises(TokenizerError, match="no such file"):
        load_tokenizer(tmp_path / "missing.gguf")


def test_small_spm_vocab_from_writer(tmp_path):
    path = tmp_path / "tiny.gguf"
    path.write_bytes(build_gguf(sample_kvs()))
    tok = load_tokenizer(path)
    assert tok.kind == "spm" and tok.vocab_size == 6
    assert tok.decode(tok.encode("a")) == " a"  # SentencePiece's space prefix


_SAMPLE = build_gguf(sample_kvs())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    edits=st.lists(st.tuples(st.integers(0, len(_SAMPLE) - 1), st.integers(0, 255)), min_size=1, max_size=8),
    cut=st.integers(0, len(_SAMPLE)),
    insert=st.binary(max_size=16),
)
def test_mutated_files_raise_only_gguf_error(edits, cut, insert):
    data = bytearray(_SAMPLE)
    for pos, value in edits:
        data[pos] = value
    data = bytes(data[:cut]) + insert + bytes(data[cut:])
    try:
        _parse(data)
    except GGUFError as err:  # the only exception allowed, and it must say where and what
        assert 0 <= err.offset <= len(data) and err.problem


def _tiny_bpe() -> bytes:
    return build_gguf([
        ("tokenizer.ggml.model", "string", "gpt2"), ("tokenizer.ggml.pre", "string", "qwen2"),
        ("tokenizer.ggml.tokens", "array:string", ["a", "b", "ab", "Ġ", "<|x|>"]),
        ("tokenizer.ggml.token_type", "array:int32", [1, 1, 1, 1, 3]),
        ("tokenizer.ggml.merges", "array:string", ["a b"]),
        ("tokenizer.ggml.eos_token_id", "uint32", 4),
    ])


_TINY = _tiny_bpe()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, len(_TINY) - 1), st.integers(0, 255)), min_size=1, max_size=4))
def test_mutated_tokenizer_files_load_or_raise_tokenizer_error(tmp_path_factory, edits):
    data = bytearray(_TINY)
    for pos, value in edits:
        data[pos] = value
    path = tmp_path_factory.mktemp("m") / "t.gguf"
    path.write_bytes(bytes(data))
    try:
        tok = load_tokenizer(path)
    except TokenizerError as err:  # GGUFError included: a message for the user, nothing else
        assert str(err)
        return
    ids = tok.encode("ab a<|x|>", special=True)
    assert all(0 <= i < tok.vocab_size for i in ids)
    tok.decode(ids)


def test_a_deferred_read_completes_to_the_whole_read(qwen_path):
    """The chat's header read (``defer=VOCAB_ARRAYS``) leaves the vocabulary undecoded; with the arrays it hands
    over, it is the whole read: the same values, the same raw bytes the C merge table is built from, and the
    header itself is left as it was."""
    from tokenizer.gguf import VOCAB_ARRAYS

    whole = read_gguf(qwen_path)
    facts = read_gguf(qwen_path, defer=VOCAB_ARRAYS)
    assert "tokenizer.ggml.tokens" not in facts.kv and "tokenizer.ggml.merges" not in facts.kv
    assert facts.kv["tokenizer.ggml.model"] == "gpt2" and facts.types == whole.types
    held = dict(facts.kv)
    arrays = facts.vocab_arrays()
    assert {**facts.kv, **arrays.kv} == whole.kv and arrays.raw == whole.raw
    assert facts.kv == held and not facts.raw and facts.deferred


def test_a_deferred_array_fails_where_it_is_decoded(tmp_path):
    """Bad UTF-8 inside a deferred array: the facts read, and decoding the arrays raises the whole read's error."""
    from tokenizer.gguf import VOCAB_ARRAYS

    path = tmp_path / "bad.gguf"
    path.write_bytes(build_gguf([("tokenizer.ggml.model", "string", "gpt2"),
                                 ("tokenizer.ggml.tokens", "array:string", ["ok", b"\xff\xfe"])]))
    facts = read_gguf(path, defer=VOCAB_ARRAYS)
    assert facts.kv == {"tokenizer.ggml.model": "gpt2"}
    with pytest.raises(GGUFError) as raised:
        facts.vocab_arrays()
    with pytest.raises(GGUFError) as whole:
        read_gguf(path)
    assert (raised.value.offset, raised.value.problem) == (whole.value.offset, whole.value.problem)
    with pytest.raises(GGUFError):
        load_tokenizer(path, gguf=read_gguf(path, defer=VOCAB_ARRAYS))


def test_a_file_changed_after_the_deferred_read_is_read_again(tmp_path):
    """Offsets found in one file are never used in another: a changed file is read whole, as it is now."""
    import os

    from tokenizer.gguf import VOCAB_ARRAYS

    path = tmp_path / "m.gguf"
    path.write_bytes(build_gguf([("tokenizer.ggml.tokens", "array:string", ["a", "b"])]))
    facts = read_gguf(path, defer=VOCAB_ARRAYS)
    path.write_bytes(build_gguf([("general.name", "string", "new"),
                                 ("tokenizer.ggml.tokens", "array:string", ["longer", "tokens", "here"])]))
    os.utime(path, ns=(facts.stamp[1] + 10**9, facts.stamp[1] + 10**9))
    held = facts.kv
    facts.vocab_arrays()
    assert facts.kv is held  # in place: a ModelMeta holds this very dict
    assert facts.kv == {"general.name": "new", "tokenizer.ggml.tokens": ["longer", "tokens", "here"]}
