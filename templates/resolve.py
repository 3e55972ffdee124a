"""Pick the chat template for a model: its own, a file, or a built-in family.

``auto`` uses the model's template when it compiles and renders a probe
conversation inside the sandbox; otherwise (no template, as in Gemma 3's
GGUF, or a broken or hostile one) it detects the family from the markers in
the template source and then in the vocabulary, and says so in one line.
An explicit choice (``model``, ``--template-file``) that cannot be used is an
error instead: the user asked for exactly that template.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import replace
from importlib import resources
from pathlib import Path


from templates.chat_template import ChatTemplate
from templates.names import BUILTINS, NAMES
from templates.sandbox import TemplateError
from templates.thinking import has_thinking_switch

if TYPE_CHECKING:
    from tokenizer.protocol import Tokenizer

__all__ = ["BUILTINS", "NAMES", "builtin", "detect_family", "resolve_template"]

#: family -> the marker that identifies it, checked in this order
_FAMILY_MARKERS: tuple[tuple[str, str], ...] = (
    ("llama3", "<|start_header_id|>"),
    ("gemma", "<start_of_turn>"),
    ("chatml", "<|im_start|>"),
)

_PROBE = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hello!"},
    {"role": "assistant", "content": "Hi! How can I help?"},
    {"role": "user", "content": "Tell me a joke."},
]


def resolve_template(name: str, tokenizer: Tokenizer, template_file: str | Path | None = None
                     ) -> tuple[ChatTemplate, str | None]:
    """The template to chat with, and a one-line notice when ``auto`` had to fall back."""
    if template_file is not None:
        path = Path(template_file)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise TemplateError(f"cannot read template file {path}: {exc.strerror or exc}") from None
        return _checked(_from_source(path.name, text, tokenizer), f"template file {path}"), None
    if name in BUILTINS:
        return builtin(name, tokenizer), None
    if name not in NAMES:
        raise TemplateError(f"unknown template {name!r}; choose one of {', '.join(NAMES)}")
    source = _model_template(tokenizer)
    if name == "model":
        if source is None:
            raise TemplateError("the model has no chat template; use --template auto, chatml, llama3 or gemma")
        return _checked(_from_source("model", source, tokenizer), "the model's chat template"), None
    if source is None:
        family, why = detect_family(tokenizer, None)
        chosen = builtin(family, tokenizer)
        return chosen, f"the model has no chat template; using the built-in {chosen.name} template ({why})"
    try:
        return _checked(_from_source("model", source, tokenizer), "the model's chat template"), None
    except TemplateError as exc:
        family, why = detect_family(tokenizer, source)
        chosen = builtin(family, tokenizer)
        reason = str(exc).removeprefix("the model's chat template cannot be used: ")
        return chosen, f"the model's chat template cannot be used ({reason}); using the built-in {chosen.name} template ({why})"


def builtin(name: str, tokenizer: Tokenizer) -> ChatTemplate:
    """A built-in template by name; ``chatml`` becomes ``chatml-think`` for vocabularies with ``<think>``."""
    if name == "chatml" and _has_marker(tokenizer, "<think>"):
        name = "chatml-think"
    file_name, thinking = BUILTINS[name]
    source = resources.files("templates").joinpath(file_name).read_text(encoding="utf-8")
    return ChatTemplate(name=name, source=source, bos_token=_token_text(tokenizer.bos_token),
                        eos_token=_token_text(tokenizer.eos_token), supports_thinking=thinking)


def detect_family(tokenizer: Tokenizer, source: str | None) -> tuple[str, str]:
    """(family, why): markers in the template source first, then in the vocabulary."""
    for family, marker in _FAMILY_MARKERS:
        if source and marker in source:
            return family, f"its template uses {marker}"
    for family, marker in _FAMILY_MARKERS:
        if _has_marker(tokenizer, marker):
            return family, f"the vocabulary has {marker}"
    return "chatml", "no known chat markers in the vocabulary, so its tags are plain text"


def _has_marker(tokenizer: Tokenizer, marker: str) -> bool:
    # special tokens only: byte-level vocabularies often hold "<think>" as ordinary merged text
    return marker in tokenizer.special_tokens


def _token_text(value: str | None) -> str:
    return value if isinstance(value, str) else ""


def _model_template(tokenizer: Tokenizer, name: str = "default") -> str | None:
    source: object = tokenizer.chat_template
    if isinstance(source, list):  # tokenizer_config.json may hold named templates
        named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
        source = named.get(name)
    elif name != "default":
        return None
    return source if isinstance(source, str) and source.strip() else None


def _from_source(name: str, source: str, tokenizer: Tokenizer) -> ChatTemplate:
    # HF picks the named "tool_use" template when tools are passed, "default" otherwise
    tool_use = _model_template(tokenizer, "tool_use") if name == "model" else None
    return ChatTemplate(name=name, source=source, bos_token=_token_text(tokenizer.bos_token),
                        eos_token=_token_text(tokenizer.eos_token),
                        supports_thinking=has_thinking_switch(source), tool_use_source=tool_use)


def _checked(template: ChatTemplate, what: str) -> ChatTemplate:
    """The template if it renders the probe conversation; a system-less template is marked so."""
    error = _probe_error(template, _PROBE)
    if error is None:
        return template
    if _probe_error(template, _PROBE[1:]) is None:
        return replace(template, supports_system=False)
    raise TemplateError(f"{what} cannot be used: {error}")


def _probe_error(template: ChatTemplate, messages: list[dict[str, str]]) -> str | None:
    """Why ``template`` cannot render ``messages``, or None when it can.

    A tool-only template (Hermes' ``tool_use``) fails without tools, as in
    Hugging Face; it is usable when it renders with a probe tool, and says
    what it needs when a chat without tools tries it.
    """
    try:
        text = template.render_text(messages)
    except TemplateError as exc:
        try:
            text = template.render_text(messages, tools=[_PROBE_TOOL])
        except TemplateError:
            return str(exc)
    return None if text.strip() else "it renders nothing"


_PROBE_TOOL = {"type": "function", "function": {"name": "probe", "description": "a probe",
                                                 "parameters": {"type": "object", "properties": {}}}}
