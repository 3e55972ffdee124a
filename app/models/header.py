"""A chat's model file is read once: the header :func:`app.models.preset_match.chat_options` parsed is handed on.

Matching a preset needs the model's header; so do the tokenizer (its
vocabulary and merges live there) and the backend (name, quantization,
context length).  :func:`app.models.preset_match.match_model` reads it once and it
travels in ``ChatOptions.model_meta`` until :func:`take_header` hands it to
the tokenizer here and to the backend through ``LoadOptions.model_meta``.
Options built without a header (tests, ``/model``) are read here, once.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from app.settings.options import ChatOptions


def take_header(path: Path, options: ChatOptions, *, for_engine: bool = True) -> Any:
    """The header of ``path`` (a :class:`backends.model_meta.ModelMeta`), or None when it cannot be read.

    The copy in ``options`` is taken out (set to None): it is used for one
    load only, so a later load of the same path (``/model``) reads the file as
    it is then.  None leaves the error to the tokenizer's loader, which says
    in its own words what is wrong with the file.

    A GGUF with no weights (:func:`app.models.file_kind.vocabulary_only`) raises
    :class:`~app.models.hub_ref.ModelNotFound` here, before an engine is started for it:
    the engine could only say, three times over, that it could not load it.  With
    ``for_engine=False`` (a backend handed in, which generates without these
    weights) such a file is the tokenizer it is.
    """
    from app.models.file_kind import vocabulary_only, vocabulary_only_message
    from app.models.hub_ref import ModelNotFound
    from backends.base import BackendError
    from backends.model_meta import known_meta

    handed, options.model_meta = options.model_meta, None
    try:
        header = known_meta(path, handed)
    except (BackendError, OSError):
        return None
    if for_engine and vocabulary_only(header.gguf):
        raise ModelNotFound(vocabulary_only_message(path))
    return header


def load_chat_tokenizer(path: Path, header: Any) -> Any:
    """Our tokenizer for ``path``, built from ``header`` when it holds the parsed GGUF."""
    from tokenizer import load_tokenizer

    gguf = getattr(header, "gguf", None)
    return load_tokenizer(path, gguf=gguf) if gguf is not None else load_tokenizer(path)
