"""Tool calls in a model's reply: the family's syntax, found in the stream and parsed strictly.

Three syntaxes cover the templates tokchat knows (:func:`syntax_for` picks
one from the chat template's own markup):

* ``hermes`` - Qwen 2.5/3, Hermes, SmolLM3 and the ChatML built-ins:
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, any number;
* ``llama3`` - Llama 3.1+ JSON: the reply *is* ``{"name": ..., "parameters": {...}}``
  (optionally after ``<|python_tag|>``, several joined by ``;``);
* ``mistral`` - ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`` or the newer
  ``[TOOL_CALLS]name[ARGS]{...}``.

Two stages, as with every other stream here: :class:`CallStreamSplitter`
splits streamed text into answer text and call text (so the UI can show a
call's arguments as they are generated), and :func:`parse_reply` decides
afterwards, from the reply's ids, what the calls were.  Where the
vocabulary has the opening marker as one token (Qwen's ``<tool_call>`` is id
151657), only that id opens a call: the same characters spelled out in
plain-text pieces are text.  Parsing is strict: a call whose JSON does not
parse, lacks a name, or has arguments that are not an object is returned
with ``error`` set; the caller shows it and sends the error back to the
model, and never runs it.

Not handled here: which tools exist (unknown names are the loop's
business) and running anything.
"""
from __future__ import annotations

import json
import re
import secrets
import string
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Collection, Sequence

if TYPE_CHECKING:
    from tokenizer.protocol import Tokenizer
    from tokenizer.protocol import Tokenizer


@dataclass(frozen=True)
class CallSyntax:
    """How one model family writes tool calls."""

    family: str  # hermes | llama3 | mistral
    open: str  # the text that starts the call section ("" for llama3: the reply starts with "{")
    close: str = ""  # the text that ends one call ("" : the call runs to the end of the reply)


HERMES = CallSyntax("hermes", "<tool_call>", "</tool_call>")
LLAMA3 = CallSyntax("llama3", "")
MISTRAL = CallSyntax("mistral", "[TOOL_CALLS]")


def syntax_for(template_source: str) -> CallSyntax | None:
    """The call syntax a chat template teaches its model, or None if it takes no tools."""
    if "tools" not in template_source and "tool_calls" not in template_source:
        return None
    if "<tool_call>" in template_source:
        return HERMES
    if "[TOOL_CALLS]" in template_source:
        return MISTRAL
    if "<|start_header_id|>" in template_source or "ipython" in template_source:
        return LLAMA3
    return None


_ID_CHARS = string.ascii_letters + string.digits


def new_call_id() -> str:
    """A call id every template accepts (Mistral's insist on 9 alphanumerics)."""
    return "".join(secrets.choice(_ID_CHARS) for _ in range(9))


@dataclass
class ToolCall:
    """One call as the model wrote it; ``error`` set means malformed: show it, never run it."""

    id: str
    name: str
    arguments: dict
    raw: str  # the call's text as generated, markup included
    error: str | None = None

    def message_form(self) -> dict:
        """The call as an assistant message's ``tool_calls`` entry (HF's convention)."""
        return {"type": "function", "id": self.id, "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class ParsedReply:
    """A reply split into its answer text and its calls."""

    content: str  # the reply without the call markup (what a template re-renders around tool_calls)
    calls: list[ToolCall] = field(default_factory=list)
    call_tokens: int = 0  # reply ids that belong to call markup

    @property
    def valid_calls(self) -> list[ToolCall]:
        return [c for c in self.calls if c.error is None]


# ----------------------------------------------------------------------------------- streaming
class CallStreamSplitter:
    """Splits streamed reply text into ``("content", text)`` and ``("call", text)`` pieces.

    Text that might be the start of an opening marker is held back until it
    is known (at most ``len(open) - 1`` characters).  For ``llama3`` the
    reply is a call when its first non-blank character is ``{`` (or it starts
    with ``<|python_tag|>``).  This is for display; :func:`parse_reply`
    decides what the calls are.
    """

    def __init__(self, syntax: CallSyntax | None) -> None:
        self.syntax = syntax
        self._held = ""
        self._in_call = False
        self._decided = syntax is None or syntax.family not in ("llama3", "hermes")
        #: the whole reply is shown as call text because it opens like a bare JSON call
        self.bare = False

    def feed(self, text: str) -> list[tuple[str, str]]:
        if self.syntax is None:
            return [("content", text)] if text else []
        self._held += text
        out: list[tuple[str, str]] = []
        if not self._decided and self.syntax.family == "hermes":
            head = self._held.lstrip()
            if not head or any(p.startswith(head) for p in _BARE_OPENERS):
                return out
            self._decided = True
            if head.startswith(_BARE_OPENERS):
                self.bare = True
                out.append(("call", self._held))
                self._held = ""
                self.syntax = CallSyntax("bare", "")
                self._in_call = True
                return out
        if not self._decided:
            head = self._held.lstrip()
            if not head:
                return out
            if head.startswith("{") or head.startswith("<|python_tag|>"):
                self._in_call = True
            elif "<|python_tag|>".startswith(head):
                return out
            self._decided = True
            if not self._in_call:
                out.append(("content", self._held))
                self._held = ""
                self._in_call = False
                self.syntax = None  # an answer in prose: no calls follow in this format
                return out
        while self._held:
            if self._in_call:
                close = self.syntax.close
                at = self._held.find(close) if close else -1
                if at < 0:
                    keep = _partial_suffix(self._held, close) if close else 0
                    piece, self._held = self._held[: len(self._held) - keep], self._held[len(self._held) - keep:]
                    if piece:
                        out.append(("call", piece))
                    break
                out.append(("call", self._held[: at + len(close)]))
                self._held = self._held[at + len(close):]
                self._in_call = False
            else:
                opener = self.syntax.open
                at = self._held.find(opener) if opener else -1
                if at < 0:
                    keep = _partial_suffix(self._held, opener) if opener else 0
                    piece, self._held = self._held[: len(self._held) - keep], self._held[len(self._held) - keep:]
                    if piece:
                        out.append(("content", piece))
                    break
                if at:
                    out.append(("content", self._held[:at]))
                self._held = self._held[at:]
                self._in_call = True
        return out

    def finish(self) -> list[tuple[str, str]]:
        held, self._held = self._held, ""
        if not held:
            return []
        return [("call" if self._in_call else "content", held)]


#: how a bare JSON call opens (see _parse_bare)
_BARE_OPENERS = ("{", "```json")


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest end of ``text`` that is a proper start of ``marker``."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


# ---------------------------------------------------------------------------- held arguments
def arguments_constraint(tokenizer: Tokenizer, syntax: CallSyntax | None, tools: Collection[Any]) -> Any:
    """The reply constraint that holds every call's arguments to its tool's input schema
    (``[tools] constrain_arguments``), or None where tokchat cannot hold them: a syntax other than
    Hermes/Qwen's ``<tool_call>`` markers, or no tools.  The text around calls stays free.

    ``tools``: :class:`app.tools.mcp_client.ToolInfo`.  A ConstraintError (one line) when a tool's schema
    cannot be compiled; the caller says so and leaves the calls free."""
    if syntax is None or syntax.family != "hermes" or not tools:
        return None
    from backends.constraint import parse_constraint, tool_calls_source

    special = _single_token(tokenizer, syntax.open) is not None and _single_token(tokenizer, syntax.close) is not None
    source = tool_calls_source(syntax.open, syntax.close, special, [(t.name, t.input_schema) for t in tools])
    return parse_constraint("tool_calls", source)


def hold_arguments(session: Any, syntax: CallSyntax | None, tools: Collection[Any]) -> str:
    """Hold the calls ``session`` generates to their tools' input schemas (``[tools] constrain_arguments``):
    its sampling gets :func:`arguments_constraint`.  Returns "" or one line saying why they stay free (a
    reply format the user set wins; a server or a call syntax tokchat cannot hold; a schema it cannot
    compile)."""
    from dataclasses import replace

    from backends.constraint import ConstraintError

    if session.sampling.constraint is not None and session.sampling.constraint.kind != "tool_calls":
        return "tool arguments are not held while a reply format is on (/format off holds them)"
    if session.backend.info.backend == "remote":
        return "tool arguments are held by tokchat's own engine only: a server's calls stay free"
    try:
        constraint = arguments_constraint(session.tokenizer, syntax, tools)
    except ConstraintError as exc:
        return f"tool arguments are not held: {exc}"
    if constraint is None:
        return "tool arguments are held for <tool_call> (Hermes/Qwen) calls only: this model's stay free"
    session.sampling = replace(session.sampling, constraint=constraint)
    return ""


# ------------------------------------------------------------------------------------- parsing
def parse_reply(tokenizer: Tokenizer, syntax: CallSyntax | None, reply_ids: Sequence[int],
                content: str, tool_names: Collection[str] = ()) -> ParsedReply:
    """The calls in a finished reply (``reply_ids`` as generated, ``content`` the answer text).

    ``content`` is the reply as the think filter passed it (reasoning
    removed); calls are looked for there.  The ids decide two things: that
    the opening marker was generated as its own token where the vocabulary
    has one, and how many ids the calls took.

    A ``hermes`` reply without the marker that is *nothing but* one JSON
    call to one of ``tool_names`` (bare, or in a ```json fence, as small
    Qwen models often write it; llama.cpp's Hermes parser accepts it too) is
    a call as well; the JSON must still parse.
    """
    if syntax is None or not content.strip():
        return ParsedReply(content)
    marker_id = _single_token(tokenizer, syntax.open)
    if syntax.family == "hermes" and syntax.open not in content:
        return _parse_bare(tokenizer, content, reply_ids, tool_names)
    if marker_id is not None and marker_id not in reply_ids:
        return ParsedReply(content)  # the marker text, if any, was spelled out: plain text
    if syntax.family == "hermes":
        parsed = _parse_hermes(content)
    elif syntax.family == "mistral":
        parsed = _parse_mistral(content)
    else:
        parsed = _parse_llama3(content)
    if parsed.calls:
        parsed.call_tokens = _call_tokens(tokenizer, syntax, reply_ids, marker_id)
    return parsed


_FENCED = re.compile(r"\A\s*```(?:json)?\s*\n(.*?)\n?```\s*\Z", re.DOTALL)
_BARE_CALL = re.compile(r'\A\s*\{\s*"name"\s*:\s*"([^"]+)"')


def _parse_bare(tokenizer: Tokenizer, content: str, reply_ids: Sequence[int],
                tool_names: Collection[str]) -> ParsedReply:
    fenced = _FENCED.match(content)
    body = fenced.group(1) if fenced else content
    named = _BARE_CALL.match(body)
    if named is None or named.group(1) not in tool_names:
        return ParsedReply(content)
    calls: list[ToolCall] = []
    decoder, pos, text = json.JSONDecoder(), 0, body.strip()
    while pos < len(text):  # one or more objects, one after the other (parallel calls)
        try:
            _, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            calls.append(_call_from_json(text[pos:], text[pos:], ("arguments", "parameters")))
            break
        calls.append(_call_from_json(text[pos:end], text[pos:end], ("arguments", "parameters")))
        pos = end
        while pos < len(text) and text[pos] in " \t\r\n,;":
            pos += 1
    stops = set(tokenizer.eog_ids)
    return ParsedReply("", calls, sum(1 for i in reply_ids if i not in stops))


def _single_token(tokenizer: Tokenizer, text: str) -> int | None:
    specials = tokenizer.special_tokens
    return specials.get(text) if text else None


def _call_tokens(tokenizer: Tokenizer, syntax: CallSyntax, reply_ids: Sequence[int], marker_id: int | None) -> int:
    """Ids from each opening marker to its closing one (or to the end of the reply)."""
    stops = set(tokenizer.eog_ids)
    ids = [i for i in reply_ids if i not in stops]
    if syntax.family == "llama3" or marker_id is None:
        if syntax.family == "llama3":
            return len(ids)
        # no marker token: find the marker text by decoding a growing prefix
        text, count, inside = "", 0, False
        for token in ids:
            text += tokenizer.decode([token])
            if not inside and syntax.open in text:
                inside, text = True, text[text.index(syntax.open):]
            if inside:
                count += 1
                if syntax.close and syntax.close in text[len(syntax.open):]:
                    inside, text = False, ""
        return count
    close_id = _single_token(tokenizer, syntax.close)
    count, inside = 0, False
    for token in ids:
        if token == marker_id:
            inside = True
        if inside:
            count += 1
            if close_id is not None and token == close_id:
                inside = False
    return count


_HERMES_CALL = re.compile(r"<tool_call>(.*?)(</tool_call>|\Z)", re.DOTALL)


def _parse_hermes(content: str) -> ParsedReply:
    calls, kept, last = [], [], 0
    for match in _HERMES_CALL.finditer(content):
        kept.append(content[last: match.start()])
        last = match.end()
        raw = match.group(0)
        if not match.group(2):
            calls.append(_malformed(raw, "the call is not closed with </tool_call>"))
            continue
        calls.append(_call_from_json(raw, match.group(1), ("arguments", "parameters")))
    kept.append(content[last:])
    return ParsedReply("".join(kept).strip(), calls)


def _parse_llama3(content: str) -> ParsedReply:
    text = content.strip()
    if text.startswith("<|python_tag|>"):
        text = text[len("<|python_tag|>"):].strip()
    if not text.startswith("{"):
        return ParsedReply(content)
    calls = []
    for part in _split_top_level(text, ";"):
        calls.append(_call_from_json(part, part, ("parameters", "arguments")))
    return ParsedReply("", calls)


def _parse_mistral(content: str) -> ParsedReply:
    at = content.find("[TOOL_CALLS]")
    if at < 0:
        return ParsedReply(content)
    before, body = content[:at], content[at + len("[TOOL_CALLS]"):]
    raw = content[at:]
    calls: list[ToolCall] = []
    if body.lstrip().startswith("["):
        try:
            items = json.loads(body.strip())
        except json.JSONDecodeError as exc:
            return ParsedReply(before.strip(), [_malformed(raw, f"the call list is not valid JSON ({exc.msg})")])
        if not isinstance(items, list):
            return ParsedReply(before.strip(), [_malformed(raw, "[TOOL_CALLS] must be followed by a JSON list")])
        for item in items:
            calls.append(_call_from_json(raw, json.dumps(item, ensure_ascii=False), ("arguments", "parameters")))
        return ParsedReply(before.strip(), calls)
    for chunk in body.split("[TOOL_CALLS]"):  # newer form: name[ARGS]{...}, repeated
        name, sep, args = chunk.partition("[ARGS]")
        piece = "[TOOL_CALLS]" + chunk
        if not sep:
            calls.append(_malformed(piece, "expected [TOOL_CALLS]name[ARGS]{...}"))
            continue
        calls.append(_call_from_parts(piece, name.strip(), args.strip()))
    return ParsedReply(before.strip(), calls)


def _call_from_json(raw: str, body: str, argument_keys: tuple[str, ...]) -> ToolCall:
    try:
        value = json.loads(body.strip())
    except json.JSONDecodeError as exc:
        return _malformed(raw, f"the call is not valid JSON ({exc.msg} at character {exc.pos})")
    if not isinstance(value, dict):
        return _malformed(raw, "the call must be a JSON object with \"name\" and \"arguments\"")
    name = value.get("name")
    if not isinstance(name, str) or not name:
        return _malformed(raw, "the call has no \"name\"")
    key = next((k for k in argument_keys if k in value), None)
    arguments = value.get(key, {}) if key else {}
    return _checked(raw, name, arguments)


def _call_from_parts(raw: str, name: str, arguments_text: str) -> ToolCall:
    if not name:
        return _malformed(raw, "the call has no name")
    try:
        arguments = json.loads(arguments_text) if arguments_text else {}
    except json.JSONDecodeError as exc:
        return _malformed(raw, f"the arguments are not valid JSON ({exc.msg})")
    return _checked(raw, name, arguments)


def _checked(raw: str, name: str, arguments: Any) -> ToolCall:
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return _malformed(raw, "the arguments are a string that is not a JSON object", name)
    if not isinstance(arguments, dict):
        return _malformed(raw, "the arguments must be a JSON object", name)
    return ToolCall(new_call_id(), name, arguments, raw)


def _malformed(raw: str, why: str, name: str = "") -> ToolCall:
    return ToolCall(new_call_id(), name, {}, raw, error=f"malformed tool call: {why}")


def _split_top_level(text: str, separator: str) -> list[str]:
    """``text`` split at ``separator`` outside JSON strings and brackets."""
    parts, depth, start, in_string, escaped = [], 0, 0, False, False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        elif ch == separator and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in (p.strip() for p in parts) if p]
