"""llama.cpp's own tokenizer tests: ``ggml-vocab-*.gguf.inp`` / ``.out``.

Read exactly as ``tests/test-tokenizer-0.cpp`` reads them and run with
``add_special=false, parse_special=false``, i.e. ``encode(text)``.
"""
from __future__ import annotations

from support.tokenizer_oracles import golden_cases, ours


def test_golden_cases(golden_gguf):
    tok = ours(str(golden_gguf))
    cases = golden_cases(golden_gguf)
    assert cases, f"no cases in {golden_gguf.name}.inp"
    bad = [(text[:40], want[:10], tok.encode(text)[:10]) for text, want in cases if tok.encode(text) != want]
    assert not bad, f"{golden_gguf.name}: {len(cases) - len(bad)}/{len(cases)} golden cases match; {bad[:3]}"
