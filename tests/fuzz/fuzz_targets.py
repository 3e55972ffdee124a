"""The fuzz targets: every entry point that takes outside bytes, each run twice (C and pure Python).

A target is ``one_input(data: bytes) -> None``.  It returns quietly when the
input was handled as promised and raises otherwise:

* an exception other than the documented ones (``GGUFError`` /
  ``TokenizerError``) escapes: a crash;
* the C accelerator and its pure-Python twin disagree (ids, the error and
  its message with the byte offset, pieces, decoded text): ``Divergence``;
* a property of the API fails (streamed text differs from ``decode``):
  ``Divergence`` too.

Targets (``TARGETS``):

``gguf``
    the input is a GGUF file: ``parse_gguf`` with the C string walker and
    with the Python one, then ``load_gguf_tokenizer`` and a probe encode /
    decode on both paths.
``gguf_arrays``
    the raw C routines of ``_accel_gguf.c`` on hostile arrays:
    ``gguf_strings`` against the Python walker, ``merger_from_gguf`` against
    ``Merger`` built from strings and the pure-Python rank merge; with flag
    0x04 the token (0x08: the merge) count lies, by one or (0x10) by
    thousands, and ``merger_from_gguf`` must refuse it with ``ValueError``
    before reading past the array.
``tokenizer_json``
    the input is a ``tokenizer.json``; loaded and probed on both paths.
``encode``
    a real tokenizer (first byte picks it) encodes the rest of the input as
    text, C and pure Python, with and without special tokens; every C
    pre-tokenizer mode is also compared with its regex.
``stream``
    ids (from the input) through ``StreamDecoder`` in input-chosen chunks:
    the joined text equals ``decode``; bad ids raise ``TokenizerError``.

Nothing here imports atheris: the pytest replay of the corpus and of the
crash reproducers (``test_fuzz_replay.py``) runs the same functions.
"""
from __future__ import annotations

import contextlib
import functools
import os
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from tokenizer.errors import GGUFError, TokenizerError  # noqa: E402

HERE = Path(__file__).resolve().parent
PROBES = ["Hello, world! it's 123 4567 <|im_end|> <s> [INST] wörld 🙂\n\t  x", "  \n\n\u00a0ß中文 \U0001f600e\u0301"]


def tests_assets() -> Any:
    """``tests/support/assets.py``, loaded by path: putting ``tests/`` on sys.path would let the
    ``tests/tokenizer`` folder shadow the ``tokenizer`` package for scripts run from elsewhere."""
    if "assets" not in sys.modules:
        import importlib.util

        spec = importlib.util.spec_from_file_location("assets", HERE.parent / "support" / "assets.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["assets"] = module
        spec.loader.exec_module(module)
    return sys.modules["assets"]


class Divergence(AssertionError):
    """The C path and the pure-Python path (or an API property) disagree."""


@contextlib.contextmanager
def pure_python() -> Iterator[None]:
    """Run the block with ``TOKCHAT_NO_ACCEL=1`` (the accelerator is looked up at each use)."""
    old = os.environ.get("TOKCHAT_NO_ACCEL")
    os.environ["TOKCHAT_NO_ACCEL"] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ["TOKCHAT_NO_ACCEL"]
        else:
            os.environ["TOKCHAT_NO_ACCEL"] = old


def _outcome(fn: Callable[[], Any], expected: tuple[type[BaseException], ...] = (TokenizerError,)) -> tuple:
    """("ok", value) or ("error", type name, message) for the documented errors; anything else escapes."""
    try:
        return ("ok", fn())
    except expected as exc:
        return ("error", type(exc).__name__, str(exc))


def _same(what: str, fast: tuple, slow: tuple) -> None:
    if fast != slow:
        raise Divergence(f"{what}: C {str(fast)[:300]} != Python {str(slow)[:300]}")


def _probe_texts(tok: Any) -> list[str]:
    """Fixed probes plus text made of the vocabulary's own entries (so merges and specials fire)."""
    n = tok.vocab_size
    picks = [tok.id_to_token(i) for i in range(0, n, max(1, n // 40))][:40]
    specials = list(tok.special_tokens)[:8]
    return PROBES + ["".join(picks), " ".join(picks + specials)]


def _compare_tokenizers(fast: Any, slow: Any) -> None:
    """Encode and decode the probes on both; ids, errors and text must agree."""
    _same("vocab size", ("ok", fast.vocab_size), ("ok", slow.vocab_size))
    for text in _probe_texts(fast):
        for special in (False, True):
            a = _outcome(lambda: fast.encode(text, special=special))
            with pure_python():
                b = _outcome(lambda: slow.encode(text, special=special))
            _same(f"encode({text[:40]!r}, special={special})", a, b)
            if a[0] == "ok":
                _same("decode", _outcome(lambda: fast.decode(a[1])), _outcome(lambda: slow.decode(a[1])))


# ---- gguf -------------------------------------------------------------------------------

def _canonical(g: Any) -> tuple:
    """A GGUFFile as comparable data (repr keeps NaN equal to NaN)."""
    return (g.version, g.tensor_count, repr(g.kv), g.types, g.kv_end, g.raw)


def one_gguf(data: bytes) -> None:
    from tokenizer.gguf import parse_gguf
    from tokenizer.loader import load_gguf_tokenizer

    fast = _outcome(lambda: parse_gguf(data, len(data), "fuzz.gguf"))
    with pure_python():
        slow = _outcome(lambda: parse_gguf(data, len(data), "fuzz.gguf"))
    _same("parse_gguf", fast[:1] + tuple(_canonical(fast[1])) if fast[0] == "ok" else fast,
          slow[:1] + tuple(_canonical(slow[1])) if slow[0] == "ok" else slow)
    if fast[0] != "ok":
        if fast[1] != "GGUFError":
            raise Divergence(f"parse_gguf raised {fast[1]}, not GGUFError")
        return
    tok_fast = _outcome(lambda: load_gguf_tokenizer("fuzz.gguf", fast[1]))
    with pure_python():
        tok_slow = _outcome(lambda: load_gguf_tokenizer("fuzz.gguf", slow[1]))
    _same("load_gguf_tokenizer", tok_fast[:1] if tok_fast[0] == "ok" else tok_fast,
          tok_slow[:1] if tok_slow[0] == "ok" else tok_slow)
    if tok_fast[0] == "ok":
        _compare_tokenizers(tok_fast[1], tok_slow[1])


# ---- gguf_arrays ------------------------------------------------------------------------

def _py_strings(buf: bytes, off: int, count: int, decode: int) -> tuple | None:
    """The Python twin of ``_accel.gguf_strings``: (end, strings or None), or None when malformed
    (``decode`` 2: the strings checked as a decode checks them, not returned)."""
    from tokenizer.gguf import _Reader

    r = _Reader(buf, len(buf))
    r.c_strings = None
    r.off = off
    try:
        if decode:
            strings = r.string_array(count, "fuzz")
            return (r.off, strings if decode == 1 else None)
        r._walk_strings(count, "fuzz")
        return (r.off, None)
    except GGUFError:
        return None


def _u64_strings(items: list[bytes]) -> bytes:
    return b"".join(struct.pack("<Q", len(s)) + s for s in items)


def one_gguf_arrays(data: bytes) -> None:
    from tokenizer.accel import accel_module

    accel = accel_module()
    if len(data) < 6 or accel is None:
        return
    off = int.from_bytes(data[0:2], "little") % (len(data) + 2)
    count = int.from_bytes(data[2:4], "little")
    count = count if data[4] & 0x80 else count & 0xFF
    decode, body = (data[4] & 3) % 3, data[5:]  # 0 walk, 1 decode, 2 check
    # 1. the string walker, over the raw bytes, at any offset and count
    c = accel.gguf_strings(body, off, count, decode)
    py = _py_strings(body, off, count, decode)
    _same(f"gguf_strings(off={off}, count={count}, decode={decode})", ("ok", c), ("ok", py))
    # 2. the merge table from raw arrays: split the body into a token array and a merge array
    cut = off % (len(body) + 1)
    tokens_raw, merges_raw = body[:cut], body[cut:]
    toks = _py_strings(tokens_raw, 0, _count(tokens_raw), True)
    merges = _py_strings(merges_raw, 0, _count(merges_raw), True)
    if toks is None or merges is None:
        return
    if data[4] & 0x04:
        _lying_counts(accel, data, tokens_raw, merges_raw, len(toks[1]), len(merges[1]))
        return
    _compare_mergers(accel, toks[1], merges[1], tokens_raw[: toks[0]], merges_raw[: merges[0]], bool(data[4] & 2))


def _lying_counts(accel: Any, data: bytes, tokens_raw: bytes, merges_raw: bytes, n_tokens: int,
                  n_merges: int) -> None:
    """A count beyond the whole strings an array holds (the bytes after them, a cut-off string, are
    passed too): the C walker must stop at the end of the buffer and raise ``ValueError``."""
    from tokenizer.bytelevel import BYTE_TO_CHAR

    lie = 1 + (int.from_bytes(data[0:2], "little") << 4 if data[4] & 0x10 else 0)
    if data[4] & 0x08:
        n_merges += lie
    else:
        n_tokens += lie
    got = _outcome(lambda: accel.merger_from_gguf(tokens_raw, n_tokens, merges_raw, n_merges, BYTE_TO_CHAR,
                                                  bool(data[4] & 2)), (ValueError,))
    if got[0] != "error":
        raise Divergence(f"merger_from_gguf accepted {n_tokens} tokens in {len(tokens_raw)} bytes and "
                         f"{n_merges} merges in {len(merges_raw)} bytes: counts beyond the arrays")


def _count(raw: bytes) -> int:
    """How many whole GGUF strings ``raw`` starts with."""
    off = n = 0
    while off + 8 <= len(raw):
        (k,) = struct.unpack_from("<Q", raw, off)
        if k > len(raw) - off - 8:
            break
        off += 8 + k
        n += 1
    return n


def _compare_mergers(accel: Any, tokens: list[str], merges: list[str], tokens_raw: bytes, merges_raw: bytes,
                     first_wins: bool) -> None:
    from tokenizer.bpe import _merge_short
    from tokenizer.bytelevel import BYTE_TO_CHAR, to_byte_chars
    from tokenizer.gguf_vocab import parse_merges

    ids = dict(zip(tokens, range(len(tokens))))
    from_raw = _outcome(lambda: accel.merger_from_gguf(tokens_raw, len(tokens), merges_raw, len(merges),
                                                       BYTE_TO_CHAR, first_wins), (ValueError,))
    from_str = _outcome(lambda: accel.Merger(merges, ids, BYTE_TO_CHAR, first_wins), (ValueError,))
    if from_raw[0] == "ok" and from_str[0] != "ok":
        raise Divergence(f"merger_from_gguf built a table that Merger refuses: {from_str}")
    if from_raw[0] != "ok" and not ("" in tokens or from_str[0] != "ok"):
        raise Divergence(f"merger_from_gguf refused ({from_raw[2]}) what Merger accepts")
    if from_str[0] != "ok":
        return
    ranks = parse_merges(merges) if first_wins else {m: r for r, m in enumerate(merges)}
    pieces = _pieces_from(tokens)
    for piece in pieces:
        a = from_str[1].encode(piece)
        if from_raw[0] == "ok":
            _same(f"merger_from_gguf vs Merger on {piece[:30]!r}", ("ok", from_raw[1].encode(piece)), ("ok", a))
        if a is None:
            continue
        parts = _merge_short(to_byte_chars(piece), ranks)
        if all(p in ids for p in parts):
            _same(f"Merger vs pure-Python merge on {piece[:30]!r}", ("ok", a), ("ok", [ids[p] for p in parts]))


def _pieces_from(tokens: list[str]) -> list[str]:
    """Pieces worth merging: the tokens' texts read back as bytes, and pairs of them."""
    from tokenizer.bytelevel import from_byte_chars

    raw = [from_byte_chars(t) for t in tokens[:64]]
    texts = [r.decode("utf-8", "replace") for r in raw if r]
    return texts[:16] + [a + b for a, b in zip(texts, texts[1:])][:16]


# ---- tokenizer_json ---------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _json_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="tokchat-fuzz-json-"))


def one_tokenizer_json(data: bytes) -> None:
    from tokenizer.hf_json import load_tokenizer_json

    path = _json_dir() / "tokenizer.json"
    path.write_bytes(data)
    fast = _outcome(lambda: load_tokenizer_json(path))
    with pure_python():
        slow = _outcome(lambda: load_tokenizer_json(path))
    _same("load_tokenizer_json", fast[:1] if fast[0] == "ok" else fast, slow[:1] if slow[0] == "ok" else slow)
    if fast[0] == "ok":
        _compare_tokenizers(fast[1], slow[1])


# ---- encode and stream: real tokenizers -------------------------------------------------

#: name -> asset (relative to the test-asset cache); one of each model kind and C splitter mode
REAL = {
    "qwen2": "llama.cpp-models/ggml-vocab-qwen2.gguf",
    "llama-bpe": "llama.cpp-models/ggml-vocab-llama-bpe.gguf",
    "gpt-2": "llama.cpp-models/ggml-vocab-gpt-2.gguf",
    "starcoder": "llama.cpp-models/ggml-vocab-starcoder.gguf",
    "qwen35": "llama.cpp-models/ggml-vocab-qwen35.gguf",
    "deepseek-llm": "llama.cpp-models/ggml-vocab-deepseek-llm.gguf",
    "falcon": "llama.cpp-models/ggml-vocab-falcon.gguf",
    "llama-spm": "llama.cpp-models/ggml-vocab-llama-spm.gguf",
    "phi-3": "llama.cpp-models/ggml-vocab-phi-3.gguf",
    "gemma-4": "llama.cpp-models/ggml-vocab-gemma-4.gguf",
    "bert-bge": "llama.cpp-models/ggml-vocab-bert-bge.gguf",
    "nomic-bert-moe": "llama.cpp-models/ggml-vocab-nomic-bert-moe.gguf",
    "minilm-json": "minilm-l6-tokenizer.json",
    "mon-json": "mon-unigram-tokenizer.json",
    "qwen-json": "qwen2.5-tokenizer",
    "llama32-json": "llama3.2-tokenizer",
}


@functools.lru_cache(maxsize=1)
def real_tokenizers() -> list[tuple[str, Any, Any]]:
    """(name, C tokenizer, pure-Python tokenizer) for every ``REAL`` asset (about 10 s, once)."""
    from tokenizer import load_tokenizer

    asset_path = tests_assets().asset_path

    out = []
    for name, rel in REAL.items():
        first, _, rest = rel.partition("/")
        path = asset_path(first) / rest if rest else asset_path(first)
        fast = load_tokenizer(path)
        with pure_python():
            slow = load_tokenizer(path)
            slow.encode("warm up the lazy parts while the accelerator is off")
        out.append((name, fast, slow))
    return out


def _text(data: bytes, escape: bool) -> str:
    """Input bytes as text; ``escape`` keeps invalid bytes as lone surrogates (as a JSON "\\udc80" would)."""
    return data.decode("utf-8", "surrogateescape" if escape else "replace")


def one_encode(data: bytes) -> None:
    if len(data) < 2:
        return
    toks = real_tokenizers()
    name, fast, slow = toks[data[0] % len(toks)]
    flags, text = data[1], _text(data[2:], bool(data[1] & 4))
    special = bool(flags & 1)
    a = _outcome(lambda: fast.encode(text, special=special))
    with pure_python():
        b = _outcome(lambda: slow.encode(text, special=special))
    _same(f"{name}.encode(special={special})", a, b)
    if flags & 2:
        _compare_splitters(text)


@functools.lru_cache(maxsize=1)
def _splitters() -> list[tuple[str, Callable[[str], list[str]], Callable[[str], list[str]]]]:
    import regex

    from tokenizer.accel import HF_SPLIT_MODES, SPLIT_MODES, accel_module, flag_table
    from tokenizer.hf_json import _regex_splitter
    from tokenizer.pretokenize import make_pretokenizer

    out = [(t, make_pretokenizer(t).split, make_pretokenizer(t, accelerated=False).split) for t in sorted(SPLIT_MODES)]
    accel = accel_module()
    if accel is not None:
        for pattern, mode in HF_SPLIT_MODES.items():
            slow = _regex_splitter(regex.compile(pattern), "Isolated")
            out.append((f"hf mode {mode:#x}", lambda s, m=mode: accel.split(s, m, flag_table(llama=False)),
                        lambda s, f=slow: f([s]) if s else []))
    return out


def _compare_splitters(text: str) -> None:
    for name, fast, slow in _splitters():
        _same(f"split {name}", _outcome(lambda: fast(text)), _outcome(lambda: slow(text)))


def one_stream(data: bytes) -> None:
    if len(data) < 3:
        return
    toks = real_tokenizers()
    name, fast, slow = toks[data[0] % len(toks)]
    skip = bool(data[1] & 1)
    n = fast.vocab_size
    body = data[2:]
    # each 3-byte group is an id; a group starting 0xFF is out of range (or negative)
    ids = []
    for i in range(0, len(body) - 2, 3):
        v = int.from_bytes(body[i : i + 3], "little")
        ids.append(v % n if body[i] != 0xFF else (n + body[i + 1] if body[i + 2] & 1 else -1 - body[i + 1]))
    whole = _outcome(lambda: fast.decode(ids, skip_special=skip))
    _same(f"{name}.decode", whole, _outcome(lambda: slow.decode(ids, skip_special=skip)))
    if whole[0] == "error":
        return _stream_rejects(fast, ids, skip, whole)
    # chunk sizes come from the ids' own low bits: 1..4 ids per feed_many call
    dec, pieces, i = fast.stream_decoder(skip_special=skip), [], 0
    while i < len(ids):
        k = 1 + (ids[i] & 3)
        pieces.append(dec.feed_many(ids[i : i + k]))
        i += k
    pieces.append(dec.finalize())
    if "".join(pieces) != whole[1]:
        raise Divergence(f"{name}: streamed {''.join(pieces)[:200]!r} != decode {whole[1][:200]!r}")
    if any("\ufffd" in p for p in pieces[:-1]) and "\ufffd" not in whole[1]:
        raise Divergence(f"{name}: a piece showed U+FFFD for a character still arriving")


def _stream_rejects(tok: Any, ids: list[int], skip: bool, whole: tuple) -> None:
    """A bad id: the stream raises the same TokenizerError when it reaches it."""
    dec = tok.stream_decoder(skip_special=skip)
    got = _outcome(lambda: [dec.feed(t) for t in ids])
    if got[0] != "error" or got[1] != "TokenizerError":
        raise Divergence(f"decode raised {whole[2]!r} but the stream gave {str(got)[:200]}")


TARGETS: dict[str, Callable[[bytes], None]] = {
    "gguf": one_gguf,
    "gguf_arrays": one_gguf_arrays,
    "tokenizer_json": one_tokenizer_json,
    "encode": one_encode,
    "stream": one_stream,
}
