"""The user-facing error boundary.

Errors the user can act on (a corrupt GGUF, a missing model, a backend that
cannot run here) are shown as one line.  Anything else is a bug and keeps
its traceback.  Each package defines its own small error hierarchy; this
module only knows which of them are meant for the user.
"""
from __future__ import annotations


class CLIError(Exception):
    """An error meant for the user: printed as one line, exit status 2.

    Defined here, at the bottom of ``app``, rather than in :mod:`app.cli`, so
    this boundary can name it without importing the command line above it.
    """


def user_facing_types() -> tuple[type[BaseException], ...]:
    """Exception types whose message is written for the user.

    The other packages' types are named by module path, not imported at the
    top, because every room of ``app`` (and the packages below it) sits above
    this module: an import would tie the bottom of ``app`` to its top.
    """
    types: list[type[BaseException]] = [CLIError, FileNotFoundError, PermissionError]
    for module, names in (
        ("tokenizer", ("TokenizerError",)),
        ("templates", ("TemplateError",)),
        ("backends", ("BackendError",)),
        ("app.settings.config", ("ConfigError",)),
        ("app.history.store", ("StoreError",)),
        ("app.models.bundled", ("BundledModelMissing",)),
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
