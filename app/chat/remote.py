"""Open a chat whose replies come from an inference server (``--server``).

The parts are the local chat's (our tokenizer, our template, :class:`app.conversation.session.ChatSession`);
only the backend differs.  The tokenizer comes from ``--model`` (a GGUF, even a
vocab-only one, a ``tokenizer.json`` directory or ``hf:``), else from what the server
says it serves (:func:`backends.remote_connect.server_tokenizer_source`), and the
server must agree with it id for id (:func:`backends.remote_connect.check_vocabulary`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from app.settings.options import ChatOptions


def open_remote(options: ChatOptions, progress: Callable[[str], None] = lambda _: None
                ) -> tuple[Any, Any, str | None, Any, Path]:
    """(tokenizer, template, template notice, backend, tokenizer path) for ``options.server``."""
    from backends.remote_connect import finish_connect, open_client, server_tokenizer_source
    from templates import resolve_template
    from tokenizer import load_tokenizer

    settings = options.server
    assert settings is not None
    progress(f"connecting to {settings.url}")
    backend = open_client(settings)
    try:
        if options.model:
            from app.models.resolution import resolve_model

            path = Path(resolve_model(options.model))
        else:
            assert backend.server is not None
            path = server_tokenizer_source(backend.server)
        progress(f"reading the tokenizer from {path.name}")
        tokenizer = load_tokenizer(path)
        template, notice = resolve_template(options.template, tokenizer, options.template_file)
    except BaseException:
        backend.close()
        raise
    progress(f"checking that {settings.url} uses the same token ids")
    finish_connect(backend, tokenizer, str(path), options.ctx)
    return tokenizer, template, notice, backend, path
