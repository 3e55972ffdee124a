"""Decimal text -> float exactly as ``serde_json`` (without ``float_roundtrip``) reads it.

Hugging Face ``tokenizers`` parses tokenizer.json with serde_json, whose
default number parser is fast but not correctly rounded: it turns the
decimal digits into a u64 (ignoring digits past its range), converts that
to f64 and multiplies or divides by one power of ten.  For Unigram scores
this is sometimes one ulp away from Python's ``float()``, and that ulp
decides ties between equal-scoring segmentations.  To pick the same
segmentation as HF we read scores the same way.
"""
from __future__ import annotations

_U64_MAX = (1 << 64) - 1


def serde_float(text: str) -> float:
    """``text`` (a JSON number) as serde_json's ``f64_from_parts`` computes it."""
    digits = len(text) - text.startswith("-") - ("." in text)
    if digits <= 15 and "e" not in text and "E" not in text:
        return float(text)  # < 2**53 and a power of ten <= 1e22: one rounding, as Python's
    s = text
    positive = True
    if s.startswith("-"):
        positive, s = False, s[1:]
    mantissa, _, exp_text = s.replace("E", "e").partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    significand, exponent, overflowed = 0, 0, False
    for ch in int_part:
        if overflowed or significand * 10 + int(ch) > _U64_MAX:
            overflowed = True
            exponent += 1  # an ignored integer digit still scales the value
            continue
        significand = significand * 10 + int(ch)
    for ch in frac_part:
        if overflowed or significand * 10 + int(ch) > _U64_MAX:
            overflowed = True
            continue  # ignored fractional digits
        significand = significand * 10 + int(ch)
        exponent -= 1
    if exp_text:
        exponent += int(exp_text)
    f = float(significand)
    while True:
        if abs(exponent) <= 308:
            pow10 = float(f"1e{abs(exponent)}")
            f = f * pow10 if exponent >= 0 else f / pow10
            break
        if f == 0.0:
            break
        if exponent >= 0:
            raise ValueError(f"number out of range: {text}")
        f /= 1e308
        exponent += 308
    return f if positive else -f
