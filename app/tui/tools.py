"""Tools in the TUI: servers, the loop, approval, tool blocks.

:class:`ChatTools` is held by the chat window (``app.tools``) and owns the MCP
servers, the turn's tool loop and the tool blocks being filled:

* after the model loads, the servers of ``--tools`` / ``tools.enabled`` start in a thread
  worker; each failure is one notice and the chat goes on;
* every turn runs through :class:`app.tools.loop.ToolLoop` (built for the current session, so
  ``/template`` and ``/model`` keep working); "always" answers last for the whole chat;
* approval: the generation thread asks, the event loop shows :class:`ToolApprovalScreen`
  and the thread waits for the answer (Esc on the chat stops the turn and denies);
* a call streams into a :class:`ToolCallBlock` inside the reply, then shows its result;
* the messages the loop adds between steps reach the history through the reply's event
  buffer (as ``tool_message`` events, which the window hands to the history), so they are
  recorded in order with the streamed text;
* ``/tools`` lists the tools and what their schemas cost in tokens.
"""
from __future__ import annotations

import threading
from typing import Any, Iterator

from app.tui.host import ChatHost

# app.tools.loop (and through it the session) is imported where used: not for the first frame
DENY = "deny"


class ChatTools:
    """Tool calling for the chat: the servers, the current turn's loop, its blocks."""

    def __init__(self, host: ChatHost) -> None:
        self.host = host
        self.hub: Any = None
        self.infos: list = []
        #: tools answered "always" (for the whole chat)
        self._always: set[str] = set()
        self._loop: Any = None
        self._blocks: dict[str, Any] = {}
        self._pending_block: Any = None
        self._approval_screen: Any = None

    # -- servers -------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the chosen servers once (after the first model load)."""
        settings = self.host.options.tools
        if self.hub is not None or settings is None or not settings.selected():
            return
        self.host.run_worker(self._open_servers, thread=True, exclusive=True, group="tools")

    def _open_servers(self) -> None:
        from app.tools.mcp_client import McpHub

        settings = self.host.options.tools
        assert settings is not None  # start() runs this only with servers chosen
        lines = [f"no MCP server named {name!r} in [mcp.servers]" for name in settings.unknown()]
        names = [n for n in settings.selected() if n in settings.servers]
        hub = McpHub([settings.servers[n] for n in names], call_timeout_s=settings.call_timeout_s)
        lines += [f"{line}; the chat goes on without its tools" for line in hub.start(names).values()]
        self.host.call_from_thread(self._servers_ready, hub, settings.chosen(hub.tools(names)), lines)

    async def _servers_ready(self, hub: Any, tools: list, lines: list[str]) -> None:
        host = self.host
        self.hub, self.infos = hub, tools
        for line in lines:
            await host.chat_view.add_notice(line, "warning")
        if tools and host.session is not None:
            loop = self._make_loop(None)
            if loop.syntax is None:
                await host.chat_view.add_notice(
                    f"the chat template {host.session.template.name!r} has no tool-call format, so the model "
                    "gets no tools", "warning")
            else:
                host.notify(f"{len(tools)} tools from {', '.join(sorted({t.server for t in tools}))}",
                            title="Tools")

    def close(self) -> None:
        if self.hub is not None:
            self.hub.close()
            self.hub = None

    # -- a turn --------------------------------------------------------------------------------
    def _make_loop(self, buffer: Any) -> Any:
        """A loop for the current session; the messages it adds go into ``buffer`` (the reply's)."""
        from app.tools.loop import ToolLoop

        session = self.host.session

        def on_message(message: Any) -> None:
            if buffer is not None:
                from app.conversation.session import ReplyEvent

                buffer.push(ReplyEvent("tool_message", data=message))

        loop = ToolLoop(session, self.hub, self.infos, approve=self._approve_in_ui,
                        settings=self.host.options.tools, on_message=on_message)
        loop.always = self._always
        if loop.syntax is None:
            session.tools = None
        return loop

    def with_tools(self, events: Iterator[Any], buffer: Any) -> Iterator[Any]:
        """The turn's events through the tool loop when tools are on (called in the worker)."""
        if not self.infos or self.hub is None:
            return events
        loop = self._make_loop(buffer)
        if not loop.active:
            return events
        self._loop = loop
        return loop.run(events)

    def cancel_turn(self) -> None:
        """Stop the reply and the rest of the turn: no further call runs, an open dialog denies."""
        loop = self._loop
        if loop is not None:
            loop.cancel()
        elif self.host.session is not None:
            self.host.session.cancel()

    def _approve_in_ui(self, call: Any, server: str) -> str:
        """Runs in the generation thread: show the dialog on the event loop and wait."""
        from app.tui.widgets.tool_approval import ToolApprovalScreen

        host = self.host
        answer: dict[str, str] = {}
        done = threading.Event()
        loop = self._loop

        def answered(result: str | None) -> None:
            answer.setdefault("v", result or DENY)
            done.set()

        def show() -> None:
            screen = ToolApprovalScreen(server, call.name, call.arguments)
            self._approval_screen = screen
            host.push_screen(screen, callback=answered)

        host.call_from_thread(show)
        while not done.wait(0.05):
            if loop is not None and loop._cancel.is_set():
                screen = self._approval_screen
                if screen is not None:
                    host.call_from_thread(lambda: screen.dismiss(DENY) if screen.is_attached else None)
                return DENY
        self._approval_screen = None
        return answer.get("v", DENY)

    # -- showing it ------------------------------------------------------------------------------
    async def show_event(self, reply: Any, kind: str, item: Any) -> None:
        """A call or result from the drained buffer (``item``: text for deltas, else the event)."""
        from app.tui.widgets.tool_call_block import ToolCallBlock

        if kind == "tool_call_delta":
            if self._pending_block is None:
                self._pending_block = ToolCallBlock()
                await reply.mount(self._pending_block, before=reply.query_one(".stats"))
            self._pending_block.add_text(item)
        elif kind == "tool_call":
            call, server = item.data
            block = self._pending_block
            if block is None:
                block = ToolCallBlock()
                await reply.mount(block, before=reply.query_one(".stats"))
            self._pending_block = None
            block.show_call(call, server)
            self._blocks[call.id] = block
        elif kind == "tool_result":
            block = self._blocks.pop(item.data.call.id, None)
            if block is not None:
                block.show_result(item.data)

    def turn_finished(self) -> None:
        self._loop = None
        self._pending_block = None
        self._blocks = {}

    # -- /tools ---------------------------------------------------------------------------------
    async def command(self, arg: str) -> None:
        """``/tools``."""
        await self.host.chat_view.add_notice(self.text())

    def text(self) -> str:
        from app.tools.display import tools_table
        from app.tools.setup import schema_tokens, tools_prompt_tokens

        session = self.host.session
        settings = self.host.options.tools
        if settings is None or not settings.servers:
            return "No MCP servers configured: add [mcp.servers.NAME] to your config.toml (tokchat config path)."
        if self.hub is None:
            return ("Tools are off for this chat: start tokchat with --tools all (or NAME,...), or set "
                    "tools.enabled.  Configured servers: " + ", ".join(settings.servers))
        tokenizer = session.tokenizer if session is not None else None
        counter = (lambda schema: schema_tokens(tokenizer, schema)) if tokenizer is not None else None
        names = [n for n in settings.selected() if n in settings.servers]
        text = tools_table(self.hub, names, self.hub.failures, counter)
        if session is not None and session.tools:
            extra = " with tools.instructions" if session.tool_instructions else ""
            text += (f"\nIn this chat's prompt the tools take {tools_prompt_tokens(session)} tokens{extra} "
                     f"(template {session.template.name}), counted in the context meter.")
        return text
