"""Hostile GGUF files: real headers, damaged where a reader trusts them.

Seeds are the key/value sections of real files (SmolLM2, and llama.cpp's
vocabulary files for SentencePiece, Phi-3 and DeepSeek-Coder).  Two families
of damage:

* bytes: inflate a length or count (to the bytes left + 1, 2^63, 2^64 - 1,
  ...), change a value or element type, flip bytes, truncate, insert;
* meaning: a well-formed file whose keys have the wrong type, special ids
  out of range, arrays shorter than the vocabulary, empty or duplicate
  tokens, garbage merges, an unknown tokenizer model or pre-tokenizer.

For every file, ``read_gguf`` and ``load_tokenizer`` may only succeed or raise
``GGUFError``/``TokenizerError``; a tokenizer that loads must encode and decode
a probe; each example has a deadline; the address space is capped a fixed
multiple of the file size above where it was, and tracemalloc measures the
peak for the inflated-length cases.  The same files given to
``python -m app --model FILE --prompt hi`` print one line, no traceback.
"""
from __future__ import annotations

import functools
import struct
import subprocess
import sys
import tracemalloc
from datetime import timedelta
from pathlib import Path

import pytest
from support.hardening_limits import address_space_cap
from support.process_env import child_env
from support.gguf_mutate import field_map, header_bytes, write_gguf
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tokenizer import GGUFError, TokenizerError, load_tokenizer
from tokenizer.gguf import read_gguf

SEEDS = {
    "smollm2": lambda models, smollm: smollm,
    "llama-spm": lambda models, smollm: models / "ggml-vocab-llama-spm.gguf",
    "phi-3": lambda models, smollm: models / "ggml-vocab-phi-3.gguf",
    "deepseek-coder": lambda models, smollm: models / "ggml-vocab-deepseek-coder.gguf",
}
#: the address space a load may add, as a multiple of the file size (a clean load needs about 10x)
AS_FACTOR = 40
AS_SLACK = 256 << 20
HOSTILE_U64 = [0, 1, 2**31, 2**32 - 1, 2**32, 2**63, 2**64 - 1]
PROBE = "Hello <|im_end|> <s> wörld 🙂\n\t 123 [INST] <|endoftext|>"
FUZZ = settings(max_examples=40, deadline=timedelta(seconds=10), derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


@functools.lru_cache(maxsize=None)
def _seed(path: str) -> tuple[bytes, object]:
    data = header_bytes(path)
    return data, field_map(data)


@pytest.fixture(scope="module")
def seeds(llamacpp_models_dir, smollm_path) -> dict[str, Path]:
    return {name: Path(pick(llamacpp_models_dir, smollm_path)) for name, pick in SEEDS.items()}


def _exercise(path: Path) -> str:
    """Read and load ``path``; the outcome, or the assertion that the error was not a clean one."""
    size = path.stat().st_size
    with address_space_cap(AS_FACTOR * size + AS_SLACK):
        try:
            read_gguf(path)
            tok = load_tokenizer(path)
        except GGUFError as exc:
            assert exc.problem and 0 <= exc.offset <= size and "\n" not in str(exc)
            return "gguf-error"
        except TokenizerError as exc:
            assert str(exc) and "\n" not in str(exc)
            return "tokenizer-error"
        # it loaded: it must also work, or say in one line why it cannot
        try:
            ids = tok.encode(PROBE, special=True)
        except TokenizerError as exc:
            assert str(exc) and "\n" not in str(exc)
            return "encode-error"
        assert all(0 <= i < tok.vocab_size for i in ids)
        tok.decode(ids)
        decoder = tok.stream_decoder()
        "".join(decoder.feed(i) for i in ids) + decoder.finalize()
        return "loaded"


# -- byte-level damage ---------------------------------------------------------------------

@st.composite
def byte_damage(draw, seed_names):
    name = draw(st.sampled_from(seed_names))
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["inflate", "inflate-inner", "type", "flip", "truncate", "insert"]))
        edits.append((kind, draw(st.integers(0, 2**32)), draw(st.sampled_from(HOSTILE_U64 + ["left+1", "left"])),
                      draw(st.integers(0, 255)), draw(st.binary(min_size=1, max_size=16))))
    return name, edits


def _damage(data: bytes, fm, edits) -> bytes:
    out = bytearray(data)
    for kind, pick, value, byte, blob in edits:
        if kind in ("inflate", "type"):
            fields = [(o, k) for o, k in fm.top if (k in ("type", "etype")) == (kind == "type")]
            off, field_kind = fields[pick % len(fields)]
        elif kind == "inflate-inner":
            off, field_kind = fm.inner[pick % len(fm.inner)], "len"
        if kind in ("inflate", "inflate-inner") and off + 8 <= len(out):
            if value in ("left", "left+1"):
                value = len(out) - off - 8 + (value == "left+1")
            struct.pack_into("<Q", out, off, value)
        elif kind == "type" and off + 4 <= len(out):
            struct.pack_into("<I", out, off, byte % 16 if pick % 2 else pick)
        elif kind == "flip" and out:
            out[pick % len(out)] ^= byte or 0xFF
        elif kind == "truncate":
            del out[pick % (len(out) + 1):]
        elif kind == "insert":
            at = pick % (len(out) + 1)
            out[at:at] = blob
    return bytes(out)


def test_field_map_agrees_with_the_reader(seeds):
    """The fuzzer's own view of the file is right (else it would damage the wrong bytes)."""
    for path in seeds.values():
        data, fm = _seed(str(path))
        assert fm.kv_end == read_gguf(path).kv_end and len(fm.top) > 20 and len(fm.inner) > 30000


@FUZZ
@given(case=byte_damage(sorted(SEEDS)))
def test_damaged_bytes_give_only_clean_errors(case, seeds, tmp_path):
    name, edits = case
    data, fm = _seed(str(seeds[name]))
    path = tmp_path / "damaged.gguf"
    path.write_bytes(_damage(data, fm, edits))
    event(_exercise(path))


def test_inflated_lengths_allocate_nothing_big(seeds, tmp_path):
    """Every top-level length and count of SmolLM2's header, inflated: the peak stays near a clean load's."""
    data, fm = _seed(str(seeds["smollm2"]))
    path = tmp_path / "clean.gguf"
    path.write_bytes(data)
    tracemalloc.start()
    try:
        load_tokenizer(path)
        clean_peak = tracemalloc.get_traced_memory()[1]
        outcomes = []
        for off, kind in fm.top:
            if kind not in ("len", "count"):
                continue
            for value in (2**63, len(data) - off - 8 + 1):
                damaged = bytearray(data)
                struct.pack_into("<Q", damaged, off, value)
                path.write_bytes(damaged)
                tracemalloc.reset_peak()
                outcomes.append(_exercise(path))
                peak = tracemalloc.get_traced_memory()[1]
                assert peak <= 1.5 * clean_peak, (off, kind, value, peak, clean_peak)
    finally:
        tracemalloc.stop()
    assert outcomes.count("gguf-error") >= len(outcomes) // 2


# -- well-formed files with wrong meaning --------------------------------------------------

_KEYS = ["tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
         "tokenizer.ggml.scores", "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id",
         "tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.unknown_token_id",
         "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_space_prefix",
         "tokenizer.chat_template", "general.name", "general.architecture"]
_WRONG_VALUES = [("uint32", 7), ("int32", -1), ("uint64", 2**64 - 1), ("int64", -(2**63)), ("float32", 1.5),
                 ("bool", True), ("string", ""), ("string", "gpt2"), ("string", "llama"), ("string", "gemma4"),
                 ("string", "bert"), ("string", "qwen2"), ("string", "\x00\uffff"), ("array[int32]", []),
                 ("array[string]", []), ("array[string]", ["a", "b"]), ("array[int32]", [3] * 5),
                 ("array[float32]", [0.0, -1.0])]


@st.composite
def meaning_damage(draw, seed_names):
    name = draw(st.sampled_from(seed_names))
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["retype", "delete", "id", "shorten", "tokens", "merges", "types"]))
        edits.append((kind, draw(st.sampled_from(_KEYS)), draw(st.sampled_from(_WRONG_VALUES)),
                      draw(st.integers(0, 2**31)), draw(st.text(max_size=12)), draw(st.integers(-8, 300))))
    return name, edits


def _mislead(items: dict[str, tuple[str, object]], edits) -> list[tuple[str, str, object]]:
    n = len(items["tokenizer.ggml.tokens"][1])
    for kind, key, (tname, value), pick, text, small in edits:
        if kind == "retype":
            items[key] = (tname, value)
        elif kind == "delete":
            items.pop(key, None)
        elif kind == "id":  # a special id anywhere, in range or not
            items[key if key.endswith("_id") else "tokenizer.ggml.bos_token_id"] = (
                "uint32", [0, n - 1, n, n + 1, 2**32 - 1, pick % n][pick % 6])
        elif kind == "shorten":
            arrays = [k for k, (t, _) in items.items() if t.startswith("array[")]
            if arrays:
                k = arrays[pick % len(arrays)]
                t, v = items[k]
                items[k] = (t, list(v)[: pick % (len(v) + 1)])
        elif kind == "tokens":  # empty, duplicate, odd or special-looking entries
            t, v = items.get("tokenizer.ggml.tokens", ("array[string]", []))
            v = list(v)
            if v and t == "array[string]":
                for j in range(1 + pick % 50):
                    v[(pick * 7919 + j * 104729) % len(v)] = [text, "", v[0], "<|im_end|>", "\u2581" * 3][(j + small) % 5]
                items["tokenizer.ggml.tokens"] = (t, v)
        elif kind == "merges":
            t, v = items.get("tokenizer.ggml.merges", ("array[string]", []))
            v = list(v)
            if t == "array[string]":
                garbage = [text, "", " ", "a", "x y z", f"{text} {text}", "Ġ Ġ"]
                for j in range(1 + pick % 50):
                    if v:
                        v[(pick * 31 + j * 131) % len(v)] = garbage[(j + small) % len(garbage)]
                    else:
                        v.append(garbage[j % len(garbage)])
                items["tokenizer.ggml.merges"] = (t, v)
        elif kind == "types":  # token types out of the spec's range, or everything control
            t, v = items.get("tokenizer.ggml.token_type", ("array[int32]", [1] * n))
            v = list(v)
            if t == "array[int32]":
                for j in range(0, len(v), 1 + pick % 997):
                    v[j] = small if small != 300 else 3
                items["tokenizer.ggml.token_type"] = (t, v)
    return [(k, t, v) for k, (t, v) in items.items()]


@functools.lru_cache(maxsize=None)
def _items(path: str) -> dict[str, tuple[str, object]]:
    g = read_gguf(path)
    return {k: (g.types[k], v) for k, v in g.kv.items()}


@FUZZ
@given(case=meaning_damage(sorted(SEEDS)))
def test_misleading_metadata_gives_only_clean_errors(case, seeds, tmp_path):
    name, edits = case
    items = dict(_items(str(seeds[name])))
    path = tmp_path / "misleading.gguf"
    path.write_bytes(write_gguf(_mislead(items, edits)))
    event(_exercise(path))


# -- the same files through the command line -----------------------------------------------

def _cli_cases(seeds, smollm_path, tmp_path) -> dict[str, Path]:
    data, fm = _seed(str(seeds["smollm2"]))
    tokens_len = next(o for o, k in fm.top if k == "count" and o > 24 and struct.unpack_from("<Q", data, o)[0] == 49152)
    items = dict(_items(str(smollm_path)))
    cases = {
        "empty": b"",
        "magic only": b"GGUF",
        "not gguf": b"PK\x03\x04" + bytes(100),
        "version 1": b"GGUF" + struct.pack("<IQQ", 1, 0, 0),
        "truncated in the vocabulary": data[: len(data) // 2],
        "token count 2^63": data[:tokens_len] + struct.pack("<Q", 2**63) + data[tokens_len + 8:],
        "header only, no tensors": data,
        "tokens as int32": write_gguf(_mislead(dict(items), [("retype", "tokenizer.ggml.tokens", ("array[int32]", [1, 2]), 0, "", 0)])),
        "no tokenizer model": write_gguf(_mislead(dict(items), [("delete", "tokenizer.ggml.model", ("bool", True), 0, "", 0)])),
    }
    paths = {}
    for n, (name, blob) in enumerate(cases.items()):
        paths[name] = tmp_path / f"hostile{n}.gguf"
        paths[name].write_bytes(blob)
    return paths


def test_the_cli_says_one_line_for_each_hostile_file(seeds, smollm_path, tmp_path):
    env = child_env(tmp_path)
    for name, path in _cli_cases(seeds, smollm_path, tmp_path).items():
        result = subprocess.run([sys.executable, "-m", "app", "--model", str(path), "--prompt", "hi"],
                                capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2, (name, result.stderr)
        assert "Traceback" not in result.stderr and len(lines) == 1, (name, result.stderr)
        assert lines[0].startswith("tokchat: ") and len(lines[0]) > 20, (name, lines)
        assert result.stdout == "", name
    assert not list((tmp_path / "data").glob("*.sqlite3-journal"))



# ---- the size limits (tokenizer.gguf's MAX_*), lowered so a small file crosses them ---------------

def _vocab_file(n_tokens: int, template: str = "{{ messages }}") -> bytes:
    tokens = [f"t{i}" for i in range(n_tokens)]
    return write_gguf([("tokenizer.ggml.model", "string", "llama"), ("tokenizer.chat_template", "string", template),
                       ("tokenizer.ggml.tokens", "array[string]", tokens),
                       ("tokenizer.ggml.scores", "array[float32]", [0.0] * n_tokens)])


def _both_paths(monkeypatch, path) -> list[str]:
    """The error each path (C string walker, pure Python) gives for ``path``; they must be one GGUFError."""
    messages = []
    for no_accel in ("", "1"):
        monkeypatch.setenv("TOKCHAT_NO_ACCEL", no_accel)
        with pytest.raises(GGUFError) as err:
            load_tokenizer(path)
        messages.append(str(err.value))
    assert messages[0] == messages[1] and "\n" not in messages[0]
    return messages


def test_the_limits_are_stated_in_one_place():
    import tokenizer.gguf as g
    import tokenizer.gguf_vocab as v

    limits = {name for name in vars(g) if name.startswith("MAX_")}
    assert limits == {"MAX_NESTING", "MAX_KV_COUNT", "MAX_STRING_LEN", "MAX_ARRAY_LEN", "MAX_VOCAB", "MAX_MERGES"}
    assert (v.MAX_VOCAB, v.MAX_MERGES) == (g.MAX_VOCAB, g.MAX_MERGES)
    # the largest real vocabulary (Gemma 4: 262,144 tokens, 514,906 merges) is well inside them
    assert g.MAX_VOCAB > 262_144 and g.MAX_MERGES > 514_906 and g.MAX_ARRAY_LEN >= g.MAX_MERGES


def test_a_string_over_the_limit_is_one_gguf_error(monkeypatch, tmp_path):
    path = tmp_path / "long-template.gguf"
    path.write_bytes(_vocab_file(10, template="x" * 100))
    monkeypatch.setattr("tokenizer.gguf.MAX_STRING_LEN", 64)
    assert "claims 100 bytes, over the 64-byte limit on a string" in _both_paths(monkeypatch, path)[0]


def test_a_token_over_the_string_limit_is_one_gguf_error(monkeypatch, tmp_path):
    """Inside a string array too, where the C walker does the reading."""
    path = tmp_path / "long-token.gguf"
    path.write_bytes(write_gguf([("tokenizer.ggml.model", "string", "llama"),
                                 ("tokenizer.ggml.tokens", "array[string]", ["a", "b" * 40, "c" * 90, "d"])]))
    monkeypatch.setattr("tokenizer.gguf.MAX_STRING_LEN", 64)
    message = _both_paths(monkeypatch, path)[0]
    assert "tokenizer.ggml.tokens[2] claims 90 bytes, over the 64-byte limit" in message


def test_an_array_over_the_limit_is_one_gguf_error(monkeypatch, tmp_path):
    path = tmp_path / "many-tokens.gguf"
    path.write_bytes(_vocab_file(300))
    monkeypatch.setattr("tokenizer.gguf.MAX_ARRAY_LEN", 200)
    assert "claims 300 elements, over the 200-element limit on an array" in _both_paths(monkeypatch, path)[0]


def test_too_many_keys_is_one_gguf_error(monkeypatch, tmp_path):
    path = tmp_path / "keys.gguf"
    path.write_bytes(write_gguf([(f"general.k{i}", "uint32", i) for i in range(40)]))
    monkeypatch.setattr("tokenizer.gguf.MAX_KV_COUNT", 32)
    assert "key/value count 40 is over the limit of 32" in _both_paths(monkeypatch, path)[0]


def test_a_vocabulary_over_the_limit_is_one_tokenizer_error(monkeypatch, tmp_path):
    path = tmp_path / "vocab.gguf"
    path.write_bytes(_vocab_file(300))
    monkeypatch.setattr("tokenizer.gguf_vocab.MAX_VOCAB", 256)
    with pytest.raises(TokenizerError, match="300 tokens, over the limit of 256"):
        load_tokenizer(path)
