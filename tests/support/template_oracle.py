"""The reference side of the template tests: render and tokenize as the real libraries do.

Rendering uses llama-cpp-python's ``Jinja2ChatFormatter`` (the Hugging Face
Jinja environment: immutable sandbox, ``trim_blocks``, ``lstrip_blocks``,
``loopcontrols``, a non-ASCII ``tojson``).  Tokenizing uses llama.cpp itself
(a ``vocab_only`` model) or Hugging Face ``tokenizers``.

For prompts whose messages contain control-token text (injection attempts),
the reference is llama.cpp's own partitioning with the message spans held
back: llama.cpp splits text at control tokens (longest first) and encodes
each remaining fragment on its own; here the message spans are simply not
split, and each fragment is encoded by llama.cpp with ``special=False``.
"""
from __future__ import annotations

import contextlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import llama_cpp
from llama_cpp import Llama
from llama_cpp.llama_chat_format import Jinja2ChatFormatter


def oracle_render(source: str, messages: Sequence[dict], *, bos_token: str, eos_token: str,
                  add_generation_prompt: bool = True, enable_thinking: bool | None = None,
                  tools: Sequence[dict] | None = None) -> str:
    """The prompt text as llama-cpp-python renders a Hugging Face chat template."""
    formatter = Jinja2ChatFormatter(source, eos_token=eos_token, bos_token=bos_token,
                                    add_generation_prompt=add_generation_prompt)
    extra = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
    return formatter(messages=[dict(m) for m in messages], tools=tools, **extra).prompt


class LlamaVocab:
    """llama.cpp's tokenizer for one GGUF file (vocabulary only, no weights)."""

    def __init__(self, path: Path) -> None:
        with _quiet():
            self.llm = Llama(model_path=str(path), vocab_only=True, verbose=False)
        model = self.llm._model
        self.bos_id = model.token_bos()
        self.add_bos = bool(model.add_bos_token())
        carve = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
        #: text -> id of every token llama.cpp carves out of text with special=True
        self.specials: dict[str, int] = {}
        #: text -> (lstrip, rstrip): whitespace the token swallows on each side (Phi-3's markers)
        self.strips: dict[str, tuple[bool, bool]] = {}
        for i in range(model.n_vocab()):
            attr = model.token_get_attr(i)
            if attr & carve:
                text = model.token_get_text(i)
                text = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
                if text and text not in self.specials:
                    self.specials[text] = i
                    self.strips[text] = (bool(attr & llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP),
                                         bool(attr & llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP))

    def tokenize(self, text: str, special: bool = True) -> list[int]:
        return self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)

    def prompt_ids(self, text: str, literal_spans: Sequence[tuple[int, int]] = ()) -> list[int]:
        """Ids as llama.cpp partitions ``text``, message spans kept as plain text; one BOS if wanted."""
        if not literal_spans:
            ids = self.tokenize(text, special=True)
        else:
            ids = []
            for piece, token in _partition(text, self.specials, literal_spans, self.strips):
                ids.extend([token] if token is not None else self.tokenize(piece, special=False))
        if self.add_bos and (not ids or ids[0] != self.bos_id):
            ids.insert(0, self.bos_id)
        return ids


class HFVocab:
    """Hugging Face ``tokenizers`` for a tokenizer.json directory (used for texts with no injected markup)."""

    def __init__(self, directory: Path) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self.config = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))

    def tokenize(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def token_text(self, key: str) -> str:
        value = self.config.get(key)
        return value.get("content", "") if isinstance(value, dict) else (value or "")


_C_SPACE = " \t\n\v\f\r"  # what C's isspace() accepts, which llama.cpp uses for lstrip/rstrip


def _partition(text: str, specials: dict[str, int], spans: Sequence[tuple[int, int]],
               strips: dict[str, tuple[bool, bool]] | None = None):
    """llama.cpp's special-token partition (longest token first), never inside ``spans``.

    As in llama.cpp's ``tokenizer_st_partition``: a token with the lstrip
    (rstrip) attribute swallows the whitespace before (after) it.
    """
    strips = strips or {}
    # fragments: (start, end, token id or None for raw text)
    fragments: list[tuple[int, int, int | None]] = [(0, len(text), None)]
    protected = sorted(spans)
    for special in sorted(specials, key=len, reverse=True):
        token = specials[special]
        lstrip, rstrip = strips.get(special, (False, False))
        out: list[tuple[int, int, int | None]] = []
        for start, end, tid in fragments:
            if tid is not None:
                out.append((start, end, tid))
                continue
            pos = start
            while pos < end:
                hit = text.find(special, pos, end)
                while hit >= 0 and any(a < hit + len(special) and hit < b for a, b in protected):
                    hit = text.find(special, hit + 1, end)
                if hit < 0:
                    break
                left = hit
                while lstrip and left > pos and text[left - 1] in _C_SPACE:
                    left -= 1
                if left > pos:
                    out.append((pos, left, None))
                out.append((hit, hit + len(special), token))
                pos = hit + len(special)
                while rstrip and pos < end and text[pos] in _C_SPACE:
                    pos += 1
            if pos < end:
                out.append((pos, end, None))
        fragments = out
    return [(text[a:b], tid) for a, b, tid in fragments]


@contextlib.contextmanager
def _quiet():
    """llama.cpp prints to fd 2 while loading; keep test output readable."""
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


@lru_cache(maxsize=None)
def llama_vocab(path: str) -> LlamaVocab:
    return LlamaVocab(Path(path))

