"""``tokchat doctor --server URL``: what tokchat finds at a server before a chat starts.

Reachability, server kind and version, the model it serves, its context and
vocabulary sizes, and whether its token ids are ours (the same check a chat runs at
connect, :func:`backends.remote_connect.check_vocabulary`).  Loads no model.
"""
from __future__ import annotations

from typing import Any

from backends.base import BackendError
from backends.remote import RemoteSettings


def server_report(settings: RemoteSettings, model: str | None) -> tuple[list[tuple[str, str]], bool]:
    """(label, finding) rows and whether the server is usable with this tokenizer.

    Raises BackendError (one line) when the server cannot be reached or understood.
    """
    from backends.remote_connect import VocabularyMismatch, check_vocabulary, make_adapter, open_client
    from backends.remote_connect import server_tokenizer_source

    backend = open_client(settings)
    try:
        server = backend.server
        assert server is not None
        rows = [
            ("server", f"{server.url} reachable"),
            ("kind", f"{server.kind}{' ' + server.version if server.version else ''}"),
            ("model", server.model or "(not named)"),
            ("context", str(server.context_size or "not reported")),
            ("vocabulary", f"{server.n_vocab} tokens" if server.n_vocab else "size not reported"),
        ]
        if server.slots:
            rows.append(("slots", str(server.slots)))
        ok = True
        try:
            source: Any = _tokenizer_source(model, server, server_tokenizer_source)
        except (BackendError, FileNotFoundError) as exc:
            rows.append(("ids", f"not checked: {exc}"))
            return rows, False
        from tokenizer import load_tokenizer

        tokenizer = load_tokenizer(source)
        backend.adapter = make_adapter(server.kind, tokenizer)
        backend.describe()
        try:
            check_vocabulary(backend, tokenizer, str(source))
            rows.append(("ids", f"the server's ids are ours (probe text and size checked against {source})"))
        except VocabularyMismatch as exc:
            rows.append(("ids", str(exc)))
            ok = False
        return rows, ok
    finally:
        backend.close()


def _tokenizer_source(model: str | None, server: Any, from_server: Any) -> Any:
    if model:
        from app.models.resolution import resolve_model

        return resolve_model(model)
    return from_server(server)


def run_server_doctor(settings: RemoteSettings, model: str | None, as_json: bool) -> int:
    import json

    rows, ok = server_report(settings, model)
    if as_json:
        print(json.dumps({"ok": ok, **{label: text for label, text in rows}}, indent=2))
    else:
        width = max(len(label) for label, _ in rows)
        for label, text in rows:
            print(f"{label:<{width}}  {text}")
    return 0 if ok else 1
