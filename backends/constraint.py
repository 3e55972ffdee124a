"""Replies a program can parse: a JSON Schema, a regex or a grammar enforced while the ids are sampled.

The grammar engine is llguidance (the library llama.cpp, vLLM and SGLang integrate; why it and not
xgrammar: docs/structured.md).  It works on token byte strings, so it is built here from tokchat's own
vocabulary (:meth:`tokenizer.core.Tokenizer.token_bytes`), never from a Hugging Face tokenizer: the ids
it allows are exactly the ids the engine samples.

Three steps, in three places:

* :func:`parse_constraint` (the chat's process, before any engine work): the user's text becomes an
  :class:`backends.base.OutputConstraint`, or one :class:`ConstraintError` line naming what is wrong or
  unsupported (bad JSON, a schema the engine cannot compile, an empty regex, a grammar syntax error, a
  source over :data:`MAX_SOURCE_BYTES`, a ``$ref`` that refers only to itself);
* :class:`GrammarVocabulary` and :class:`ConstrainedReply` (the engine's process): the vocabulary built
  once per model and stop set, and one matcher per reply: :meth:`ConstrainedReply.mask_logits` sets the
  refused ids' logits to -inf before the sampler picks, :meth:`~ConstrainedReply.advance` takes the id
  chosen, :meth:`~ConstrainedReply.cut_draft` cuts a speculative draft at its first refused id;
* :func:`check_reply` (the chat's process, after the reply): the text checked again, a JSON Schema with
  the ``jsonschema`` package, so a remote server's reply is judged too.

A thinking model's think block is left free and the constraint holds the answer after it (as vLLM's
reasoning parsers do), by the rules :class:`tokenizer.think.ThinkFilter` files reasoning with: the reply
starts inside the block when the prompt left ``<think>`` open, and may open one itself when the vocabulary
has ``<think>`` as one special id (:meth:`GrammarVocabulary.think_state`); :func:`answer_after_think`
is the grammar.  The ids a reply already holds (a continuation, the ids after a reasoning budget closed
the block: ``SamplingParams.generated_ids``) are replayed through the matcher first
(:meth:`ConstrainedReply.follow`), so the format holds from where the reply stopped, or the reply is
refused in one line when what it holds already breaks it.

The masks apply in llama.cpp's chain (:mod:`backends.llama_sampler`) and in the NumPy chain MLX uses
(:mod:`backends.mlx`); OpenVINO exposes no logits (:func:`refuse_format`).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Collection, Sequence

from backends.base import OutputConstraint

if TYPE_CHECKING:
    from tokenizer.protocol import Tokenizer

#: the kinds of constraint, as ``OutputConstraint.kind`` spells them
KINDS = ("json", "json_schema", "regex", "grammar", "tool_calls")
#: the largest schema, regex or grammar accepted (a larger one is refused before it is parsed)
MAX_SOURCE_BYTES = 1 << 20
#: the schema ``--json`` means: any JSON value
ANY_JSON = "{}"
#: a think block's tags, as :class:`tokenizer.think.ThinkFilter` reads them
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


class ConstraintError(ValueError):
    """A constraint that cannot be used; the message is one line saying what and why."""


def _one_line(text: str, limit: int = 300) -> str:
    """llguidance's (multi-line, caret-drawing) error text as one line."""
    line = " ".join(part.strip() for part in str(text).splitlines() if part.strip() and set(part.strip()) != {"^"})
    return line if len(line) <= limit else line[: limit - 1] + "…"


def describe(constraint: OutputConstraint | None) -> str:
    """How ``--stats``, the model bar and notices name a constraint: ``json schema``, ``regex /[0-9]+/``."""
    if constraint is None:
        return ""
    if constraint.kind == "json":
        return "json"
    if constraint.kind == "json_schema":
        return "json schema"
    if constraint.kind == "tool_calls":
        return "tool arguments"
    if constraint.kind == "regex":
        shown = constraint.source if len(constraint.source) <= 24 else constraint.source[:23] + "…"
        return f"regex /{shown}/"
    return "grammar (gbnf)" if is_gbnf(constraint.source) else "grammar (lark)"


def is_gbnf(grammar: str) -> bool:
    """Whether a grammar is llama.cpp's GBNF (``root ::= ...``) rather than Lark (``start: ...``)."""
    return "::=" in grammar


# -- checking what the user gave, before any engine work ---------------------------------------------------

def parse_constraint(kind: str, source: str = "") -> OutputConstraint:
    """The constraint for ``kind`` ("json", "json_schema", "regex", "grammar") and its text, checked whole.

    Raises :class:`ConstraintError` (one line) for anything the engine would refuse or that could match
    nothing; nothing is compiled against a vocabulary here, so it is quick and needs no model.
    """
    if kind not in KINDS:
        raise ConstraintError(f"unknown constraint kind {kind!r}: one of {', '.join(KINDS)}")
    if kind == "json":
        source = ANY_JSON
    size = len(source.encode("utf-8", "surrogatepass"))
    what = {"json_schema": "JSON Schema", "regex": "regex", "grammar": "grammar", "json": "schema",
            "tool_calls": "tools' input schemas"}[kind]
    if size > MAX_SOURCE_BYTES:
        raise ConstraintError(f"the {what} is {size / (1 << 20):.1f} MB: the most accepted is "
                              f"{MAX_SOURCE_BYTES >> 20} MB")
    if kind == "regex" and not source:
        raise ConstraintError("the regex is empty: it would allow only an empty reply; give a pattern")
    if kind == "grammar" and not source.strip():
        raise ConstraintError("the grammar is empty: give a Lark (start: ...) or GBNF (root ::= ...) grammar")
    if kind == "json_schema":
        source = _checked_schema(source)
    constraint = OutputConstraint(kind, source)
    grammar = grammar_text(constraint)
    from llguidance import LLMatcher

    error = LLMatcher.validate_grammar(grammar)
    if error:
        raise ConstraintError(f"the {what} cannot be used: {_one_line(error)}")
    return constraint


def _checked_schema(source: str) -> str:
    """The schema's text once it parsed as JSON, is a valid JSON Schema and has no ``$ref`` loop."""
    try:
        schema = json.loads(source)
    except ValueError as exc:
        raise ConstraintError(f"the JSON Schema is not JSON: {exc}") from exc
    if not isinstance(schema, (dict, bool)):
        raise ConstraintError(f"a JSON Schema is an object (or true/false), not a JSON {type(schema).__name__}")
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for

    try:
        # types-jsonschema types a schema as a dict; true and false are schemas too, and jsonschema takes them
        validator_for(schema).check_schema(schema)  # type: ignore[arg-type]
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path) or "the top level"
        raise ConstraintError(f"the JSON Schema is not valid at {where}: {_one_line(exc.message)}") from exc
    if isinstance(schema, dict):
        _refuse_ref_loops(schema)
    return source


def _resolve_pointer(schema: Any, ref: str) -> Any:
    """The part of ``schema`` a local ``$ref`` ("#/definitions/a") points at; None if not local or absent."""
    if not ref.startswith("#"):
        return None
    node = schema
    for part in ref[1:].split("/")[1:] if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _refuse_ref_loops(schema: dict[str, Any]) -> None:
    """Refuse a ``$ref`` that leads back to itself through nothing but other ``$ref``s and combinators.

    A recursive schema that nests (a tree whose children are trees) is fine: each level is a value
    inside an object or array.  A ``$ref`` whose target is itself a ``$ref`` (or an ``anyOf``/``allOf``/
    ``oneOf`` of them) back to the first describes no value at all, and llguidance accepts it silently.
    """

    def bare_refs(node: Any) -> list[str]:
        # the refs a node stands for directly, with no object or array around them
        if not isinstance(node, dict):
            return []
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        for key in ("anyOf", "allOf", "oneOf"):
            for sub in node.get(key) or []:
                found += bare_refs(sub)
        return found

    def walk(ref: str, trail: tuple[str, ...]) -> None:
        if ref in trail:
            loop = " -> ".join(trail[trail.index(ref):] + (ref,))
            raise ConstraintError(f"the JSON Schema's $ref loops with no value in between ({loop}): "
                                  "recursion must go through an object property or array item")
        target = _resolve_pointer(schema, ref)
        for inner in bare_refs(target):
            walk(inner, trail + (ref,))

    seen: set[str] = set()

    def refs_anywhere(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                seen.add(node["$ref"])
            for value in node.values():
                refs_anywhere(value)
        elif isinstance(node, list):
            for value in node:
                refs_anywhere(value)

    refs_anywhere(schema)
    for ref in sorted(seen):
        walk(ref, ())


def grammar_text(constraint: OutputConstraint) -> str:
    """The constraint as an llguidance grammar (JSON text llguidance's matcher reads)."""
    from llguidance import LLMatcher, grammar_from

    kind = constraint.kind
    try:
        if kind == "tool_calls":
            return LLMatcher.grammar_from_lark(tool_calls_lark(json.loads(constraint.source)))
        if kind in ("json", "json_schema"):
            return LLMatcher.grammar_from_json_schema(constraint.source or ANY_JSON)
        if kind == "regex":
            return LLMatcher.grammar_from_regex(constraint.source)
        return grammar_from("gbnf" if is_gbnf(constraint.source) else "lark", constraint.source)
    except ValueError as exc:
        raise ConstraintError(f"the {kind.replace('_', ' ')} cannot be used: {_one_line(str(exc))}") from exc


def tool_calls_source(open_marker: str, close_marker: str, special: bool,
                      tools: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """The ``source`` of a "tool_calls" constraint: free text, and every call between ``open_marker`` and
    ``close_marker`` (Hermes/Qwen: ``<tool_call>`` ... ``</tool_call>``) a JSON object ``{"name": NAME,
    "arguments": ...}`` whose arguments match that tool's input schema.  ``special``: the markers are single
    special ids (named as such in the grammar, as the call parser reads them); ``tools``: (name, schema)."""
    return json.dumps({"open": open_marker, "close": close_marker, "special": special,
                       "tools": [{"name": name, "schema": schema or {"type": "object"}} for name, schema in tools]})


def tool_calls_lark(spec: dict[str, Any]) -> str:
    """The Lark grammar of a "tool_calls" constraint (:func:`tool_calls_source`): llguidance's structural
    tags in a form of tokchat's, a call's JSON held to ``anyOf`` the tools' ``{"name", "arguments"}``, in
    its markers or bare (the whole reply one call, as :func:`app.tools.calls.parse_reply` reads one)."""
    calls = {"anyOf": [{"type": "object", "properties": {"name": {"const": tool["name"]}, "arguments": tool["schema"]},
                        "required": ["name", "arguments"], "additionalProperties": False} for tool in spec["tools"]]}
    body = f"NL? %json {json.dumps(calls)} NL?"
    if spec["special"]:
        call = f"call: TEXT {spec['open']} {body} {spec['close']}"
    else:
        call = f"call_open[lazy]: TEXT {json.dumps(spec['open'])}\ncall: call_open {body} {json.dumps(spec['close'])}"
    # a small model often writes its call bare (a JSON object, or one in a ```json fence), which the call
    # parser takes too: held the same way; so text may not open with "{" or "`" (it would be a free call)
    bare = f'bare: ("```json" NL?)? %json {json.dumps(calls)} (NL? "```")? NL?'
    return "\n".join(["%llguidance {}", "start: call* TEXT | bare", call, bare, r"TEXT: /([^{`](.|\n)*)?/",
                       r"NL: /[ \t\r\n]+/", ""])


def answer_after_think(answer: str, *, opened: bool, special_tags: bool) -> str:
    """The grammar of a reply whose think block is free and whose answer (after it) is held to ``answer``.

    ``answer``: what :func:`grammar_text` gives (llguidance JSON or Lark text).  ``opened``: the prompt
    left the block open, so the reply starts inside it and must close it; otherwise the block is
    optional and must come first.  ``special_tags``: the tags are single special ids (``<think>`` names
    the id in Lark); otherwise they are text and the block ends at the first ``</think>`` (a lazy
    lexeme).  The newlines after the close are free too, as the think filter drops them from the answer.
    The reply cannot end inside the block: it is not a match until the answer is.
    """
    parsed = json.loads(answer) if answer.lstrip().startswith("{") else {"grammars": [{"lark_grammar": answer}]}
    sides = [dict(g) for g in parsed["grammars"]]
    sides[0]["name"] = "answer"
    if special_tags:
        think_rule = f"think: THINK_TEXT {THINK_CLOSE}"
        opener = THINK_OPEN
    else:
        think_rule = f"think[lazy]: THINK_TEXT {json.dumps(THINK_CLOSE)}"
        opener = json.dumps(THINK_OPEN)
    start = "start: think NL? @answer" if opened else f"start: ({opener} think NL?)? @answer"
    lark = "\n".join(["%llguidance {}", start, think_rule, r"THINK_TEXT: /(.|\n)*/", r"NL: /[\r\n]+/", ""])
    return json.dumps({"grammars": [{"name": "reply", "lark_grammar": lark}, *sides]})


# -- the engine's side: one vocabulary per model, one matcher per reply -------------------------------------

class GrammarVocabulary:
    """llguidance's view of one model's vocabulary: every id's bytes, the ids that end a reply.

    Built from tokchat's tokenizer (about a second for a 150k vocabulary); an engine keeps one per
    stop set.  Control tokens (``<|im_end|>``) are marked special (llguidance's ``\\xff`` prefix),
    so a grammar never spells one out; the stop ids are what a finished reply may end with.
    """

    def __init__(self, tokenizer: Tokenizer, stop_ids: Collection[int], n_vocab: int | None = None) -> None:
        import llguidance
        from tokenizer.core import ATTR_CONTROL, ATTR_USER_DEFINED

        size = tokenizer.vocab_size
        pieces: list[bytes] = []
        for tid in range(size):
            data = tokenizer.token_bytes(tid)
            attr = tokenizer.token_attr(tid)
            # as llama.cpp's own llguidance glue marks them: every control token, and user-defined ones that
            # look like one (<think>); a word a vocabulary added as user-defined stays plain text
            if attr & ATTR_CONTROL or (attr & ATTR_USER_DEFINED and data.startswith(b"<") and data.endswith(b">")):
                data = b"\xff" + data
            pieces.append(data)
        stops = sorted(int(t) for t in stop_ids) or [t for t in (tokenizer.eos_id,) if t is not None]
        if not stops:
            raise ConstraintError("a constrained reply needs an end-of-reply id, and this model has none")

        class _Source:  # what llguidance.TokenizerWrapper reads
            eos_token_id = stops[0]
            bos_token_id = tokenizer.bos_id
            tokens = pieces
            special_token_ids = [t for t in range(size) if tokenizer.is_special(t)]

            def __call__(self, text: str | bytes) -> list[int]:
                if isinstance(text, bytes):
                    text = text.decode("utf-8", "replace")
                return tokenizer.encode(text)

        self.n_vocab = max(n_vocab or size, size)
        self.stop_ids = frozenset(stops)
        self.tokenizer = tokenizer
        #: whether both think tags are one special id each (Qwen3, R1): a reply may then open a block itself
        self.special_think = all(
            len(ids := tokenizer.encode(tag, special=True)) == 1 and pieces[ids[0]].startswith(b"\xff")
            for tag in (THINK_OPEN, THINK_CLOSE))
        self.lltokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Source()), n_vocab=self.n_vocab,
                                                  eos_token=stops)

    def start(self, constraint: OutputConstraint) -> ConstrainedReply:
        """A fresh matcher for one reply (compiling the grammar: milliseconds for most schemas)."""
        return ConstrainedReply(self, constraint)

    def think_state(self, prompt: Sequence[int]) -> str:
        """How a reply after ``prompt`` may think: "open" (the prompt left ``<think>`` open, as
        :meth:`tokenizer.think.ThinkFilter.for_prompt` reads a prompt), "optional" (the vocabulary has the
        tags as special ids: the model may open a block itself), "" (no think block: the answer is all)."""
        tail = self.tokenizer.decode(list(prompt[-8:])) if len(prompt) else ""
        if tail.rstrip().endswith(THINK_OPEN):
            return "open"
        return "optional" if self.special_think else ""


@dataclass
class MaskTimer:
    """Time spent computing and applying masks in one reply (``--stats`` ``mask_ms``)."""

    seconds: float = 0.0
    steps: int = 0


class ConstrainedReply:
    """One reply held to one constraint: the mask before each pick, the id picked after it."""

    def __init__(self, vocab: GrammarVocabulary, constraint: OutputConstraint) -> None:
        import llguidance
        import numpy as np
        from llguidance.numpy import allocate_token_bitmask

        self.constraint = constraint
        self.vocab = vocab
        self.timer = MaskTimer()
        self._np = np
        self._matcher = llguidance.LLMatcher(vocab.lltokenizer, grammar_text(constraint), log_level=0)
        if self._matcher.is_error():
            raise ConstraintError(f"the {constraint.kind.replace('_', ' ')} cannot be used: "
                                  f"{_one_line(self._matcher.get_error())}")
        self._bitmask = allocate_token_bitmask(1, vocab.n_vocab)
        #: how the reply may think ("open", "optional", ""), set by :meth:`follow`
        self.think = ""

    def follow(self, context: Sequence[int], generated: int = 0) -> None:
        """Place the matcher where the reply starts: after ``context``, whose last ``generated`` ids the
        model already generated for this reply (a continuation, or the ids before and the ids that closed
        a think block a reasoning budget cut).  A reply that may think gets the grammar whose think block
        is free (:func:`answer_after_think`); the generated ids are then taken as if sampled.  Raises
        BackendError (one line) when they already break the constraint: the reply cannot be held from there.
        """
        import llguidance

        from backends.base import BackendError

        generated = max(0, min(int(generated), len(context)))
        head, done = list(context[: len(context) - generated]), list(context[len(context) - generated:])
        self.think = self.vocab.think_state(head)
        if self.think:
            grammar = answer_after_think(grammar_text(self.constraint), opened=self.think == "open",
                                         special_tags=self.vocab.special_think)
            self._matcher = llguidance.LLMatcher(self.vocab.lltokenizer, grammar, log_level=0)
            if self._matcher.is_error():
                raise BackendError(f"the {describe(self.constraint)} cannot be used after a think block: "
                                   f"{_one_line(self._matcher.get_error())}")
        if not done:
            return
        taken = self._matcher.validate_tokens(done)
        if taken < len(done):
            text = self.vocab.tokenizer.decode(done[: taken + 1])
            raise BackendError(f"the reply being continued already breaks the {describe(self.constraint)} "
                               f"at {text[-40:]!r}: it cannot be held from there; turn the format off to continue "
                               "it, or ask again")
        for token in done:
            self._matcher.consume_token(token)

    def allowed(self) -> Any:
        """A NumPy bool array over the vocabulary: True where the next id may be that id."""
        started = time.perf_counter()
        bits = self._bits()
        self.timer.seconds += time.perf_counter() - started
        return bits

    def _bits(self) -> Any:
        np = self._np
        self._matcher.unsafe_compute_mask_ptr(self._bitmask.ctypes.data, self._bitmask.nbytes)
        return np.unpackbits(self._bitmask.view(np.uint8), bitorder="little")[: self.vocab.n_vocab].view(bool)

    def mask_logits(self, logits: Any) -> None:
        """Set the logits of every id the constraint refuses here to -inf, in place (``logits``: 1-D, n_vocab)."""
        np = self._np
        started = time.perf_counter()
        allowed = self._bits()
        n = min(len(logits), len(allowed))
        np.putmask(logits[:n], ~allowed[:n], -np.inf)
        if len(logits) > n:
            logits[n:] = -np.inf
        self.timer.seconds += time.perf_counter() - started
        self.timer.steps += 1

    def advance(self, token: int) -> None:
        """Take the id the sampler picked; an id the matcher refuses is a fault of tokchat's (it was masked)."""
        if not self._matcher.consume_token(int(token)):
            from backends.base import BackendError

            raise BackendError(f"the constraint refused id {token} after masking: "
                               f"{_one_line(self._matcher.get_error()) or 'no reason given'}")

    def cut_draft(self, draft: Sequence[int]) -> list[int]:
        """The longest start of a speculative ``draft`` the constraint allows from here (nothing consumed)."""
        if not draft:
            return []
        return list(draft[: self._matcher.validate_tokens([int(t) for t in draft])])

    @property
    def complete(self) -> bool:
        """Whether what was taken so far is a whole match (the reply may end here)."""
        return self._matcher.is_accepting()


@dataclass
class VocabularyCache:
    """An engine's :class:`GrammarVocabulary` per stop set: built on the first constrained reply, kept."""

    tokenizer_loader: Any
    n_vocab: int | None = None
    _built: dict[frozenset[int], GrammarVocabulary] = field(default_factory=dict)

    def get(self, stop_ids: Collection[int]) -> GrammarVocabulary:
        key = frozenset(int(t) for t in stop_ids)
        vocab = self._built.get(key)
        if vocab is None:
            vocab = self._built[key] = GrammarVocabulary(self.tokenizer_loader(), key, self.n_vocab)
        return vocab


# -- the chat's side, after the reply -------------------------------------------------------------------------

def check_reply(constraint: OutputConstraint, text: str) -> str | None:
    """None when ``text`` matches ``constraint``, else one line saying where it does not.

    A JSON Schema is checked with the ``jsonschema`` package (independent of the engine that enforced
    it); a regex with the ``regex`` package; a grammar is not checked again here, nor tool calls (the
    tool loop's parser judges those).
    """
    if constraint.kind in ("json", "json_schema"):
        try:
            value = json.loads(text)
        except ValueError as exc:
            return f"the reply is not JSON: {exc}"
        if constraint.kind == "json":
            return None
        from jsonschema import ValidationError
        from jsonschema.validators import validator_for

        schema = json.loads(constraint.source)
        try:
            validator_for(schema)(schema).validate(value)
        except ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "the top level"
            return f"the reply does not match the schema at {where}: {_one_line(exc.message, 200)}"
        return None
    if constraint.kind == "regex":
        import regex

        try:
            matched = regex.fullmatch(constraint.source, text)
        except regex.error:
            return None  # a Rust-only construct the engine read: its own check stands
        return None if matched else f"the reply does not match the regex /{constraint.source}/"
    return None


def refuse_format(engine: str, why: str) -> None:
    """Raise the one line an engine that cannot hold a reply format gives (OpenVINO: no logits to mask)."""
    from backends.base import BackendError

    raise BackendError(f"{engine} cannot hold a reply to a format ({why}): use the llama.cpp backend "
                       "(--backend cpu) or a server for --json / --json-schema / --regex / --grammar")


def server_fields(constraint: OutputConstraint | None, server: str) -> dict[str, Any]:
    """The request fields that carry ``constraint`` to a server of kind ``server`` ("llamacpp", "vllm",
    "sglang"); {} without one.  A constraint the server's API cannot take is a BackendError (one line).

    llama-server: ``json_schema`` (it converts the schema to GBNF itself) or ``grammar`` (GBNF only: a
    Lark grammar needs a server built with llguidance, which tokchat cannot see); vLLM:
    ``structured_outputs`` (``json``, ``regex``, ``grammar``); SGLang: ``json_schema``, ``regex``, ``ebnf``.
    """
    if constraint is None:
        return {}
    from backends.base import BackendError

    kind, source = constraint.kind, constraint.source or ANY_JSON
    if kind == "tool_calls":
        return {}  # a server gets the tools' schemas in its own tools field; tokchat's parser judges the calls
    if server == "llamacpp":
        if kind in ("json", "json_schema"):
            return {"json_schema": json.loads(source)}
        if kind == "grammar" and is_gbnf(source):
            return {"grammar": source}
        what = "regex" if kind == "regex" else "Lark grammar"
        raise BackendError(f"llama-server takes no {what}: give it as a GBNF --grammar (root ::= ...), or run "
                           "the model locally (--model without --server)")
    if server == "vllm":
        field_name = {"json": "json", "json_schema": "json", "regex": "regex", "grammar": "grammar"}[kind]
        value: Any = json.loads(source) if kind in ("json", "json_schema") else source
        return {"structured_outputs": {field_name: value}}
    if server == "sglang":
        if kind in ("json", "json_schema"):
            return {"json_schema": source}
        return {"regex": source} if kind == "regex" else {"ebnf": source}
    raise BackendError(f"a {server} server takes no reply format from tokchat")


def reply_verdict(constraint: OutputConstraint, text: str, finish_reason: str, where: str = "") -> str | None:
    """One line for the user about a finished constrained reply, None when it matches.

    A reply cut by ``max_tokens`` is incomplete whatever its text (finish reason ``length``); a
    cancelled or failed one is said elsewhere; a finished one is checked by :func:`check_reply`.
    ``where``: the server that generated it ("" for the local engine).
    """
    if finish_reason == "length":
        return (f"the reply was cut by --max-tokens inside the {describe(constraint)} value: it is incomplete "
                "(finish reason length); a larger --max-tokens lets it finish")
    if finish_reason != "stop":
        return None
    problem = check_reply(constraint, text)
    if problem is None:
        return None
    return f"the reply from {where} does not conform: {problem}" if where else problem


__all__ = ["ConstraintError", "ConstrainedReply", "GrammarVocabulary", "VocabularyCache", "check_reply",
           "answer_after_think", "describe", "tool_calls_lark", "tool_calls_source", "grammar_text", "is_gbnf", "parse_constraint", "refuse_format", "reply_verdict", "server_fields", "KINDS", "MAX_SOURCE_BYTES"]
