"""``tokchat tokenize``, ``detokenize`` and ``info`` end to end through the real CLI."""
from __future__ import annotations

import io
import json

import pytest
from support.tokenizer_oracles import hf, llama

from app.cli import main


def _run(capsys, argv, stdin: str | None = None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_tokenize_matches_llama_cpp(capsys, qwen_path):
    text = "Hello <|im_end|> wörld 123"
    for flag, special in (([], False), (["--special"], True)):
        code, out, _ = _run(capsys, ["tokenize", "--model", str(qwen_path), *flag, text])
        assert code == 0
        want = llama(str(qwen_path)).tokenize(text.encode(), add_bos=False, special=special)
        assert json.loads(out) == want


def test_tokenize_reads_stdin_and_jsonl(capsys, monkeypatch, qwen_tokenizer_dir):
    ref = hf(str(qwen_tokenizer_dir / "tokenizer.json"))
    code, out, _ = _run(capsys, ["tokenize", "-m", str(qwen_tokenizer_dir)], "line one\nline two\n", monkeypatch)
    assert code == 0 and json.loads(out) == ref.encode("line one\nline two\n", add_special_tokens=False).ids
    lines = ["plain", "with <|im_start|> special", "tabs\tand\nnewline"]
    stdin = "".join(json.dumps(s) + "\n" for s in lines)
    code, out, _ = _run(capsys, ["tokenize", "--jsonl", "--special", "-m", str(qwen_tokenizer_dir)], stdin, monkeypatch)
    assert code == 0
    assert [json.loads(x) for x in out.splitlines()] == [ref.encode(s, add_special_tokens=False).ids for s in lines]


def test_tokenize_pieces(capsys, qwen_path):
    code, out, _ = _run(capsys, ["tokenize", "--pieces", "-m", str(qwen_path), "Hi there 👍"])
    rows = [line.split("\t") for line in out.splitlines()]
    assert code == 0 and rows[0][1] == '"Hi"' and rows[1][1] == '" there"'
    assert any(piece.startswith("b'") for _, piece in rows)  # the emoji is split over byte tokens


def test_detokenize_round_trip(capsys, smollm_path):
    text = "Round trip, ünïcode and <|im_end|>"
    ids = llama(str(smollm_path)).tokenize(text.encode(), add_bos=False, special=True)
    code, out, _ = _run(capsys, ["detokenize", "-m", str(smollm_path), *map(str, ids)])
    assert code == 0 and out == text + "\n"
    code, out, _ = _run(capsys, ["detokenize", "--skip-special", "-m", str(smollm_path), json.dumps(ids)])
    assert out == text.replace("<|im_end|>", "") + "\n"


@pytest.mark.parametrize("argv, message", [
    (["detokenize", "-m", "{model}", "12", "abc"], "not a token id: 'abc'"),
    (["detokenize", "-m", "{model}", "99999999"], "out of range"),
    (["tokenize", "-m", "{missing}", "x"], "not found"),
])
def test_cli_errors_are_one_line(capsys, smollm_path, tmp_path, argv, message):
    argv = [a.format(model=smollm_path, missing=tmp_path / "nope.gguf") for a in argv]
    code, out, err = _run(capsys, argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_jsonl_rejects_bad_lines(capsys, monkeypatch, smollm_path):
    code, _, err = _run(capsys, ["tokenize", "--jsonl", "-m", str(smollm_path)], '"ok"\nnot json\n', monkeypatch)
    assert code == 2 and "line 2" in err


def test_info(capsys, qwen_path, gemma_path):
    code, out, _ = _run(capsys, ["info", str(qwen_path)])
    assert code == 0
    assert "pre-tokenizer qwen2" in out and "151936 tokens" in out and "'<|im_end|>'" in out
    assert "chat template" in out and "{%- if tools %}" in out
    code, out, _ = _run(capsys, ["info", "--json", str(gemma_path)])
    facts = json.loads(out)
    ref = llama(str(gemma_path))
    assert facts["kind"] == "spm" and facts["vocab_size"] == ref.n_vocab()
    assert facts["bos"]["id"] == ref.token_bos() and facts["add_bos"] is True
    assert {e["text"] for e in facts["eog"]} >= {"<eos>", "<end_of_turn>"}
