"""What a ``--model`` path is when it is not a model to chat with: a fifo, a device, a GGUF without weights.

Two cases the load used to blame on something else:

* a path that exists but is no regular file (a named pipe, ``/dev/zero``) was "model not found", and
  reading a fifo would block until someone writes to it: :func:`not_a_regular_file` names what it is,
  from ``stat`` alone, without opening it;
* a GGUF with no tensors (llama.cpp's ``ggml-vocab-*.gguf``: a tokenizer and metadata only) went to the
  engine, which answered "could not load" three times over: :func:`vocabulary_only` says it from the
  header's tensor count, the fact ``tokchat info`` shows as ``tensors 0``.  Such a file is still a
  tokenizer (``tokchat info``, ``tokenize``, the tokenizer of a ``--server`` chat); it cannot generate.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

#: ``stat`` test -> what such a file is, for the message
_SPECIAL = ((stat.S_ISFIFO, "a named pipe (fifo)"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def not_a_regular_file(path: Path) -> str | None:
    """One line when ``path`` exists but is neither a regular file nor a directory, else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    what = next((name for test, name in _SPECIAL if test(mode)), None)
    if what is None:
        return None
    return f"{path} is {what}, not a GGUF model file: pass --model PATH.gguf"


def vocabulary_only(gguf: Any) -> bool:
    """A parsed GGUF header (:class:`tokenizer.gguf.GGUFFile`) with no tensors: a vocabulary, no weights."""
    return getattr(gguf, "tensor_count", None) == 0


def vocabulary_only_message(path: Path) -> str:
    """Why a vocabulary-only GGUF cannot be the model of a local chat, and what it is good for."""
    return (f"{path.name} holds only a vocabulary (no weights): it can tokenize (tokchat info, tokenize, or "
            "--model beside --server) but not generate; pass a GGUF with weights")
