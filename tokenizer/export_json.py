"""Write a GGUF's byte-level BPE vocabulary as Hugging Face ``tokenizer.json`` + ``tokenizer_config.json``.

Used to give a model directory built from a GGUF (an MLX directory, see
:mod:`backends.mlx_export`) the tokenizer the GGUF carries.  The
pre-tokenizer is llama.cpp's regex sequence for ``tokenizer.ggml.pre``
written as ``Split`` steps (HF's "Isolated" split of each piece is
llama.cpp's procedure), then ``ByteLevel`` without its own regex; the
vocabulary strings and merges are the GGUF's own (already in byte-level
form); control tokens become special added tokens.  tokchat's loader and HF
``tokenizers`` then read the file identically, and as llama.cpp reads the GGUF
(``tests/backends/test_mlx_model_dir.py``).

Not handled: SentencePiece, WordPiece and Unigram vocabularies (no
``tokenizer.ggml.merges`` in byte-level form), pre-tokenizers llama.cpp
handles with bespoke code.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tokenizer.errors import TokenizerError
from tokenizer.gguf import read_gguf
from tokenizer.pretokenize import PRE_NAMES, PRE_TYPES

#: llama.cpp's token types: 3 = control (an HF special added token)
CONTROL = 3


def gguf_tokenizer_files(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(tokenizer.json, tokenizer_config.json) contents for the GGUF at ``path``."""
    kv = read_gguf(path).kv
    if kv.get("tokenizer.ggml.model") != "gpt2":
        raise TokenizerError(f"only byte-level BPE (gpt2) vocabularies export to tokenizer.json; "
                             f"this one is {kv.get('tokenizer.ggml.model')!r}")
    pre_name = str(kv.get("tokenizer.ggml.pre") or "default")
    if pre_name not in PRE_NAMES:
        raise TokenizerError(f"pre-tokenizer {pre_name!r} has no tokenizer.json form here")
    pre_type, ignore_merges = PRE_NAMES[pre_name]
    tokens: list[str] = kv["tokenizer.ggml.tokens"]
    types: list[int] = kv.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    merges = [m.split(" ", 1) for m in kv.get("tokenizer.ggml.merges", [])]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [
            {"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for i, (tok, kind) in enumerate(zip(tokens, types)) if kind == CONTROL
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            *({"type": "Split", "pattern": {"Regex": p}, "behavior": "Isolated", "invert": False}
              for p in PRE_TYPES[pre_type]),
            byte_level,
        ]},
        "post_processor": None,
        "decoder": byte_level,
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
            "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": ignore_merges,
            "vocab": {tok: i for i, tok in enumerate(tokens)},
            "merges": merges,
        },
    }
    config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
                              "add_bos_token": bool(kv.get("tokenizer.ggml.add_bos_token", False))}
    for role in ("bos", "eos", "unknown", "padding"):
        token_id = kv.get(f"tokenizer.ggml.{role}_token_id")
        if isinstance(token_id, int) and 0 <= token_id < len(tokens):
            config[{"unknown": "unk_token", "padding": "pad_token"}.get(role, f"{role}_token")] = tokens[token_id]
    if isinstance(kv.get("tokenizer.chat_template"), str):
        config["chat_template"] = kv["tokenizer.chat_template"]
    return tokenizer, config


def export_tokenizer(gguf_path: str | os.PathLike[str], directory: str | os.PathLike[str]) -> Path:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` for the GGUF into ``directory``; its path."""
    tokenizer, config = gguf_tokenizer_files(gguf_path)
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    for name, data in (("tokenizer.json", tokenizer), ("tokenizer_config.json", config)):
        partial = target / f"{name}.partial"
        partial.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        os.replace(partial, target / name)
    return target / "tokenizer.json"
