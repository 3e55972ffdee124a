"""The optional C accelerator (``tokenizer/_accel.c``) and the table it needs.

tokchat works without it: every accelerated step has a pure-Python twin
that gives the same ids, and the tests compare the two.  It is skipped when
the extension was not built (no compiler at install time) or when
``TOKCHAT_NO_ACCEL=1`` is set.

The C splitter needs each code point's class under llama.cpp's Unicode
tables; :func:`flag_table` builds that from the same ``regex`` classes the
Python pre-tokenizer uses (0.05 to 0.1 s) once per machine and keeps it in
the cache directory (:mod:`tokenizer.table_cache`).
"""
from __future__ import annotations

import importlib
import os
import zlib
from array import array
from types import ModuleType

from tokenizer import unicode_classes as uc

#: pre-tokenizer type -> the C splitter's mode (types without one stay on regex)
SPLIT_MODES = {"gpt2": 0, "llama3": 1, "qwen2": 2, "qwen35": 3, "starcoder": 4}
#: or-ed into a mode for tokenizer.json's "(?i:'s|'t|...)": U+017F LONG S folds to "s"
FOLD_LONG_S = 0x100
#: tokenizer.json Split regexes the C splitter reproduces exactly (with FOLD_LONG_S, plain classes)
HF_SPLIT_MODES = {
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+": 1 | FOLD_LONG_S,
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+": 2 | FOLD_LONG_S,
}
FLAG_L, FLAG_N, FLAG_M, FLAG_WS = 1, 2, 4, 8

_tables: dict[bool, bytes] = {}


def accel_module() -> ModuleType | None:
    """``tokenizer._accel`` if it is built and allowed, else None."""
    if os.environ.get("TOKCHAT_NO_ACCEL", "") not in ("", "0"):
        return None
    try:
        # by name: a C extension (tokenizer/_accel*.c, built by setup.py) that the type checker cannot read
        return importlib.import_module("tokenizer._accel")
    except ImportError:
        return None


def accel_status() -> str:
    """Which tokenizer path runs here, in words (``tokchat doctor`` and ``tokchat info`` show it)."""
    if os.environ.get("TOKCHAT_NO_ACCEL", "") not in ("", "0"):
        return "pure Python (TOKCHAT_NO_ACCEL is set)"
    if accel_module() is None:
        return "pure Python (the C accelerator is not built: no C compiler at install time)"
    return "C accelerator (tokenizer._accel)"


def flag_table(llama: bool = True) -> bytes:
    """0x110000 bytes: 1 letter, 2 number, 4 mark, 8 whitespace.

    ``llama=True``: as llama.cpp classifies them (its older Unicode tables);
    ``llama=False``: as the ``regex`` module does (tokenizer.json patterns).
    Built once per machine and kept in the cache directory
    (:mod:`tokenizer.table_cache`), keyed by everything it is derived from.
    """
    if llama not in _tables:
        from tokenizer.table_cache import cached_table

        _tables[llama] = cached_table(f"flags-{'llama' if llama else 'regex'}", _flag_key(llama),
                                      lambda: build_flag_table(llama))
    return _tables[llama]


def _flag_key(llama: bool) -> str:
    """What the table depends on: the ``regex`` build (its Unicode tables), the builder's code, our ranges."""
    import regex

    code = build_flag_table.__code__
    source = zlib.crc32(code.co_code + repr((code.co_consts, uc.NEWER_THAN_LLAMA_CPP)).encode())
    return f"flag table v1 llama={llama} regex={regex.__version__} builder={source:08x}"


def build_flag_table(llama: bool) -> bytes:
    """The table computed from the ``regex`` module's classes (0.05 to 0.1 s)."""
    import regex

    every = array("I", range(0x110000)).tobytes().decode("utf-32-le", "surrogatepass")
    table = bytearray(0x110000)
    # the four classes are disjoint, so plain assignment per run is enough
    for bit, cls in ((FLAG_L, r"\p{L}"), (FLAG_N, r"\p{N}"), (FLAG_M, r"\p{M}"), (FLAG_WS, r"\s")):
        for m in regex.finditer(f"{cls}+", every):
            table[m.start() : m.end()] = bytes([bit]) * (m.end() - m.start())
    if llama:
        # what llama.cpp's older tables leave unassigned is "other" (never whitespace)
        for first, last in uc.NEWER_THAN_LLAMA_CPP:
            table[first : last + 1] = bytes(last + 1 - first)
    return bytes(table)
