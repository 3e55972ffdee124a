"""Chat templates: messages -> prompt text -> injection-safe prompt ids.

* :func:`resolve_template` picks the model's own Jinja template (sandboxed)
  or a built-in family (ChatML, ChatML with Qwen3-style thinking, Llama 3,
  Gemma), with a one-line notice when ``auto`` falls back.
* :meth:`ChatTemplate.render` gives a :class:`RenderedPrompt`: the text and
  the spans of message text in it.
* :func:`prompt_ids` encodes markup as control tokens and message text as
  plain text, with exactly one BOS where the model wants it.
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from templates.chat_template import ChatTemplate, RenderedPrompt
    from templates.ids import encode_part, prompt_ids, with_bos
    from templates.names import BUILTINS, NAMES
    from templates.resolve import builtin, detect_family, resolve_template
    from templates.sandbox import RenderLimits, TemplateError

#: public name -> the module that defines it.  Imported on first use (PEP 562), so that
#: ``templates.names`` (what the settings schema and the flags list) costs no Jinja import
_HOMES = {
    "ChatTemplate": "chat_template", "RenderedPrompt": "chat_template",
    "encode_part": "ids", "prompt_ids": "ids", "with_bos": "ids",
    "BUILTINS": "names", "NAMES": "names",
    "builtin": "resolve", "detect_family": "resolve", "resolve_template": "resolve",
    "RenderLimits": "sandbox", "TemplateError": "sandbox",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'templates' has no attribute {name!r}")
    value = getattr(import_module(f"templates.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
