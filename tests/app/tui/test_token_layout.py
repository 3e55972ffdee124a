"""Token pieces drawn inert and laid out in rows: newlines end rows, wide pieces split, widths in cells."""
from __future__ import annotations

from functools import lru_cache

from rich.cells import cell_len

from app.tui.inert import safe_text
from app.tui.token_layout import BYTES, NORMAL, SPECIAL, Piece, first_rows, layout, pieces


@lru_cache(maxsize=None)
def _tok(path):
    from tokenizer import load_tokenizer

    return load_tokenizer(path)


def test_pieces_are_safe_and_typed(smollm_path, gemma_path):
    tok = _tok(smollm_path)
    ids = tok.encode("<|im_start|>a\n\tb\x1b😀", special=True)
    drawn = pieces(tok, ids)
    assert drawn[0] == Piece("<|im_start|>", SPECIAL)
    assert all(p.kind in (NORMAL, SPECIAL, BYTES) for p in drawn)
    assert not any("\x1b" in p.text or "\n" in p.text or "\t" in p.text for p in drawn)
    assert any(p.newline and p.text.endswith("↵") for p in drawn)
    assert "".join(p.text for p in drawn if p.kind != BYTES).count("\\x1b") == 1
    # SentencePiece byte-fallback tokens (<0x..>) are drawn as their bytes
    gemma = _tok(gemma_path)
    byte_ids = [i for i in range(gemma.vocab_size) if gemma.id_to_token(i) == "<0x1B>"]
    assert byte_ids and pieces(gemma, byte_ids)[0] == Piece("‹1b›", BYTES)


def test_safe_text_escapes_controls_and_bidi():
    assert safe_text("a\x00b\u202ec\x85\U000F0001") == "a\\x00b\\u202ec\\x85\\U000f0001"
    assert safe_text("é 中") == "é 中"


def test_layout_rows_fit_the_width_and_keep_every_piece():
    drawn = [Piece("hello", NORMAL), Piece(" world↵", NORMAL, True), Piece("中文字符" * 5, NORMAL),
             Piece("x" * 30, NORMAL), Piece("<s>", SPECIAL)]
    rows = layout(drawn, 12)
    assert all(sum(cell_len(t) for _, t in row) <= 12 for row in rows)
    assert [i for i, _ in rows[0]] == [0, 1]  # the newline piece ends the first row
    for index, p in enumerate(drawn):
        assert "".join(t for row in rows for i, t in row if i == index) == p.text
    first = first_rows(rows, len(drawn))
    assert first[0] == 0 and first[2] == 1 and first == sorted(first)
