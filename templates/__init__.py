"""Chat templates: messages -> prompt text -> injection-safe prompt ids.

* :func:`resolve_template` picks the model's own Jinja template (sandboxed)
  or a built-in family (ChatML, ChatML with Qwen3-style thinking, Llama 3,
  Gemma), with a one-line notice when ``auto`` falls back.
* :meth:`ChatTemplate.render` gives a :class:`RenderedPrompt`: the text and
  the spans of message text in it.
* :func:`prompt_ids` encodes markup as control tokens and message text as
  plain text, with exactly one BOS where the model wants it.
"""
from templates.chat_template import ChatTemplate, RenderedPrompt
from templates.ids import encode_part, prompt_ids, with_bos
from templates.resolve import BUILTINS, NAMES, builtin, detect_family, resolve_template
from templates.sandbox import RenderLimits, TemplateError

__all__ = [
    "BUILTINS", "NAMES", "ChatTemplate", "RenderLimits", "RenderedPrompt", "TemplateError",
    "builtin", "detect_family", "encode_part", "prompt_ids", "resolve_template", "with_bos",
]
