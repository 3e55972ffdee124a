"""A damaged precompiled charsmap is one TokenizerError, at load or at encode, on both paths.

The charsmap is the real one from the nomic-embed GGUF with bytes of its
double array overwritten; the vocabulary is a few pieces, so the GGUF is
small.  Either the walk still stays inside the array (then ids come out) or
it leaves it (then the user gets one line saying the file is damaged).
"""
from __future__ import annotations

import random

import pytest
from support.gguf_build import build_gguf

from tokenizer import TokenizerError, load_tokenizer
from tokenizer.gguf import read_gguf

TEXTS = ["Hello world", "ＡＢＣ ① ﬁ", "Grüße", "日本語", "  spaced   out  ", "\u3000x"]


def _gguf(tmp_path, charsmap: bytes):
    tokens = ["<pad>", "</s>", "<unk>", "\u2581", "\u2581Hello", "\u2581world", "o", "l", "e", "H"]
    kvs = [("tokenizer.ggml.model", "string", "t5"),
           ("tokenizer.ggml.tokens", "array:string", tokens),
           ("tokenizer.ggml.scores", "array:float32", [0.0, 0.0, 0.0] + [-1.0 - i for i in range(len(tokens) - 3)]),
           ("tokenizer.ggml.token_type", "array:int32", [3, 3, 2] + [1] * (len(tokens) - 3)),
           ("tokenizer.ggml.add_space_prefix", "bool", True),
           ("tokenizer.ggml.remove_extra_whitespaces", "bool", True),
           ("tokenizer.ggml.precompiled_charsmap", "array:uint8", list(charsmap))]
    path = tmp_path / "t5.gguf"
    path.write_bytes(build_gguf(kvs))
    return path


@pytest.mark.parametrize("accel", ["c", "python"])
def test_damaged_charsmap_is_one_clear_error(tmp_path, monkeypatch, llamacpp_models_dir, accel):
    if accel == "python":
        monkeypatch.setenv("TOKCHAT_NO_ACCEL", "1")
    kv = read_gguf(llamacpp_models_dir / "ggml-vocab-nomic-bert-moe.gguf",
                   keys={"tokenizer.ggml.precompiled_charsmap"}).kv
    clean = bytes(x & 0xFF for x in kv["tokenizer.ggml.precompiled_charsmap"])
    assert load_tokenizer(_gguf(tmp_path, clean)).encode("Hello world") == [4, 5]
    rng = random.Random(7)
    outcomes = set()
    for trial in range(40):
        damaged = bytearray(clean)
        for _ in range(200):
            damaged[rng.randrange(4, 4 + 4096)] = rng.randrange(256)  # the double array's first nodes
        if trial % 5 == 0:
            damaged[:4] = rng.randrange(1 << 32).to_bytes(4, "little")  # a bad header
        try:
            tok = load_tokenizer(_gguf(tmp_path, bytes(damaged)))
            for text in TEXTS:
                tok.encode(text)
            outcomes.add("ids")
        except TokenizerError as exc:
            assert "\n" not in str(exc)
            outcomes.add("error")
    assert "error" in outcomes
