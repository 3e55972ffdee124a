"""Pre-tokenizers: how text is cut into pieces before BPE, by llama.cpp's rules.

``tokenizer.ggml.pre`` names a pre-tokenizer.  llama.cpp maps each name to a
*sequence* of regexes; every regex splits each current piece into its matches
and the gaps between them, and the next regex works inside those pieces (so
a lookahead never sees past a piece end).  We reproduce that with the
``regex`` module:

* llama.cpp runs most of these regexes on a "collapsed" copy of the text
  where every non-ASCII code point is replaced by one byte standing for its
  category; that is equivalent to real ``\\p{..}`` classes with llama.cpp's
  Unicode tables, which :mod:`tokenizer.unicode_classes` provides.
* regexes without ``\\p{..}`` run on code points where non-ASCII whitespace
  was replaced by U+000B, so their literal ranges never match whitespace;
  we subtract ``\\s`` from such ranges.
* ``$`` means end of piece (``\\Z`` here).

The hot sequences are fused into one regex that gives the same pieces (see
``_FUSED``); the test suite checks fused against sequential.  Names llama.cpp
handles with bespoke code we have not reproduced raise :class:`TokenizerError`.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import regex

from tokenizer import unicode_classes as uc
from tokenizer.accel import SPLIT_MODES, accel_module, flag_table
from tokenizer.errors import TokenizerError

_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN35 = (
    _CONTRACTIONS
    + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_CJK = r"[[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]--\s]+"
_DEEPSEEK_LATIN = (
    r"\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
    r"\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"
    r"\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba"
    r"\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45"
    r"\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"
    r"\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc"
    r"\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    r"\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3"
    r"\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06"
    r"\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
    r"\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df"
    r"\U0001e900-\U0001e943]+"
)
_LOOKAHEAD_CASE = (
    r"[^\r\n\p{L}\p{N}]?(?:(?=\p{L})[^a-z])*(?:(?=\p{L})[^A-Z])+"
    r"|[^\r\n\p{L}\p{N}]?(?:(?=\p{L})[^a-z])+(?:(?=\p{L})[^A-Z])*"
)

#: llama.cpp pre-tokenizer type -> its regex sequence
PRE_TYPES: dict[str, tuple[str, ...]] = {
    "default": (r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"),
    "llama3": (LLAMA3,),
    "jais2": (
        _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
        r"|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)"
        r"|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}",
    ),
    "deepseek-llm": (r"[\r\n]", _DEEPSEEK_LATIN, r"\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3001\u3002]+",
                     r"\s+\Z", _CJK, r"\p{N}+"),
    "deepseek3-llm": (
        r"\p{N}{1,3}",
        r"[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
        r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
        r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    "deepseek-coder": (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}"),
    "falcon": (r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"),
    "starcoder": (r"\p{N}", GPT2),
    "gpt2": (GPT2,),
    "qwen2": (QWEN2,),
    "qwen35": (QWEN35,),
    "poro": (r" ?[^(\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+",),
    "viking": (r" ?[^(\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+", r"\p{N}"),
    "tekken": (_LOOKAHEAD_CASE + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",),
    "gpt4o": (
        r"[^\r\n\p{L}\p{N}]?(?:(?=\p{L})[^a-z])*(?:(?=\p{L})[^A-Z])+" + f"(?:{_CONTRACTIONS})?"
        + r"|[^\r\n\p{L}\p{N}]?(?:(?=\p{L})[^a-z])+(?:(?=\p{L})[^A-Z])*" + f"(?:{_CONTRACTIONS})?"
        + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    "bailingmoe": (
        r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
        r"|\s*[\r\n]|\s+(?!\S)|\s+",
    ),
    "seed-coder": (
        _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    "ufakzeka": (r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",),
    "laguna": (r"[^\n]+|[\n]+", QWEN2),
    "minicpm5": (
        r"\p{N}{1,3}",
        _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    "gemma4": (r"[^\n]+|[\n]+",),
}

#: ``tokenizer.ggml.pre`` value -> (pre-tokenizer type, llama.cpp's ignore_merges)
PRE_NAMES: dict[str, tuple[str, bool]] = {
    "default": ("default", False),
    **{n: ("llama3", True) for n in ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                                     "midm-2.0", "lfm2", "jina-v5-nano")},
    "jais-2": ("jais2", False),
    "dbrx": ("llama3", False),
    "smaug-bpe": ("llama3", False),
    "chatglm-bpe": ("llama3", False),
    "glm4": ("llama3", True),
    "glm5": ("llama3", True),
    "deepseek-llm": ("deepseek-llm", False),
    **{n: ("deepseek3-llm", False) for n in ("deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4")},
    "deepseek-coder": ("deepseek-coder", False),
    "falcon": ("falcon", False),
    **{n: ("starcoder", False) for n in ("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone",
                                         "minerva-7b", "mellum2")},
    **{n: ("gpt2", False) for n in ("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es",
                                    "jina-v2-de", "a.x-4.0", "mellum", "modern-bert", "jina-v1-en",
                                    "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais", "trillion",
                                    "granite-docling", "exaone4")},
    **{n: ("qwen2", False) for n in ("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "hunyuan",
                                     "solar-open", "megrez", "grok-2")},
    "qwen35": ("qwen35", False),
    **{n: ("poro", False) for n in ("poro-chat", "bloom", "gpt3-finnish")},
    "viking": ("viking", False),
    "tekken": ("tekken", True),
    **{n: ("gpt4o", False) for n in ("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2")},
    **{n: ("bailingmoe", False) for n in ("bailingmoe", "bailingmoe2", "llada-moe")},
    "seed-coder": ("seed-coder", False),
    "ufakzeka": ("ufakzeka", False),
    "laguna": ("laguna", False),
    "minicpm5": ("minicpm5", True),
    "gemma4": ("gemma4", False),
}

#: single regexes that give exactly the pieces of a multi-regex sequence (see module docstring)
_FUSED: dict[str, str] = {
    # digits are isolated first, so GPT-2's " ?\p{N}+" can never fire and a
    # whitespace run ends where a digit piece begins
    "starcoder": r"\p{N}|'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?[^\s\p{L}\p{N}]+|\s+(?![^\s\p{N}])|\s+",
}
#: types whose (fused) regex matches every character, so findall alone gives all pieces
_TOTAL = {"gpt2", "llama3", "qwen2", "qwen35", "starcoder", "jais2", "tekken", "gpt4o", "bailingmoe",
          "seed-coder", "ufakzeka"}


def compile_llama(pattern: str) -> regex.Pattern[str]:
    """Compile a llama.cpp-style regex with llama.cpp's Unicode categories."""
    for name in "LNMPS":
        pattern = pattern.replace(f"\\p{{{name}}}", getattr(uc, name))
    return regex.compile(pattern, regex.V1)


@functools.lru_cache(maxsize=1)
def _newer_chars() -> frozenset[str]:
    """The code points llama.cpp's tables leave unassigned but ``regex`` assigns (about 23,000)."""
    return frozenset(chr(c) for first, last in uc.NEWER_THAN_LLAMA_CPP for c in range(first, last + 1))


def _dual(exact: Callable[[str], list[str]], plain: Callable[[str], list[str]]) -> Callable[[str], list[str]]:
    """``plain`` (``regex``'s own classes, about 4x faster) unless the text holds a code point they disagree on.

    llama.cpp's classes are ``\\p{..}`` minus :data:`uc.NEWER_THAN_LLAMA_CPP`, so
    on text without those code points both regexes give the same pieces;
    ``set(text)`` makes the check about 1 % of a split.
    """
    def split(text: str) -> list[str]:
        if text.isascii() or _newer_chars().isdisjoint(set(text)):
            return plain(text)
        return exact(text)

    return split


@dataclass(frozen=True)
class PreTokenizer:
    """Splits text into the pieces BPE works on, exactly as llama.cpp does for ``pre_type``."""

    pre_type: str
    split: Callable[[str], list[str]]
    #: the C splitter's mode when ``split`` is the C accelerator's (``tokenizer._accel.split``), else None
    c_mode: int | None = None


def _sequential(patterns: list[regex.Pattern[str]]) -> Callable[[str], list[str]]:
    def split(text: str) -> list[str]:
        pieces = [text]
        for rx in patterns:
            out: list[str] = []
            for piece in pieces:
                pos = 0
                for m in rx.finditer(piece):
                    start, end = m.span()
                    if start > pos:
                        out.append(piece[pos:start])
                    if end > start:
                        out.append(piece[start:end])
                    pos = end
                if pos < len(piece):
                    out.append(piece[pos:])
            pieces = out
        return pieces

    return split


def sequential_splitter(pre_type: str) -> Callable[[str], list[str]]:
    """The literal llama.cpp procedure (regex after regex), unfused: the reference for tests."""
    return _sequential([compile_llama(p) for p in PRE_TYPES[pre_type]])


def make_pretokenizer(pre_type: str, accelerated: bool = True) -> PreTokenizer:
    """The fastest splitter that is equivalent to llama.cpp's sequence for ``pre_type``.

    With the C accelerator built, the hot types use its hand-compiled
    splitter; ``accelerated=False`` forces the ``regex`` version.
    """
    if pre_type not in PRE_TYPES:
        raise TokenizerError(f"pre-tokenizer type {pre_type!r} is not supported")
    accel = accel_module() if accelerated else None
    if accel is not None and pre_type in SPLIT_MODES:
        mode, split = SPLIT_MODES[pre_type], accel.split
        # the flag table is built on the first split (once per process), not at load
        return PreTokenizer(pre_type, lambda text: split(text, mode, flag_table()), c_mode=mode)
    fused = _FUSED.get(pre_type)
    if fused is None and len(PRE_TYPES[pre_type]) == 1:
        fused = PRE_TYPES[pre_type][0]
    if fused is not None and pre_type in _TOTAL:
        return PreTokenizer(pre_type, _dual(compile_llama(fused).findall, regex.compile(fused, regex.V1).findall))
    plain = _sequential([regex.compile(p, regex.V1) for p in PRE_TYPES[pre_type]])
    return PreTokenizer(pre_type, _dual(sequential_splitter(pre_type), plain))


def resolve_pre(name: str | None) -> tuple[str, bool]:
    """Map a ``tokenizer.ggml.pre`` value to (type, ignore_merges); a missing name means "default"."""
    if not name:
        return "default", False
    try:
        return PRE_NAMES[name]
    except KeyError:
        raise TokenizerError(
            f"unknown pre-tokenizer {name!r} in tokenizer.ggml.pre; tokchat knows: "
            + ", ".join(sorted(PRE_NAMES))
        ) from None
