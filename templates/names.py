"""The chat templates tokchat knows by name: one list for the flags, the settings schema and the resolver.

Kept apart from :mod:`templates.resolve` (which compiles templates and so imports Jinja) so
that the settings schema and the command line can name the choices without loading the
template engine; :mod:`templates.resolve` re-exports both names, and is their user.
"""
from __future__ import annotations

#: built-in name -> (file in this package, supports_thinking)
BUILTINS: dict[str, tuple[str, bool]] = {
    "chatml": ("chatml.jinja", False),
    "chatml-think": ("chatml-think.jinja", True),
    "llama3": ("llama3.jinja", False),
    "gemma": ("gemma.jinja", False),
}
#: every name ``--template``, ``chat.template`` and ``/template`` accept: the model's own, detection, a built-in
NAMES: tuple[str, ...] = ("auto", "model", *BUILTINS)
