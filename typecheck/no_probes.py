"""A mypy plugin: ``getattr``/``hasattr`` with a literal name on one of tokchat's own typed values is an error.

A probe such as ``getattr(message, "verified", None)`` hides the attribute from the type checker: the
name can be misspelt, or be gone since a refactor, and nothing says so.  tokchat's values are typed
(dataclasses, Protocols), so the attribute is read directly and mypy checks it.  This replaces the old
guard test that looked for a list of per-reply fact names (and missed probes under any other name).

Only values whose static type is defined in tokchat's packages are held to it; a third-party object
(an MCP result, an mlx module, an ``argparse.Namespace``) may still be probed, and so may ``Any``.
Loaded by ``[tool.mypy] plugins`` in pyproject.toml.
"""
from __future__ import annotations

from typing import Callable

from mypy.errorcodes import ErrorCode
from mypy.nodes import StrExpr
from mypy.plugin import FunctionContext, Plugin
from mypy.types import Instance, Type, UnionType, get_proper_type

#: the packages whose values are typed and must not be probed
OURS = ("app.", "backends.", "tokenizer.", "templates.")
PROBE = ErrorCode("probe", "getattr/hasattr with a literal name on a tokchat value", "General")


def _ours(value: Type) -> list[str]:
    """The names of tokchat's classes ``value`` may be (each member of a union)."""
    proper = get_proper_type(value)
    members = proper.items if isinstance(proper, UnionType) else [proper]
    found = []
    for member in members:
        member = get_proper_type(member)
        if isinstance(member, Instance) and member.type.fullname.startswith(OURS):
            found.append(member.type.name)
    return found


def _check_probe(ctx: FunctionContext) -> Type:
    if len(ctx.args) >= 2 and ctx.args[0] and ctx.args[1] and isinstance(ctx.args[1][0], StrExpr):
        name = ctx.args[1][0].value
        for cls in _ours(ctx.arg_types[0][0]):
            ctx.api.fail(f'probe of "{cls}.{name}": read the attribute (declared on the type), so the type '
                         "checker checks it", ctx.context, code=PROBE)
    return ctx.default_return_type


class NoProbes(Plugin):
    def get_function_hook(self, fullname: str) -> Callable[[FunctionContext], Type] | None:
        return _check_probe if fullname in ("builtins.getattr", "builtins.hasattr") else None


def plugin(version: str) -> type[Plugin]:
    return NoProbes
