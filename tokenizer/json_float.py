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
#: serde_json's POW10 table: 1e0 .. 1e308, each the correctly rounded f64
_POW10 = [float(f"1e{n}") for n in range(309)]


def serde_float(text: str) -> float:
    """``text`` (a JSON number) as serde_json's ``f64_from_parts`` computes it."""
    if "e" not in text and "E" not in text:
        neg = text[0] == "-"
        body = text[1:] if neg else text
        dot = body.find(".")
        digits = body if dot < 0 else body[:dot] + body[dot + 1:]
        if len(digits) <= 15:
            return float(text)  # < 2**53 and a power of ten <= 1e22: one rounding, as Python's
        if len(digits) <= 19:  # fits a u64: no digit dropped
            f = int(digits) / _POW10[0 if dot < 0 else len(body) - dot - 1]
            return -f if neg else f
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
    return _scale(significand, exponent, positive, text)


def _scale(significand: int, exponent: int, positive: bool, text: str) -> float:
    """serde_json's ``f64_from_parts``: the u64 rounded to f64, then one multiply or divide by 10**|e|."""
    f = float(significand)
    while True:
        if abs(exponent) <= 308:
            pow10 = _POW10[abs(exponent)]
            f = f * pow10 if exponent >= 0 else f / pow10
            break
        if f == 0.0:
            break
        if exponent >= 0:
            raise ValueError(f"number out of range: {text}")
        f /= 1e308
        exponent += 308
    return f if positive else -f
