"""Give a chat its tools: start the chosen MCP servers, list their tools, build the loop.

Shared by the headless mode and the TUI.  Every problem is one line for
``notify`` and the chat goes on: an unknown server name, a server that does
not start (the others still do), a chat template with no tool-call format.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from app.tools.loop import Approver, ToolLoop
from app.tools.mcp_client import McpHub
from app.settings.tools import ToolSettings

if TYPE_CHECKING:
    from app.conversation.messages import ChatMessage
    from tokenizer.protocol import Tokenizer


@dataclass
class ChatTools:
    """A chat's MCP servers and the loop that uses them (close it when the chat ends)."""

    hub: McpHub
    loop: ToolLoop

    def close(self) -> None:
        self.hub.close()


def open_tools(settings: ToolSettings | None, session: Any, *, approve: Approver,
               notify: Callable[[str], None], on_message: Callable[[ChatMessage], object] | None = None
               ) -> ChatTools | None:
    """The chat's tools, or None when none are enabled or none could be started."""
    if settings is None or not settings.selected():
        return None
    for name in settings.unknown():
        known = ", ".join(settings.servers) or "none configured"
        notify(f"no MCP server named {name!r} in [mcp.servers] (configured: {known})")
    names = [n for n in settings.selected() if n in settings.servers]
    if not names:
        return None
    hub = McpHub([settings.servers[n] for n in names], call_timeout_s=settings.call_timeout_s)
    for line in hub.start(names).values():
        notify(f"{line}; the chat goes on without its tools")
    tools = settings.chosen(hub.tools(names))
    loop = ToolLoop(session, hub, tools, approve=approve, settings=settings, on_message=on_message)
    if not tools:
        hub.close()
        session.tools = None
        return None
    if loop.syntax is None:
        notify(f"the chat template {session.template.name!r} has no tool-call format, so the model gets no "
               "tools; use a template that has one (the model's own, chatml or llama3)")
        session.tools = None
        hub.close()
        return None
    return ChatTools(hub, loop)


def schema_tokens(tokenizer: Tokenizer, schema: dict) -> int:
    """A tool schema's size in tokens, as JSON (what each tool adds to every prompt, about)."""
    return len(tokenizer.encode(json.dumps(schema, ensure_ascii=False)))


def tools_prompt_tokens(session: Any) -> int:
    """What the tool schemas add to the prompt through the template (0 without tools)."""
    if not session.tools:
        return 0
    def messages(system: str) -> list[dict]:
        return [{"role": "system", "content": system}] * bool(system) + [{"role": "user", "content": "Hi"}]

    template = session.template
    from templates import prompt_ids

    # the schemas and the tool instructions (joined to the system prompt while tools are given)
    with_tools = prompt_ids(session.tokenizer, template.render(messages(session.system_text), tools=session.tools))
    without = prompt_ids(session.tokenizer, template.render(messages(session.system_prompt)))
    return len(with_tools) - len(without)
