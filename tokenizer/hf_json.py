"""Load a Hugging Face ``tokenizer.json`` (+ ``tokenizer_config.json``) as a :class:`Tokenizer`.

Supported: a ``BPE`` model (merges as ``"a b"`` strings or ``["a", "b"]``
pairs, ``ignore_merges``, ``byte_fallback``), ``added_tokens``, the NFC /
NFD / NFKC / NFKD / Lowercase normalizers (alone or in a ``Sequence``), and
``Split`` / ``ByteLevel`` pre-tokenizers (alone or in a ``Sequence``).  This
covers byte-level BPE checkpoints such as Qwen2.5 and Llama 3; anything else
is refused with a message naming the unsupported piece rather than giving
silently different ids.

Rules that differ from llama.cpp and follow HF here: added tokens are
matched leftmost-longest, duplicate merges keep the last rank, and the
model's ``ignore_merges`` flag is used as written in the file.
"""
from __future__ import annotations

import json
import os
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

import regex

from tokenizer.accel import HF_SPLIT_MODES, accel_module, flag_table
from tokenizer.bpe import BPEModel
from tokenizer.bytelevel import from_byte_chars, to_byte_chars
from tokenizer.core import ATTR_CONTROL, ATTR_NORMAL, ATTR_USER_DEFINED, PieceCache, Tokenizer, TokenizerParts
from tokenizer.errors import TokenizerError
from tokenizer.gguf_vocab import eog_by_text
from tokenizer.hf_config import chat_template_of, post_processor_adds_bos, token_text
from tokenizer.json_float import serde_float
from tokenizer.merger import fragment_encoder, make_merger
from tokenizer.specials import HFSpecialSplitter, SpecialToken

GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
Step = Callable[[list[str]], list[str]]


def _read_json(path: Path, parse_float: Callable[[str], Any] = float) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh, parse_float=parse_float, parse_constant=_not_json)
    # ValueError: also a number json_float cannot hold (1e999999); RecursionError: "[[[[..." nested too deep
    except (OSError, ValueError, RecursionError) as exc:
        raise TokenizerError(f"cannot read {path}: {exc}") from None


def _not_json(name: str) -> Any:
    """NaN and Infinity are not JSON (Hugging Face's parser refuses them; Python's would accept them)."""
    raise ValueError(f"{name} is not a JSON number")


def _section(spec: Any, what: str) -> dict:
    """``spec`` when it is a JSON object, else the TokenizerError a hand-edited file deserves."""
    if not isinstance(spec, dict):
        raise TokenizerError(f"tokenizer.json {what} must be an object, not {type(spec).__name__}")
    return spec


def _normalizer(spec: Any) -> Callable[[str], str] | None:
    if spec is None:
        return None
    kind = _section(spec, "normalizer").get("type")
    if kind in ("NFC", "NFD", "NFKC", "NFKD"):
        form: Literal["NFC", "NFD", "NFKC", "NFKD"] = kind
        return lambda s: unicodedata.normalize(form, s)
    if kind == "Lowercase":
        return str.lower
    if kind in ("BertNormalizer", "Replace", "Precompiled"):
        from tokenizer.hf_merge_free import bert_normalizer, precompiled_normalizer, replace_normalizer

        return {"BertNormalizer": bert_normalizer, "Replace": replace_normalizer,
                "Precompiled": precompiled_normalizer}[kind](spec)
    if kind == "Sequence":
        funcs = [f for f in (_normalizer(n) for n in spec.get("normalizers", [])) if f is not None]

        def run(s: str) -> str:
            for f in funcs:
                s = f(s)
            return s

        return run
    raise TokenizerError(f"tokenizer.json normalizer {kind!r} is not supported")


def _regex_splitter(pattern: regex.Pattern[str], behavior: str) -> Step:
    if behavior not in ("Isolated", "Removed"):
        raise TokenizerError(f"tokenizer.json Split behavior {behavior!r} is not supported")
    keep = behavior == "Isolated"
    if pattern.groups == 0:
        splitter = regex.compile(f"({pattern.pattern})", pattern.flags)

        def step(pieces: list[str]) -> list[str]:
            out: list[str] = []
            for piece in pieces:
                parts = splitter.split(piece)
                # parts alternate gap, match, gap, ...; drop empties (and matches when removing)
                out.extend(p for i, p in enumerate(parts) if p and (keep or not i & 1))
            return out

        return step

    def step_slow(pieces: list[str]) -> list[str]:
        out: list[str] = []
        for piece in pieces:
            pos = 0
            for m in pattern.finditer(piece):
                if m.start() > pos:
                    out.append(piece[pos : m.start()])
                if keep and m.end() > m.start():
                    out.append(m.group())
                pos = m.end()
            if pos < len(piece):
                out.append(piece[pos:])
        return out

    return step_slow


@dataclass(frozen=True)
class _CSplit:
    """The C accelerator's hand-compiled version of a known Split regex (same pieces); a :data:`Step`.

    ``mode`` is kept so that a pipeline of this step alone can be split and merged in C at once.
    """

    split: Callable[[str, int, bytes], list[str]]
    mode: int

    def __call__(self, pieces: list[str]) -> list[str]:
        table, split, mode = flag_table(llama=False), self.split, self.mode
        if len(pieces) == 1:
            return split(pieces[0], mode, table)
        return [p for piece in pieces for p in split(piece, mode, table)]


def _pre_steps(spec: Any) -> tuple[list[Step], bool]:
    """Pre-tokenizer steps, and whether a ByteLevel step (byte map) is present."""
    if spec is None:
        return [], False
    kind = _section(spec, "pre_tokenizer").get("type")
    if kind == "Sequence":
        steps: list[Step] = []
        byte_level = False
        for sub in spec.get("pretokenizers", []):
            s, b = _pre_steps(sub)
            steps += s
            byte_level |= b
        return steps, byte_level
    if kind == "Split":
        if spec.get("invert"):
            raise TokenizerError("tokenizer.json Split with invert=true is not supported")
        pat = _section(spec.get("pattern", {}), "Split pattern")
        accel = accel_module()
        if (accel is not None and spec.get("behavior", "Isolated") == "Isolated" and isinstance(pat.get("Regex"), str)
                and pat["Regex"] in HF_SPLIT_MODES):
            return [_CSplit(accel.split, HF_SPLIT_MODES[pat["Regex"]])], False
        if "Regex" in pat:
            try:
                compiled = regex.compile(pat["Regex"])
            except (regex.error, TypeError) as exc:
                raise TokenizerError(f"tokenizer.json Split regex does not compile: {exc}") from None
        elif isinstance(pat.get("String"), str):
            compiled = regex.compile(regex.escape(pat["String"]))
        else:
            raise TokenizerError("tokenizer.json Split without a pattern")
        return [_regex_splitter(compiled, spec.get("behavior", "Isolated"))], False
    if kind == "ByteLevel":
        steps = []
        if spec.get("add_prefix_space"):
            steps.append(lambda pieces: [p if p.startswith(" ") else " " + p for p in pieces])
        if spec.get("use_regex", True):
            steps.append(_regex_splitter(regex.compile(GPT2_REGEX), "Isolated"))
        return steps, True
    raise TokenizerError(f"tokenizer.json pre-tokenizer {kind!r} is not supported")


def load_tokenizer_json(path: str | os.PathLike[str]) -> Tokenizer:
    """A tokenizer matching HF ``tokenizers`` for ``tokenizer.json`` at ``path``.

    A file whose sections have the wrong JSON types (a list where an object
    belongs, a number for a string) is one TokenizerError, whichever field it is.
    """
    try:
        return _load_tokenizer_json(Path(path))
    except (AttributeError, TypeError, KeyError, IndexError) as exc:  # found by tests/fuzz (tokenizer_json)
        raise TokenizerError(f"{path}: a field of this tokenizer.json has the wrong JSON type "
                             f"({type(exc).__name__}: {exc})") from None


def _load_tokenizer_json(path: Path) -> Tokenizer:
    # numbers read as HF's JSON parser reads them (Unigram scores break ties on the last bit; see json_float)
    data = _read_json(path, parse_float=serde_float)
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise TokenizerError(f"{path} is not a tokenizer.json (no model section)")
    model = data["model"]
    if model.get("type") in ("WordPiece", "Unigram"):
        from tokenizer.hf_merge_free import load_merge_free

        config_path = path.parent / "tokenizer_config.json"
        return load_merge_free(path, data, _normalizer(data.get("normalizer")),
                               _read_json(config_path) if config_path.is_file() else {})
    if model.get("type", "BPE") != "BPE":
        raise TokenizerError(f"{path}: model type {model.get('type')!r} is not supported "
                             "(BPE, WordPiece and Unigram are)")
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise TokenizerError(f"{path}: BPE {key} is not supported")
    vocab, merges, added = _checked_model(path, model, data.get("added_tokens") or [])
    size = max([*vocab.values(), *(a["id"] for a in added), -1]) + 1
    tokens = [""] * size
    for text, tid in vocab.items():
        tokens[tid] = text
    attrs = [ATTR_NORMAL] * size
    specials = []
    for a in added:
        tid, text = a["id"], a["content"]
        tokens[tid] = text
        attrs[tid] = ATTR_CONTROL if a.get("special") else ATTR_USER_DEFINED
        specials.append(SpecialToken(text, tid, control=bool(a.get("special")), lstrip=bool(a.get("lstrip")),
                                     rstrip=bool(a.get("rstrip")), single_word=bool(a.get("single_word"))))
    for i, t in enumerate(tokens):
        if not t:
            tokens[i] = f"[EMPTY_{i}]"
    ids = {**vocab, **{a["content"]: a["id"] for a in added}}

    normalize = _normalizer(data.get("normalizer"))
    steps, byte_level = _pre_steps(data.get("pre_tokenizer"))
    unk = model.get("unk_token")
    unk_id = vocab.get(unk) if unk else None

    def unknown(part: str) -> list[int]:
        if model.get("byte_fallback"):
            # a lone surrogate (pasted text, a JSON "\udc80") falls back to its UTF-8-like bytes, as in loader.py
            found = [vocab.get(f"<0x{b:02X}>") for b in part.encode("utf-8", "surrogatepass")]
            if all(t is not None for t in found):
                return found  # type: ignore[return-value]
        # HF looks up each character; unknown ones become unk or vanish
        out = [vocab.get(c, unk_id) for c in part]
        return [t for t in out if t is not None]

    bpe = BPEModel(vocab, {m: r for r, m in enumerate(merges)}, to_byte_chars if byte_level else (lambda s: s),
                   unknown, ignore_merges=bool(model.get("ignore_merges")),
                   merger=(lambda: make_merger(merges, vocab, first_wins=False)) if byte_level else None)

    caches: list[PieceCache] = [bpe.cache]
    # one C split step and byte-level BPE: split and merged in C at once
    whole = (fragment_encoder(bpe.built_merger, steps[0].mode, caches, llama=False,
                              whole=vocab if bpe.ignore_merges else None)
             if len(steps) == 1 and isinstance(steps[0], _CSplit) and byte_level else None)

    def encode_fragment(text: str) -> list[int]:
        if normalize is not None:
            text = normalize(text)
        if whole is not None:
            ids = whole(text)
            if ids is not None:
                return ids
        pieces = [text] if text else []
        for step in steps:
            pieces = step(pieces)
        return bpe.encode_pieces(pieces)

    def render(text: str) -> bytes:
        data = from_byte_chars(text) if byte_level else None
        return data if data is not None else text.encode("utf-8")

    config = _read_json(path.parent / "tokenizer_config.json") if (path.parent / "tokenizer_config.json").is_file() else {}
    bos_text, eos_text = token_text(config.get("bos_token")), token_text(config.get("eos_token"))
    bos_id = ids.get(bos_text) if bos_text else None
    eos_id = ids.get(eos_text) if eos_text else None
    add_bos = config.get("add_bos_token")
    if not isinstance(add_bos, bool):
        add_bos = post_processor_adds_bos(data.get("post_processor"), bos_text)
    eog = eog_by_text({a["content"]: a["id"] for a in added})
    if eos_id is not None:
        eog.add(eos_id)
    return Tokenizer(
        TokenizerParts(
            kind="bpe", pre=None, tokens=tokens, attrs=attrs, render=render, encode_fragment=encode_fragment,
            splitter=HFSpecialSplitter(specials), bos_id=bos_id, eos_id=eos_id, add_bos=add_bos,
            eog_ids=frozenset(eog), chat_template=chat_template_of(config.get("chat_template")),
            metadata={}, token_to_id=ids, source=str(path), caches=caches,
        )
    )


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _checked_model(path: Path, model: dict, added: Any) -> tuple[dict[str, int], list[str], list[dict]]:
    """Vocabulary, merges and added tokens, or a TokenizerError saying what is malformed."""
    vocab = model.get("vocab") or {}
    if not isinstance(vocab, dict) or not all(isinstance(k, str) and _is_id(v) for k, v in vocab.items()):
        raise TokenizerError(f"{path}: model.vocab must map strings to non-negative integer ids")
    merges = []
    for m in model.get("merges") or []:
        if isinstance(m, list) and len(m) == 2 and all(isinstance(x, str) for x in m):
            m = " ".join(m)
        if not isinstance(m, str):
            raise TokenizerError(f"{path}: model.merges entries must be \"a b\" strings or [a, b] pairs")
        merges.append(m)
    if not isinstance(added, list) or not all(
        isinstance(a, dict) and _is_id(a.get("id")) and isinstance(a.get("content"), str) and a["content"]
        for a in added
    ):
        raise TokenizerError(f"{path}: added_tokens entries need an integer id and non-empty content")
    biggest = max([*vocab.values(), *(a["id"] for a in added), -1])
    if biggest >= 4 * (len(vocab) + len(added)) + 1024:
        raise TokenizerError(f"{path}: token id {biggest} is far beyond the {len(vocab) + len(added)} tokens listed")
    return dict(vocab), merges, added
