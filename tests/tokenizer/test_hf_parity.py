"""Id-for-id parity with Hugging Face ``tokenizers`` on tokenizer.json assets.

HF's ``encode(text, add_special_tokens=False)`` still splits added tokens
out of the text, so it is compared with our ``special=True``.
"""
from __future__ import annotations

import json

import pytest
from support.tokenizer_oracles import golden_cases, hf, ours, vocab_ggufs
from support.tok_corpus import base64_blob, corpus

from tokenizer import load_tokenizer


def _mismatches(json_dir, texts):
    tok, ref = ours(str(json_dir)), hf(str(json_dir / "tokenizer.json"))
    bad = []
    for text in texts:
        want = ref.encode(text, add_special_tokens=False).ids
        got = tok.encode(text, special=True)
        if got != want:
            bad.append(f"{text[:40]!r}: HF {want[:12]} ours {got[:12]}")
    return bad


def test_corpus_matches_hf(json_dir):
    texts = corpus() + ["a" * 10000, base64_blob(37_500)]
    bad = _mismatches(json_dir, texts)
    assert not bad, f"{100 * (len(texts) - len(bad)) / len(texts):.1f}% match:\n" + "\n".join(bad[:5])


def test_llama_cpp_golden_inputs_match_hf(json_dir, llamacpp_models_dir):
    texts = [t for p in vocab_ggufs(llamacpp_models_dir) if p.name in ("ggml-vocab-qwen2.gguf", "ggml-vocab-llama-bpe.gguf")
             for t, _ in golden_cases(p)]
    assert texts
    assert not _mismatches(json_dir, texts)


def test_file_and_directory_load_the_same(json_dir):
    a = ours(str(json_dir))
    b = load_tokenizer(json_dir / "tokenizer.json")
    text = "Hello <|im_end|> world 123"
    assert a.encode(text, special=True) == b.encode(text, special=True)
    assert a.vocab_size == b.vocab_size == hf(str(json_dir / "tokenizer.json")).get_vocab_size()


def test_config_gives_template_and_bos_eos(json_dir):
    tok = ours(str(json_dir))
    config = json.loads((json_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert tok.chat_template == config.get("chat_template")
    eos = config.get("eos_token")
    eos = eos.get("content") if isinstance(eos, dict) else eos
    assert tok.eos_token == eos and tok.eos_id == hf(str(json_dir / "tokenizer.json")).token_to_id(eos)
    assert tok.eos_id in tok.eog_ids
    bos = config.get("bos_token")
    if bos is None:
        assert tok.bos_id is None and tok.add_bos is False
    else:
        ref = hf(str(json_dir / "tokenizer.json"))
        assert tok.bos_id == ref.token_to_id(bos)
        # the model wants BOS exactly when HF's post-processor adds it
        assert tok.add_bos == (ref.encode("x", add_special_tokens=True).ids[0] == tok.bos_id)


def test_added_tokens_are_specials(json_dir):
    tok, ref = ours(str(json_dir)), hf(str(json_dir / "tokenizer.json"))
    for tid, added in ref.get_added_tokens_decoder().items():
        assert tok.token_to_id(added.content) == tid
        assert tok.is_special(tid) == added.special
        assert tok.decode([tid]) == added.content


@pytest.mark.parametrize("bad", [
    '{"model": {"type": "WordPiece", "vocab": {}}}', "not json", "[]",
    '{"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}}',
    '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [1]}}',
    '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "added_tokens": [{"id": 99999999999, "content": "x"}]}',
    '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "added_tokens": [{"content": "x"}]}',
    '{"model": {"type": "BPE", "vocab": {}}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(("}}}',
])
def test_unsupported_tokenizer_json_is_a_clear_error(tmp_path, bad):
    from tokenizer import TokenizerError

    path = tmp_path / "tokenizer.json"
    path.write_text(bad, encoding="utf-8")
    with pytest.raises(TokenizerError):
        load_tokenizer(path)
