"""Render untrusted chat templates: Jinja's immutable sandbox plus time and size limits.

A chat template travels inside the model file, so it is untrusted code.
Jinja's :class:`ImmutableSandboxedEnvironment` already refuses attribute
access such as ``__class__``/``__subclasses__``, has no loader (so no
``include`` of files) and cannot mutate lists or dicts.  What it does not
stop is a template that loops for an hour or builds a string of a billion
characters.  This module adds a per-render :class:`_Budget` that every loop
iteration, call, filter, ``+``/``*``/``%``/``~`` operation and output chunk
goes through:

* a wall-clock deadline and an iteration cap (checked on every ``for``
  iteration, which a source transform wraps in a guard filter);
* a size cap on every intermediate string or list, checked *before* the
  allocation where it can be predicted (``'x' * n``, ``center(n)``,
  ``replace``) and after it otherwise (``~`` and ``+`` at most double);
* a cap on the total text produced, including ``{% set %}`` blocks;
* a cap on integer arguments to calls and filters.

The variables mirror what Hugging Face's ``apply_chat_template`` passes
(``trim_blocks``/``lstrip_blocks``, ``loopcontrols``, the ``{% generation %}``
tag as a no-op, ``raise_exception``, ``strftime_now`` and a ``tojson`` that
keeps non-ASCII).  Non-goal: sandboxing templates from code we trust less
than the model file (there is nothing less trusted).
"""
from __future__ import annotations

import functools
import json
import re
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Iterator

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer


class TemplateError(Exception):
    """A chat template cannot be used; the message is one line for the user."""


class _LimitExceeded(jinja2.TemplateError):
    """A render went over a :class:`RenderLimits` bound (raised inside Jinja)."""


class _TemplateRaised(jinja2.TemplateError):
    """The template itself called ``raise_exception(message)``."""


@dataclass(frozen=True)
class RenderLimits:
    """Bounds on one render; real chat templates stay far below all of them."""

    time_s: float = 1.0
    #: longest string or list a template may build, and the most text it may output
    max_chars: int = 4_000_000
    #: total ``for`` iterations in one render
    max_iterations: int = 2_000_000
    #: largest integer passed to a call or filter (``center(10**9)``)
    max_int_arg: int = 1_000_000


#: how many times ``max_chars`` a render may allocate in all, counting temporaries
_ALLOCATION_FACTOR = 16
#: largest integer (in bits) ``*`` and ``**`` may build: big-int arithmetic is one uninterruptible C call
_MAX_INT_BITS = 1 << 16
#: most paragraphs ``lipsum()`` may write (each call is one uninterruptible loop)
_MAX_LIPSUM = 100
_WIDTH_IN_FORMAT = re.compile(r"\d{7,}")  # a format width of a million or more
_PADDING_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})


class _Budget:
    """What one render has spent; every guard calls into it."""

    def __init__(self, limits: RenderLimits) -> None:
        self.limits = limits
        self.deadline = time.monotonic() + limits.time_s
        self.iterations = 0
        self.output = 0
        self.allocated = 0

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise _LimitExceeded(f"rendering took longer than {self.limits.time_s:g} s")

    def size(self, value: Any) -> Any:
        if isinstance(value, (str, list, tuple)):
            if len(value) > self.limits.max_chars:
                raise _LimitExceeded(f"the template built a value over {self.limits.max_chars} items")
            # Many values under the cap can still add up (a list of big strings, mapped):
            # count everything built, not only what is kept.
            self.allocated += len(value)
            if self.allocated > self.limits.max_chars * _ALLOCATION_FACTOR:
                raise _LimitExceeded("the template built too much text")
        return value

    def emit(self, value: Any) -> Any:
        self.output += len(str(value))
        if self.output > self.limits.max_chars:
            raise _LimitExceeded(f"the template output more than {self.limits.max_chars} characters")
        return self.size(value)


class _GuardedEnvironment(ImmutableSandboxedEnvironment):
    """The immutable sandbox, with every expensive operation routed through the budget."""

    intercepted_binops = frozenset({"+", "*", "%", "**", "//"})

    def __init__(self, limits: RenderLimits) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True,
                         extensions=[loopcontrols, _GenerationTag])
        self.limits = limits
        self._local = threading.local()
        self.filters = {name: self._guard_filter(f) for name, f in self.filters.items()}
        self.filters["tojson"] = self._guard_filter(_tojson)
        self.filters["tokchat_guard_iter"] = _guard_iter_filter
        self.filters["tokchat_guard_size"] = _guard_size_filter
        self.filters["tokchat_guard_output"] = _guard_output_filter
        self.globals["range"] = self._range
        self.globals["lipsum"] = _bounded_lipsum

    # -- the current render's budget -------------------------------------------------------

    @property
    def budget(self) -> _Budget | None:
        return getattr(self._local, "budget", None)

    def _check_args(self, args: Iterable[Any]) -> None:
        for arg in args:
            if isinstance(arg, int) and not isinstance(arg, bool) and abs(arg) > self.limits.max_int_arg:
                raise _LimitExceeded(f"argument {arg} is over the limit of {self.limits.max_int_arg}")
            if isinstance(arg, str) and len(arg) > self.limits.max_chars:
                raise _LimitExceeded("a string argument is over the size limit")
            _check_weight(self.limits, arg)

    def _spend(self, result: Any) -> Any:
        budget = self.budget
        if budget is not None:
            budget.tick()
            budget.size(result)
        elif isinstance(result, (str, list, tuple)) and len(result) > self.limits.max_chars:
            raise _LimitExceeded("the template built a value over the size limit")
        return result

    # -- hooks Jinja calls ---------------------------------------------------------------

    def _guard_filter(self, func: Any) -> Any:
        @functools.wraps(func)  # keeps jinja_pass_arg, so context-taking filters still get it
        def guarded(*args: Any, **kwargs: Any) -> Any:
            self._check_args(args)
            self._check_args(kwargs.values())
            if func.__name__ in ("do_replace", "sync_do_replace"):
                _check_replace(self.limits, *[a for a in args if isinstance(a, str)][:3])
            if func.__name__ in ("do_join", "sync_do_join") and len(args) >= 2:
                _check_join(self.limits, args[1], args[2] if len(args) > 2 else kwargs.get("d", ""))
            if func.__name__ == "do_format" and args and _WIDTH_IN_FORMAT.search(str(args[0])):
                raise _LimitExceeded("format width over the limit")
            if func.__name__ == "do_wordwrap" and len(args) > 1 and len(str(args[1])) > self.limits.max_chars // 40:
                raise _LimitExceeded("wordwrap input over the size limit")  # one slow call, no ticks inside
            if func.__name__ == "do_indent" and args:
                _check_indent(self.limits, args[0], args[1] if len(args) > 1 else kwargs.get("width", 4))
            return self._spend(func(*args, **kwargs))

        return guarded

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        __self._check_args(args)
        __self._check_args(kwargs.values())
        receiver = getattr(__obj, "__self__", None)
        name = getattr(__obj, "__name__", "")
        if isinstance(receiver, str):
            if name in _PADDING_METHODS:
                _check_padding(__self.limits, receiver, name, args)
            if name == "join" and args:
                _check_join(__self.limits, args[0], receiver)
            if name == "replace" and len(args) >= 2:
                _check_replace(__self.limits, receiver, args[0], args[1])
        return __self._spend(super().call(__context, __obj, *args, **kwargs))

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        # Jinja returns an Undefined that prints as ""; a template that reaches for
        # __globals__ or __class__ is hostile, so refuse it outright.
        raise jinja2.exceptions.SecurityError(
            f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe")

    def wrap_str_format(self, value: Any) -> Any:
        wrapped = super().wrap_str_format(value)
        if wrapped is not None and _WIDTH_IN_FORMAT.search(value.__self__):
            raise _LimitExceeded("format width over the limit")
        return wrapped

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        budget = self.budget
        if budget is not None:
            budget.tick()
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                    if len(seq) * max(n, 0) > self.limits.max_chars:
                        raise _LimitExceeded("the template multiplied a value past the size limit")
        elif operator == "**" and isinstance(right, (int, float)) and abs(right) > 64:
            raise _LimitExceeded("exponent over the limit")
        elif operator == "%" and isinstance(left, str) and _WIDTH_IN_FORMAT.search(left):
            raise _LimitExceeded("format width over the limit")
        if operator in ("*", "**") and _is_int(left) and _is_int(right):
            bits = left.bit_length() + right.bit_length() if operator == "*" else left.bit_length() * max(right, 0)
            if bits > _MAX_INT_BITS:
                raise _LimitExceeded("the template built an integer past the size limit")
        if operator in ("+", "%"):
            _check_weight(self.limits, left)
            _check_weight(self.limits, right)
        return self._spend(self.binop_table[operator](left, right))

    def _range(self, *args: int) -> Iterator[int]:
        self._check_args(args)
        return iter(range(*args))

    # -- the source transform ----------------------------------------------------------------

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        return _GuardTransformer().visit(super()._parse(source, name, filename))


class _GuardTransformer(NodeTransformer):
    """Wraps every ``for`` iterable, ``~`` concatenation and output in a guard filter."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = nodes.Filter(node.iter, "tokchat_guard_iter", [], [], None, None, lineno=node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        # each operand is weighed before ``~`` turns it into text (a shared-reference bomb)
        node.nodes = [nodes.Filter(child, "tokchat_guard_size", [], [], None, None, lineno=node.lineno)
                      for child in node.nodes]
        return nodes.Filter(node, "tokchat_guard_size", [], [], None, None, lineno=node.lineno)

    def visit_Output(self, node: nodes.Output) -> nodes.Node:
        self.generic_visit(node)
        # literal text counts too: a loop can repeat it, and a template can be megabytes of it
        node.nodes = [nodes.Filter(child, "tokchat_guard_output", [], [], None, None, lineno=node.lineno)
                      for child in node.nodes]
        return node


@jinja2.pass_environment
def _guard_iter_filter(env: _GuardedEnvironment, iterable: Any) -> Iterator[Any]:
    budget = env.budget
    for item in iterable:
        if budget is not None:
            budget.iterations += 1
            if budget.iterations > budget.limits.max_iterations:
                raise _LimitExceeded("the template looped too many times")
            budget.tick()
        yield item


@jinja2.pass_environment
def _guard_size_filter(env: _GuardedEnvironment, value: Any) -> Any:
    _check_weight(env.limits, value)
    return env._spend(value)


@jinja2.pass_environment
def _guard_output_filter(env: _GuardedEnvironment, value: Any) -> Any:
    """Counts everything written, also into ``{% set %}`` blocks and macro bodies."""
    _check_weight(env.limits, value)
    budget = env.budget
    if budget is None:
        return env._spend(value)
    budget.tick()
    return budget.emit(value)


_CONTAINERS = (dict, list, tuple, set, frozenset, jinja2.utils.Namespace)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_weight(limits: RenderLimits, value: Any) -> None:
    """Refuse a container whose text form would be huge, before anything turns it into text.

    ``dict(a=d, b=d)`` forty times over is forty small objects that print as
    2**40 leaves: shared references count every time they are reached, as
    ``str`` and ``tojson`` would reach them, but each object is weighed once.
    """
    if not isinstance(value, _CONTAINERS):
        return
    memo: dict[int, int] = {}  # id -> weight, valid while ``value`` is alive (this call)

    def weight(item: Any) -> int:
        if isinstance(item, str):
            return len(item) + 1
        if not isinstance(item, _CONTAINERS):
            return 1
        known = memo.get(id(item))
        if known is not None:
            return known
        if isinstance(item, dict):
            total = 1 + sum(weight(k) + weight(v) for k, v in item.items())
        elif isinstance(item, jinja2.utils.Namespace):
            total = 1 + sum(weight(v) for v in item._Namespace__attrs.values())
        else:
            total = 1 + sum(weight(x) for x in item)
        if total > limits.max_chars:
            raise _LimitExceeded("the template built a value whose text would be over the size limit")
        memo[id(item)] = total
        return total

    weight(value)


def _check_indent(limits: RenderLimits, text: Any, width: Any) -> None:
    per_line = len(width) if isinstance(width, str) else (width if _is_int(width) else 0)
    if isinstance(text, str) and len(text) + per_line * (text.count("\n") + 1) > limits.max_chars:
        raise _LimitExceeded("indent would build a value over the size limit")


def _bounded_lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:  # noqa: A002
    """Jinja's ``lipsum`` with the paragraph count and lengths capped."""
    from jinja2.utils import generate_lorem_ipsum

    if not (_is_int(n) and _is_int(min) and _is_int(max)) or n > _MAX_LIPSUM or max > 1000:
        raise _LimitExceeded(f"lipsum is capped at {_MAX_LIPSUM} paragraphs of 1000 words")
    return generate_lorem_ipsum(n=n, html=html, min=min, max=max)


def _check_padding(limits: RenderLimits, receiver: str, name: str, args: tuple) -> None:
    width = next((a for a in args if isinstance(a, int)), 0)
    if name == "expandtabs":
        width = width * receiver.count("\t") + len(receiver)
    if width > limits.max_chars:
        raise _LimitExceeded(f"str.{name} width over the limit")


def _check_join(limits: RenderLimits, items: Any, separator: Any = "") -> None:
    if not isinstance(items, (list, tuple)):
        return  # a generator's items go through the other guards one by one
    total = sum(len(x) if isinstance(x, str) else 16 for x in items)
    if total + len(items) * len(str(separator or "")) > limits.max_chars:
        raise _LimitExceeded("join would build a value over the size limit")


def _check_replace(limits: RenderLimits, text: str = "", old: str = "", new: str = "") -> None:
    count = text.count(old) if old else len(text) + 1
    if len(text) + count * len(new) > limits.max_chars:
        raise _LimitExceeded("replace would build a value over the size limit")


class _GenerationTag(Extension):
    """Hugging Face's ``{% generation %}...{% endgeneration %}`` marks assistant text; render the body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> list[nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: Any = None, sort_keys: bool = False) -> str:
    """``tojson`` as Hugging Face defines it: no HTML escaping, non-ASCII kept."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(str(message))


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class SandboxedTemplate:
    """One compiled untrusted template; :meth:`render` is thread-safe."""

    def __init__(self, source: str, limits: RenderLimits = RenderLimits()) -> None:
        self.source = source
        self.limits = limits
        self._env = _GuardedEnvironment(limits)
        self._template = self._guarded(lambda: self._env.from_string(source), "compile")

    def render(self, **variables: Any) -> str:
        """Render with the HF helpers added; any failure is a one-line :class:`TemplateError`."""
        variables = {"raise_exception": _raise_exception, "strftime_now": _strftime_now, **variables}

        def run() -> str:
            parts: list[str] = []
            budget = self._env.budget
            assert budget is not None  # _guarded set this render's budget
            for chunk in self._template.generate(**variables):
                budget.tick()  # sizes were counted by the output guards as the text was made
                parts.append(chunk)
            return "".join(parts)

        return self._guarded(run, "render")

    def _guarded(self, action: Any, what: str) -> Any:
        self._env._local.budget = _Budget(self.limits)
        try:
            return action()
        except _TemplateRaised as exc:
            raise TemplateError(f"the template refused the conversation: {exc}") from None
        except _LimitExceeded as exc:
            raise TemplateError(f"the template went over a safety limit: {exc}") from None
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(f"template syntax error on line {exc.lineno}: {exc.message}") from None
        except jinja2.exceptions.SecurityError as exc:
            raise TemplateError(f"the template tried something unsafe: {_one_line(exc)}") from None
        except (RecursionError, MemoryError) as exc:
            raise TemplateError(f"the template could not {what}: {type(exc).__name__}") from None
        except Exception as exc:  # untrusted code: any failure means "cannot use this template"
            raise TemplateError(f"the template failed to {what}: {type(exc).__name__}: {_one_line(exc)}") from None
        finally:
            self._env._local.budget = None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
