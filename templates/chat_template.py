"""A chat template and what it renders: the prompt text plus where each message's text sits.

Injection safety needs to know which characters of the rendered prompt came
from a message (encoded as plain text, never as control tokens) and which
came from the template's markup.  Templates transform content (``| trim``,
splitting off ``</think>``), so searching the output for the content is
unreliable: a user who types ``<|im_start|>`` would match the markup.
Instead each message's content is rendered a second time wrapped in two
private-use sentinel characters; stripping them must give back exactly the
plain render, and their positions are then the message spans.  If a
template reacts to the sentinels (it inspects or cuts the content), spans
are located one message at a time, and a message that still cannot be
placed is reported in :attr:`RenderedPrompt.unplaced` so that
:func:`templates.prompt_ids` can refuse it if it holds control-token text.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from templates.sandbox import RenderLimits, SandboxedTemplate, TemplateError
from templates.thinking import thinking_variables

# Supplementary private-use code points: never produced by a tokenizer's decode of real text.
_OPEN = "\U000F0001"
_CLOSE = "\U000F0002"


@dataclass(frozen=True)
class RenderedPrompt:
    """The prompt text and the ``(start, end)`` character spans of message text in it."""

    text: str
    literal_spans: tuple[tuple[int, int], ...] = ()
    #: contents the template transformed so that they could not be located
    unplaced: tuple[str, ...] = ()


@dataclass
class ChatTemplate:
    """A Jinja chat template (the model's own, a file, or a built-in) ready to render."""

    name: str
    source: str
    bos_token: str = ""
    eos_token: str = ""
    #: whether ``enable_thinking`` changes anything
    supports_thinking: bool = False
    #: False: the template rejects a system message, so it is folded into the first user message
    supports_system: bool = True
    limits: RenderLimits = field(default_factory=RenderLimits)
    #: a separate template used when tools are given (tokenizer_config.json's named "tool_use")
    tool_use_source: str | None = None
    _compiled: SandboxedTemplate | None = field(default=None, init=False, repr=False)
    _tool_use: SandboxedTemplate | None = field(default=None, init=False, repr=False)

    @property
    def compiled(self) -> SandboxedTemplate:
        if self._compiled is None:
            self._compiled = SandboxedTemplate(self.source, self.limits)
        return self._compiled

    def render_text(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
                    enable_thinking: bool | None = None, tools: Sequence[Mapping[str, Any]] | None = None
                    ) -> str:
        """The prompt text alone, with the variables Hugging Face templates expect.

        Without tools, ``tools`` and ``documents`` are None, exactly as
        transformers' ``apply_chat_template`` passes them (checked against
        it on every template in llama.cpp's ``models/templates``): an empty
        list would switch Llama 3.x templates into tool mode, and leaving
        ``tools`` undefined would render tool-only templates that HF
        refuses.  ``enable_thinking=None`` leaves the variable undefined,
        so the template's own default applies.
        """
        source = self.tool_use_source if tools is not None and self.tool_use_source else None
        variables: dict[str, Any] = dict(
            messages=[dict(m) for m in messages], add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token, eos_token=self.eos_token,
            tools=[dict(t) for t in tools] if tools is not None else None, documents=None,
        )
        # the switch as this template defines it (enable_thinking, thinking, reasoning_effort)
        variables.update(thinking_variables(self.source if source is None else source, enable_thinking))
        compiled = self.compiled if source is None else self._tool_use_compiled()
        try:
            return compiled.render(**variables)
        except TemplateError as exc:
            if tools is None and _NEEDS_TOOLS in str(exc) and "tools" in self.source:
                raise TemplateError(
                    f"{exc}: this is a tool-use template that renders only with tools (Hugging Face "
                    "fails on it the same way); give tools (tokchat render --tools FILE.json) or use "
                    "the model's default template") from None
            raise

    def _tool_use_compiled(self) -> SandboxedTemplate:
        if self._tool_use is None:
            self._tool_use = SandboxedTemplate(self.tool_use_source or self.source, self.limits)
        return self._tool_use

    def render(self, messages: Sequence[Any], add_generation_prompt: bool = True,
               enable_thinking: bool | None = None, tools: Sequence[Mapping[str, Any]] | None = None
               ) -> RenderedPrompt:
        """Render ``messages`` (mappings or objects with ``role``/``content``) with message spans.

        Message text (``content``, a tool result included) is placed as
        literal spans; tool schemas and tool-call arguments are markup the
        template writes from structured data.
        """
        plain = self.prepare(messages)
        text = self.render_text(plain, add_generation_prompt, enable_thinking, tools)
        wanted = [i for i, m in enumerate(plain) if m["content"].strip()]
        if any(_OPEN in m["content"] or _CLOSE in m["content"] for m in plain):
            return RenderedPrompt(text, (), tuple(plain[i]["content"] for i in wanted))

        def spans_for(indices: list[int]) -> list[tuple[int, int]] | None:
            marked = [_mark(m) if i in indices else m for i, m in enumerate(plain)]
            try:
                rendered = self.render_text(marked, add_generation_prompt, enable_thinking, tools)
            except TemplateError:
                return None
            return _strip_marks(rendered, text)

        spans = spans_for(wanted) if wanted else []
        unplaced: list[str] = []
        if spans is None:  # the template reacted to the marks: place messages one by one
            spans = []
            for i in wanted:
                found = spans_for([i])
                if found:
                    spans.extend(found)
                else:
                    unplaced.append(plain[i]["content"])
        return RenderedPrompt(text, tuple(sorted(set(spans))), tuple(unplaced))

    def prepare(self, messages: Sequence[Any]) -> list[dict[str, Any]]:
        """Messages as plain dicts (``role``, ``content``, and the tool keys a message has),
        the system message folded if needed."""
        plain = [_as_dict(m) for m in messages]
        if not self.supports_system and plain and plain[0]["role"] == "system":
            system, rest = plain[0], plain[1:]
            if rest and rest[0]["role"] == "user":
                rest[0] = {"role": "user", "content": system["content"] + "\n\n" + rest[0]["content"]}
            elif system["content"]:
                rest.insert(0, {"role": "user", "content": system["content"]})
            plain = rest
        return plain


def _as_dict(message: Any) -> dict[str, Any]:
    get = message.get if isinstance(message, Mapping) else (lambda key: getattr(message, key, None))
    role, content = get("role"), get("content")
    if not isinstance(role, str) or not isinstance(content, str):
        raise TemplateError(f"a message needs a string role and content, got {message!r:.80}")
    plain: dict[str, Any] = {"role": role, "content": content}
    for key in TOOL_KEYS:  # what HF's tool-calling convention adds to a message
        value = get(key)
        if value:
            plain[key] = value
    return plain


#: message keys of Hugging Face's tool-calling convention, passed to templates when set
TOOL_KEYS = ("tool_calls", "tool_call_id", "name")
#: how Jinja reports ``for tool in tools`` with tools None (a tool-only template without tools)
_NEEDS_TOOLS = "'NoneType' object is not iterable"


def _mark(message: dict[str, Any]) -> dict[str, Any]:
    """Wrap the content's non-whitespace core, so that ``| trim`` keeps both sentinels."""
    content = message["content"]
    core = content.strip()
    start = content.index(core)
    marked = content[:start] + _OPEN + core + _CLOSE + content[start + len(core):]
    return {**message, "content": marked}


def _strip_marks(marked: str, expected: str) -> list[tuple[int, int]] | None:
    """Spans between sentinel pairs, or None unless removing them gives ``expected`` exactly."""
    spans: list[tuple[int, int]] = []
    pieces: list[str] = []
    opened: list[int] = []
    length = 0
    last = 0
    for pos, char in enumerate(marked):
        if char != _OPEN and char != _CLOSE:
            continue
        pieces.append(marked[last:pos])
        length += pos - last
        last = pos + 1
        if char == _OPEN:
            opened.append(length)
        elif opened:
            spans.append((opened.pop(), length))
        else:
            return None
    pieces.append(marked[last:])
    if opened or "".join(pieces) != expected:
        return None
    return spans
