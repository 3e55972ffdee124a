"""Hugging Face's own ``apply_chat_template``, the reference for what a template is given.

A ``PreTrainedTokenizerFast`` is built from a local ``tokenizer.json`` (no
hub access, no torch): ``apply_chat_template(..., chat_template=SOURCE,
tokenize=False)`` then renders any template with exactly the variables,
Jinja environment and helpers transformers uses.  The vocabulary does not
matter for the text; ``bos_token``/``eos_token`` are set to the model's.
"""
from __future__ import annotations

import os
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


@lru_cache(maxsize=None)
def _hf_tokenizer(tokenizer_json: str, bos_token: str, eos_token: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast(tokenizer_file=tokenizer_json, bos_token=bos_token or None,
                                       eos_token=eos_token or None)


def hf_render(tokenizer_dir: Path, source: str, messages: Sequence[dict], *, bos_token: str = "<s>",
              eos_token: str = "</s>", tools: Sequence[dict] | None = None,
              add_generation_prompt: bool = True) -> tuple[str | None, str | None]:
    """``(text, None)`` as transformers renders it, or ``(None, "ErrorType: message")`` when it fails."""
    tokenizer = _hf_tokenizer(str(tokenizer_dir / "tokenizer.json"), bos_token, eos_token)
    try:
        text = tokenizer.apply_chat_template([dict(m) for m in messages], chat_template=source, tools=tools,
                                             tokenize=False, add_generation_prompt=add_generation_prompt)
    except Exception as exc:  # the oracle's verdict, compared by the caller
        return None, f"{type(exc).__name__}: {exc}"
    return text, None
