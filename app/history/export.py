"""A stored conversation as Markdown (to read) or JSON (everything, and back again).

The JSON document is versioned (``"format": "tokchat-conversation"``,
``"version": 1``) and holds every stored field: settings, model, each
message with its reasoning, per-turn stats and timestamps (ISO 8601 UTC, the
raw epoch seconds beside them so nothing is rounded away).
:func:`conversation_from_json` reads it back, checking the shape first, so
``import`` of an export gives the same messages.  ``messages`` is the branch
shown; ``branches`` holds the replies and prompts it replaced, every message
carrying its ``id`` and its ``parent`` so the tree comes back on import.

Markdown puts reasoning in a collapsed ``<details>`` block above the answer
and a one-line stats footer under each reply; tool calls and tool results
are collapsed ``<details>`` blocks too (JSON arguments, the result as text).  Message text goes
through :func:`app.history.markdown_text.contained`, so the ``##`` turn headings are exactly the
stored turns; an import is checked (types, nesting, times, integer ranges) before anything is stored.
A message's tool fields travel in JSON as ``"tool"`` (absent in older exports).
"""
from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from typing import Any, Literal, overload

from app.history.markdown_text import contained, fenced, one_line
from app.history.types import Conversation, ConversationInfo, StoredMessage, StoreError

FORMAT = "tokchat-conversation"
VERSION = 1

_MESSAGE_FIELDS = ("role", "content", "reasoning", "finish_reason", "prompt_tokens", "completion_tokens",
                   "reasoning_tokens", "ttft_s", "tokens_per_s", "stats", "created_at", "finished_at")
_INFO_FIELDS = ("title", "model_path", "model_name", "template", "system_prompt", "sampling", "settings",
                "created_at", "updated_at")


class ImportFormatError(StoreError):
    """A file given to import is not a tokchat JSON export; the message says what is wrong."""


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def to_dict(conv: Conversation) -> dict[str, Any]:
    info = conv.info
    return {
        "format": FORMAT,
        "version": VERSION,
        "id": info.id,
        **{name: getattr(info, name) for name in _INFO_FIELDS},
        "created": iso(info.created_at),
        "updated": iso(info.updated_at),
        # a fork (/fork): the conversation and message it was cut from (absent otherwise)
        **({"forked_from": info.forked_from, "forked_at": info.forked_at} if info.forked_from is not None else {}),
        "messages": [_message_dict(m) for m in conv.messages],
        # regenerated replies and edited prompts off the shown branch: the tree is kept by "id"/"parent"
        "branches": [_message_dict(m) for m in conv.branches],
    }


def _message_dict(m: StoredMessage) -> dict[str, Any]:
    return {"id": m.id, "parent": m.parent_id, **{name: getattr(m, name) for name in _MESSAGE_FIELDS},
            "created": iso(m.created_at), "finished": iso(m.finished_at), **({"tool": m.tool} if m.tool else {}),
            **({"opening": m.opening} if m.opening else {}),
            **({"reply_ids": m.reply_ids} if m.reply_ids is not None else {})}


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float (not JSON: ``JSON.parse`` rejects them) made null.

    Such numbers reach the history from older tokchats (``--temperature nan`` was accepted)
    or from a stat divided by zero; an export must always be valid JSON.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def to_json(conv: Conversation) -> str:
    return json.dumps(finite(to_dict(conv)), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


#: the deepest nesting an export holds is 4 (a tool call's arguments); a file nested deeper than this is
#: not one (200,000 nested arrays otherwise end in a RecursionError, in the parser or in a later json.dumps)
MAX_DEPTH = 64
#: the times an export can hold: 1970 to the year 3000 (1e300 was stored, then no export could format it)
_LATEST_TIME = 32503680000.0
#: counts, ids and database ids are SQLite integers
_MAX_INT = 2**63 - 1
#: the roles tokchat stores
_ROLES = ("system", "user", "assistant", "tool")


def _need(data: dict, key: str, kinds: tuple[type, ...], where: str) -> Any:
    if key not in data:
        raise ImportFormatError(f"{where}: missing {key!r}")
    value = data[key]
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
        raise ImportFormatError(f"{where}: {key!r} must be {names}, not {type(value).__name__}")
    return value


@overload
def _time(data: dict, key: str, where: str, *, optional: Literal[False] = False) -> float: ...


@overload
def _time(data: dict, key: str, where: str, *, optional: bool) -> float | None: ...


def _time(data: dict, key: str, where: str, *, optional: bool = False) -> float | None:
    """A timestamp (epoch seconds) that every export format can print: finite, 1970 to 3000."""
    value = _need(data, key, (int, float, type(None)) if optional else (int, float), where)
    if value is not None and not 0 <= value < _LATEST_TIME:  # also false for inf (1e400 parses as inf)
        raise ImportFormatError(f"{where}: {key!r} is {value!r}, not a time between 1970 and 3000 (epoch seconds)")
    return value


def _count(data: dict, key: str, where: str, *, optional: bool = True) -> int | None:
    """A token count or an id: an integer from 0 that SQLite can store."""
    value = _need(data, key, (int, type(None)) if optional else (int,), where)
    if value is not None and not 0 <= value <= _MAX_INT:
        raise ImportFormatError(f"{where}: {key!r} is {value}, not an integer from 0 to {_MAX_INT}")
    return value


def _measure(data: dict, key: str, where: str) -> float | None:
    """A duration or a speed: a finite number from 0, or null."""
    value = _need(data, key, (int, float, type(None)), where)
    if value is not None and not 0 <= value < math.inf:
        raise ImportFormatError(f"{where}: {key!r} is {value!r}, not a finite number from 0")
    return value


def _check_depth(data: Any, source: str) -> None:
    """Refuse a document nested deeper than :data:`MAX_DEPTH` (walked without recursion)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ImportFormatError(f"{source}: nested more than {MAX_DEPTH} levels deep; not a tokchat export")
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def from_dict(data: Any, source: str = "import") -> Conversation:
    """Check a parsed export and rebuild the conversation (ids are assigned on insert)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ImportFormatError(f"{source}: not a tokchat conversation export (no \"format\": \"{FORMAT}\")")
    if data.get("version") != VERSION:
        raise ImportFormatError(f"{source}: export version {data.get('version')!r}; this tokchat reads {VERSION}")
    _check_depth(data, source)
    text = (str,)
    info = ConversationInfo(
        id=0, title=_need(data, "title", text, source), model_path=_need(data, "model_path", text, source),
        model_name=_need(data, "model_name", text, source), template=_need(data, "template", text, source),
        system_prompt=_need(data, "system_prompt", text, source), sampling=_need(data, "sampling", (dict,), source),
        settings=_need(data, "settings", (dict,), source), created_at=_time(data, "created_at", source),
        updated_at=_time(data, "updated_at", source),
        forked_from=_count(data, "forked_from", source) if "forked_from" in data else None,
        forked_at=_count(data, "forked_at", source) if "forked_at" in data else None)
    shown = _messages(_need(data, "messages", (list,), source), f"{source}: messages")
    branches = _messages(data.get("branches") or [], f"{source}: branches")
    return Conversation(info, shown, branches)


def _messages(items: list, source: str) -> list[StoredMessage]:
    text = (str,)
    if not isinstance(items, list):
        raise ImportFormatError(f"{source} must be a list")
    messages = []
    for i, m in enumerate(items):
        where = f"{source}[{i}]"
        if not isinstance(m, dict):
            raise ImportFormatError(f"{where} must be an object")
        ids: dict[str, Any] = {"id": m.get("id") or 0, "parent_id": m.get("parent")}  # checked just below
        if not isinstance(ids["id"], int) or not isinstance(ids["parent_id"], (int, type(None))) or \
                isinstance(ids["id"], bool) or isinstance(ids["parent_id"], bool) or \
                not all(0 <= n <= _MAX_INT for n in (ids["id"], ids["parent_id"] or 0)):
            raise ImportFormatError(f"{where}: 'id' and 'parent' must be integers from 0 to {_MAX_INT}")
        role = _need(m, "role", text, where)
        if role not in _ROLES:
            raise ImportFormatError(f"{where}: 'role' is {role[:40]!r}, not one of {', '.join(_ROLES)}")
        messages.append(StoredMessage(
            **ids, role=role, content=_need(m, "content", text, where),
            reasoning=_need(m, "reasoning", text, where), finish_reason=_need(m, "finish_reason", (str, type(None)), where),
            prompt_tokens=_count(m, "prompt_tokens", where), completion_tokens=_count(m, "completion_tokens", where),
            reasoning_tokens=_count(m, "reasoning_tokens", where),
            ttft_s=_measure(m, "ttft_s", where), tokens_per_s=_measure(m, "tokens_per_s", where),
            stats=_stats(_need(m, "stats", (dict, type(None)), where), f"{where}: 'stats'"),
            created_at=_time(m, "created_at", where), finished_at=_time(m, "finished_at", where, optional=True),
            tool=_tool(_need(m, "tool", (dict, type(None)), where), where) if "tool" in m else None,
            opening=_need(m, "opening", text, where) if "opening" in m else "",
            reply_ids=_reply_ids(m, where)))
    return messages


#: a TurnStats field's annotation -> the JSON values it takes (a stats dict from an export is read back into one)
_STAT_KINDS: dict[str, tuple[type, ...]] = {
    "int": (int,), "float": (int, float), "str": (str,), "bool": (bool,),
    "dict | None": (dict, type(None)), "list | None": (list, type(None)), "FinishReason": (str,)}


def _stats(stats: dict | None, where: str) -> dict | None:
    """A reply's stats: each known field of its kind (an export then formats them), ``parts`` stats too."""
    import dataclasses

    from app.conversation.messages import TurnStats

    if stats is None:
        return None
    for f in dataclasses.fields(TurnStats):
        kinds = _STAT_KINDS.get(str(f.type), ())
        if f.name in stats and kinds and (not isinstance(stats[f.name], kinds)
                                          or (isinstance(stats[f.name], bool) and bool not in kinds)):
            raise ImportFormatError(f"{where}: {f.name!r} must be {str(f.type).replace('None', 'null')}")
    for i, part in enumerate(stats.get("parts") or []):
        if not isinstance(part, dict):
            raise ImportFormatError(f"{where}: 'parts'[{i}] must be an object")
        _stats(part, f"{where}: 'parts'[{i}]")
    return stats


def _tool(tool: dict | None, where: str) -> dict | None:
    """A message's tool fields as templates take them: ``tool_calls`` a list of calls with a name, names text."""
    if tool is None:
        return None
    for key in ("tool_call_id", "name"):
        if not isinstance(tool.get(key, ""), (str, type(None))):
            raise ImportFormatError(f"{where}: 'tool'.{key} must be text")
    calls = tool.get("tool_calls")
    if calls is not None and (not isinstance(calls, list) or not all(
            isinstance(c, dict) and isinstance(c.get("function", c), dict)
            and isinstance(c.get("function", c).get("name", ""), str)
            and isinstance(c.get("function", c).get("arguments", {}), dict) for c in calls)):
        raise ImportFormatError(f"{where}: 'tool'.tool_calls must be a list of calls, each with a name and "
                                "arguments (an object)")
    return tool


def _reply_ids(m: dict, where: str) -> list[int] | None:
    """A message's ``reply_ids`` (absent in older exports): a list of non-negative integers."""
    if "reply_ids" not in m or m["reply_ids"] is None:
        return None
    ids = m["reply_ids"]
    if not isinstance(ids, list) or \
            not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 2**31 for i in ids):
        raise ImportFormatError(f"{where}: 'reply_ids' must be a list of token ids (integers from 0 to 2**31 - 1)")
    return ids


def _no_constant(name: str) -> Any:
    raise ImportFormatError(f"{name} is not a JSON number")


def conversation_from_json(text: str, source: str = "import") -> Conversation:
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except ImportFormatError as exc:
        raise ImportFormatError(f"{source}: not JSON ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ImportFormatError(f"{source}: not JSON ({exc})") from exc
    except RecursionError:
        raise ImportFormatError(f"{source}: nested more than {MAX_DEPTH} levels deep; not a tokchat export") from None
    return from_dict(data, source)


def _stats_line(m: StoredMessage) -> str:
    parts = []
    if m.completion_tokens is not None:
        parts.append(f"{m.completion_tokens} tokens")
    if m.reasoning_tokens:
        parts.append(f"{m.reasoning_tokens} reasoning")
    if m.ttft_s is not None:
        parts.append(f"{m.ttft_s:.2f} s to first token")
    if m.tokens_per_s is not None:
        parts.append(f"{m.tokens_per_s:.1f} tokens/s")
    if m.finish_reason and m.finish_reason != "stop":
        parts.append(m.finish_reason)
    elif m.finish_reason is None:  # its writer is alive (a dead one's reads as interrupted): not finished
        parts.append("being written, unfinished")
    if m.stats and m.stats.get("parts"):  # a continued reply (/continue)
        parts.append(f"{len(m.stats['parts'])} parts: " + " + ".join(str(p.get("completion_tokens")) for p in m.stats["parts"]))
    return " · ".join(parts)


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if ts else ""


def _details(summary: str, body: str, language: str) -> list[str]:
    """A collapsed block with ``body`` fenced (the fence longer than any backtick run inside)."""
    summary = one_line(summary).replace(">", "&gt;")
    return ["<details>", f"<summary>{summary}</summary>", "", fenced(body, language), "", "</details>", ""]


def to_markdown(conv: Conversation) -> str:
    """The conversation to read: every message's text is :func:`contained`, so the turns shown are the
    turns stored (a message holding ``## Assistant`` or an open code fence cannot add or swallow one)."""
    info = conv.info
    out = [f"# {one_line(info.title) or '(untitled)'}", ""]
    model = info.model_name or info.model_path or "?"
    out.append(one_line(f"- Model: {model}" + (f" (`{info.model_path}`)" if info.model_name and info.model_path
                                               else "")))
    if info.template:
        out.append(one_line(f"- Template: {info.template}"))
    if info.sampling:
        out.append(one_line("- Sampling: " + ", ".join(f"{k} {v}" for k, v in info.sampling.items()
                                                       if v is not None)))
    out.append(f"- Started: {_when(info.created_at)} · {len(conv.messages)} messages")
    if info.forked_from is not None:
        out.append(f"- Forked from conversation {info.forked_from}"
                   + (f" at message {info.forked_at}" if info.forked_at is not None else ""))
    out.append("")
    if info.system_prompt:
        out += ["## System", "", contained(info.system_prompt), ""]
    for m in conv.messages:
        tool = m.tool or {}
        if m.role == "tool":
            out += _details(f"Tool result: {tool.get('name', '?')}", m.content, "text")
            continue
        out += [f"## {m.role.capitalize()}", "", f"*{_when(m.created_at)}*", ""]
        if m.reasoning.strip():
            out += ["<details>", "<summary>Reasoning</summary>", "", contained(m.reasoning), "", "</details>", ""]
        if m.opening:
            out += [f"*The start of this reply was written by the user: “{one_line(m.opening)}”*", ""]
        if m.content.strip() or not tool.get("tool_calls"):
            out += [contained(m.content) or "*(empty)*", ""]
        for call in tool.get("tool_calls") or []:
            function = call.get("function", call)
            out += _details(f"Tool call: {function.get('name', '?')}",
                            json.dumps(function.get("arguments", {}), ensure_ascii=False, indent=2), "json")
        if m.role == "assistant" and _stats_line(m):
            out += [f"*{one_line(_stats_line(m))}*", ""]
    return "\n".join(out)
