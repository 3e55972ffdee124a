"""The user-facing error boundary.

Errors the user can act on (a corrupt GGUF, a missing model, a backend that
cannot run here) are shown as one line.  Anything else is a bug and keeps
its traceback.  Each package defines its own small error hierarchy; this
module only knows which of them are meant for the user.
"""
from __future__ import annotations


def user_facing_types() -> tuple[type[BaseException], ...]:
    """Exception types whose message is written for the user."""
    from app.models.bundled import BundledModelMissing

    types: list[type[BaseException]] = [BundledModelMissing, FileNotFoundError, PermissionError]
    try:
        from app.cli import CLIError

        types.append(CLIError)
    except ImportError:  # pragma: no cover - cli always importable
        raise
    for module, names in (
        ("tokenizer", ("TokenizerError",)),
        ("templates", ("TemplateError",)),
        ("backends", ("BackendError",)),
        ("app.settings.config", ("ConfigError",)),
        ("app.history.store", ("StoreError",)),
    ):
        try:
            mod = __import__(module, fromlist=list(names))
        except ImportError:
            continue
        for name in names:
            exc_type = getattr(mod, name, None)
            if isinstance(exc_type, type) and issubclass(exc_type, BaseException):
                types.append(exc_type)
    return tuple(types)


def user_message(exc: BaseException) -> str | None:
    """One line for the user, or None if ``exc`` is a bug that should keep its traceback."""
    if isinstance(exc, user_facing_types()):
        text = str(exc).strip().splitlines()
        return text[0] if text else type(exc).__name__
    return None
