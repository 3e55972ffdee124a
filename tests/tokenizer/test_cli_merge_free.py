"""``tokchat tokenize --pieces`` / ``detokenize`` / ``info`` / ``doctor`` on WordPiece and Unigram models.

Round trips: Unigram gives the text back with one leading space (the
space prefix), as long as the text is already in its normalized form
(NFKC, single spaces for the GGUF's ``remove_extra_whitespaces``).
WordPiece is not lossless: it lower-cases, strips accents and drops the
spaces around punctuation, so its round trip is checked against that.
"""
from __future__ import annotations

import json

import pytest
from support.tokenizer_oracles import hf, llama

from app.cli import main
from support.assets import asset_path


def _run(capsys, argv):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def _pieces(out: str) -> list[tuple[int, str]]:
    rows = [line.split("\t") for line in out.splitlines()]
    return [(int(tid), json.loads(piece)) for tid, piece in rows]


def test_wordpiece_pieces_and_lossy_round_trip(capsys, llamacpp_models_dir):
    model = llamacpp_models_dir / "ggml-vocab-bert-bge.gguf"
    text = "Tokenizers split Unbelievable words, Café!"
    code, out, _ = _run(capsys, ["tokenize", "--pieces", "-m", str(model), text])
    rows = _pieces(out)
    assert code == 0
    assert [tid for tid, _ in rows] == llama(str(model)).tokenize(text.encode(), add_bos=False, special=False)
    # word starts carry their space, continuations (BERT's ##) do not
    assert any(not piece.startswith(" ") for _, piece in rows) and rows[0][1].startswith(" ")
    code, out, _ = _run(capsys, ["detokenize", "-m", str(model), *(str(t) for t, _ in rows)])
    # llama.cpp's pieces joined (its detokenize without clean-up): lower-cased, accents gone
    assert code == 0 and out == llama(str(model)).detokenize([t for t, _ in rows]).decode() + "\n"
    assert out == " tokenizers split unbelievable words , cafe !\n"


@pytest.mark.parametrize("name", ["ggml-vocab-nomic-bert-moe.gguf", "mon-unigram-tokenizer.json"])
def test_unigram_round_trip(capsys, llamacpp_models_dir, name):
    model = llamacpp_models_dir / name if name.endswith(".gguf") else asset_path(name)
    for text in ["Hello world, this is a round trip.", "Grüße aus Köln", "日本語のテキスト と 한국어"]:
        code, out, _ = _run(capsys, ["tokenize", "-m", str(model), text])
        ids = json.loads(out)
        assert code == 0 and ids
        code, out, _ = _run(capsys, ["detokenize", "-m", str(model), json.dumps(ids)])
        assert code == 0 and out == " " + text + "\n"
        if name.endswith(".gguf"):
            assert out == llama(str(model)).detokenize(ids).decode() + "\n"
        else:  # HF's Metaspace decoder strips the one leading space
            assert out == " " + hf(str(model)).decode(ids) + "\n"


def test_info_and_doctor_name_the_speed_path(capsys, monkeypatch, llamacpp_models_dir):
    model = llamacpp_models_dir / "ggml-vocab-nomic-bert-moe.gguf"
    code, out, _ = _run(capsys, ["info", str(model)])
    assert code == 0 and "ugm (Unigram, SentencePiece)" in out and "speed path" in out
    monkeypatch.setenv("TOKCHAT_NO_ACCEL", "1")
    code, out, _ = _run(capsys, ["info", "--json", str(model)])
    assert json.loads(out)["speed_path"].startswith("pure Python (TOKCHAT_NO_ACCEL")
    code, out, _ = _run(capsys, ["doctor"])
    assert code == 0 and "tokenizer: pure Python" in out
    monkeypatch.delenv("TOKCHAT_NO_ACCEL")
    code, out, _ = _run(capsys, ["doctor", "--json"])
    assert json.loads(out)["tokenizer"] in ("C accelerator (tokenizer._accel)",
                                            "pure Python (the C accelerator is not built: no C compiler at install time)")


def test_add_special_frames_like_llama_cpp(capsys, llamacpp_models_dir):
    """Counting tokens for an embedding model: ``--add-special`` gives what the model sees."""
    for name in ("ggml-vocab-bert-bge.gguf", "ggml-vocab-nomic-bert-moe.gguf"):
        model = llamacpp_models_dir / name
        text = "How many tokens does this chunk take?"
        code, out, _ = _run(capsys, ["tokenize", "--add-special", "-m", str(model), text])
        assert code == 0 and json.loads(out) == llama(str(model)).tokenize(text.encode(), add_bos=True, special=False)
