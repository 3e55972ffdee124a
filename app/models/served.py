"""The model a server serves, for its preset: asked once, before the chat's settings are final.

``--server URL`` without ``--model`` took the tokenizer from the server but no model
preset, so the same model sampled differently through a server than locally (issue 34,
item 6: SmolLM2 0.2 / 0.9 locally, the defaults 0.7 / 0.95 remotely).  The preset is
matched from what the server reports, as the local path matches it from the GGUF header:
the file the server names (llama-server's ``model_path``, found here by
:func:`backends.remote_connect.server_tokenizer_source`) has its header read and matched.

The settings are merged before the chat opens, so the client opened to ask is kept
(:func:`take_opened`) and the chat's connect adopts it instead of asking again; a server
that cannot be reached is not waited for twice either: its error is kept and raised there.

Not handled here: a server on another machine whose model file is not here (no preset
then, and a note says why), vLLM and SGLang's Hugging Face names without a local GGUF.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

#: the client opened (or the error met) while the settings were merged: (its RemoteSettings, client or error)
_opened: tuple[Any, Any] | None = None


def served_model_path(remote: Any) -> Path:
    """The local file or folder of the model ``remote`` serves; raises BackendError (one line)."""
    global _opened
    from backends.base import BackendError
    from backends.remote_connect import open_client, server_tokenizer_source

    discard_opened()
    try:
        backend = open_client(remote)
    except BackendError as exc:
        _opened = (remote, exc)
        raise
    _opened = (remote, backend)
    assert backend.server is not None
    return server_tokenizer_source(backend.server)


def take_opened(remote: Any) -> Any:
    """The client :func:`served_model_path` opened for these very settings (None: none), or its error raised."""
    global _opened
    opened, _opened = _opened, None
    if opened is None:
        return None
    settings, result = opened
    if settings != remote:
        _close(result)
        return None
    if isinstance(result, BaseException):
        raise result
    return result


def discard_opened() -> None:
    """Close a client no chat adopted (``config show``, or settings that changed)."""
    global _opened
    opened, _opened = _opened, None
    if opened is not None:
        _close(opened[1])


def _close(result: Any) -> None:
    if not isinstance(result, BaseException):
        result.close()
