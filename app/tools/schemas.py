"""Tool schemas as templates take them, and the messages that carry calls and results.

Hugging Face's convention (what chat templates are written for): a tool is
``{"type": "function", "function": {"name", "description", "parameters"}}``;
an assistant message carries ``tool_calls`` with ``arguments`` as a dict;
a ``tool`` message the ``tool_call_id`` and ``name`` it answers.  Files of
tools and messages given to ``tokchat render`` are checked here, one
readable line per problem.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class ToolSchemaError(ValueError):
    """A tools or messages file that cannot be used; the message is one line for the user."""


def tool_name(tool: dict) -> str:
    """The function name of a tool schema (either ``{"function": {...}}`` or the bare function)."""
    function = tool.get("function", tool)
    return function.get("name", "") if isinstance(function, dict) else ""


def function_tool(name: str, description: str, parameters: dict | None) -> dict:
    """A tool schema in the form templates expect."""
    return {"type": "function", "function": {
        "name": name, "description": description or "",
        "parameters": parameters if isinstance(parameters, dict) else {"type": "object", "properties": {}}}}


def read_tools_file(path: str | Path) -> list[dict]:
    """The JSON list of tool schemas in ``path``, each with a function name."""
    path = Path(path)
    data = _read_json(path)
    if not isinstance(data, list):
        raise ToolSchemaError(f'{path} must hold a JSON list of tools: [{{"type": "function", "function": '
                              '{"name": ..., "parameters": {...}}}, ...]')
    for n, tool in enumerate(data):
        if not isinstance(tool, dict) or not tool_name(tool):
            raise ToolSchemaError(f"{path}: tool {n} needs a function name "
                                  '({"type": "function", "function": {"name": ...}})')
    return data


def check_message(source: str, n: int, item: Any) -> dict:
    """One message of a messages file: role, content and the tool keys, checked."""
    content = item.get("content") if isinstance(item, dict) else None
    if isinstance(item, dict) and content is None and item.get("tool_calls"):
        content = ""  # a reply that only calls tools may have null content
    if not isinstance(item, dict) or not isinstance(item.get("role"), str) or not isinstance(content, str):
        raise ToolSchemaError(f'{source}: message {n} needs a string "role" and a string "content"')
    message = {"role": item["role"], "content": content}
    calls = item.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list) or not all(isinstance(c, dict) and tool_name(c) for c in calls):
            raise ToolSchemaError(f'{source}: message {n}: "tool_calls" must be a list of '
                                  '{"type": "function", "function": {"name": ..., "arguments": {...}}}')
        message["tool_calls"] = calls
    for key in ("tool_call_id", "name"):
        if key in item:
            if not isinstance(item[key], str):
                raise ToolSchemaError(f'{source}: message {n}: "{key}" must be a string')
            message[key] = item[key]
    return message


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ToolSchemaError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ToolSchemaError(f"{path} is not valid JSON: {exc}") from None
