"""Slash commands and the palette: a table from ``/name`` to what runs it.

:class:`SlashCommands` is held by the chat window (``app.commands``).  Parsing
lives in :mod:`app.tui.slash`; here each ``/name`` maps to a handler: the
commands about the chat as a whole are methods of this class, the others are
the features' own (``/attach`` is :meth:`app.tui.attach.Attachments.command`,
``/fork`` is :meth:`app.tui.steer.Steering.cmd_fork` ...), handed in by the
window that holds them.  Commands that take an argument appear in the palette
too: choosing one puts ``/name `` in the prompt box to finish typing.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterable

from textual.app import SystemCommand

from app.tui.history import ChatHistory
from app.tui.host import ChatHost
from app.tui.keys import help_rows
from app.tui.slash import COMMANDS, SAMPLING, SlashCommand, SlashError, apply_sampling, help_text

#: what runs a command: called with the text after ``/name``; a SlashError is said in one line
Handler = Callable[[str], Awaitable[None]]



class SlashCommands:
    """The dispatch table, and the commands about the whole chat.

    ``features``: the handlers of the features' commands, by name (``{"attach": ...}``);
    ``history``: stores what ``/new``, ``/system`` and ``/export`` change or read.
    """

    def __init__(self, host: ChatHost, history: ChatHistory, features: dict[str, Handler],
                 reload: Callable[[Any], None]) -> None:
        self.host = host
        self.history = history
        #: ``/server``: load again with these options (loading is the window's)
        self.reload = reload
        self.table: dict[str, Handler] = {
            "new": self.cmd_new, "clear": self.cmd_clear, "system": self.cmd_system,
            "template": self.cmd_template, "copy": self.cmd_copy, "export": self.cmd_export,
            "stats": self.cmd_stats, "server": self.cmd_server, "help": self.cmd_help,
            "regen": self.cmd_regen, "edit": self.cmd_edit, "format": self.cmd_format,
            **{name: self._sampling_handler(name) for name in SAMPLING if name in COMMANDS},
            **features,
        }
        missing = sorted(set(COMMANDS) - set(self.table))
        if missing:  # a command the help lists but nothing runs: a bug, found when the window opens
            raise ValueError(f"no handler for /{', /'.join(missing)}")

    async def run(self, command: SlashCommand) -> None:
        handler = self.table[command.name]
        try:
            await handler(command.arg)
        except SlashError as exc:
            self.host.notify(str(exc), severity="error")

    async def run_named(self, name: str, arg: str = "") -> None:
        await self.run(SlashCommand(name, arg))

    # ------------------------------------------------------------- commands
    async def cmd_new(self, arg: str) -> None:
        host = self.host
        session = host.need_session("new")
        host.end_edit("new chat")
        session.reset()
        session.set_system(host.options.system)
        await host.chat_view.clear()
        await host.chat_view.show_welcome(host.keys)
        self.history.new_conversation()
        host.update_meter()

    async def cmd_clear(self, arg: str) -> None:
        host = self.host
        session = host.need_session("clear")
        host.end_edit("chat cleared")
        session.reset()
        await host.chat_view.clear()
        self.history.new_conversation()
        host.update_meter()

    async def cmd_system(self, arg: str) -> None:
        host = self.host
        session = host.need_session("system")
        session.set_system(arg)
        self.history.set_system(arg)  # stored with the conversation, so a resume sends the same
        host.update_meter()
        host.notify(f"System prompt set ({session.draft_tokens(arg) if arg else 0} tokens as a turn)"
                    if arg else "System prompt cleared")

    async def cmd_template(self, arg: str) -> None:
        """``/template NAME``: the session goes on with another template, and the stored conversation says so
        (its export, a fork and a reopen render the turns as they were sent)."""
        from templates import TemplateError

        host = self.host
        host.need_session("template")
        if not arg:
            raise SlashError("/template needs a name: auto | model | chatml | llama3 | gemma")
        try:
            notice = host.use_template(arg)
        except TemplateError as exc:
            raise SlashError(str(exc)) from None
        assert host.chat is not None  # need_session: the chat is loaded
        name = host.chat.template.name
        self.history.set_template(name)
        host.notify(notice or f"Template: {name}")

    def _sampling_handler(self, name: str) -> Handler:
        async def run(arg: str) -> None:
            await self._sampling(name, arg)

        return run

    async def _sampling(self, name: str, arg: str) -> None:
        # allowed while a reply streams: a turn copies the sampling settings when it starts
        session = self.host.session
        if session is None:
            raise SlashError(f"/{name} needs a loaded model: open one with /model PATH.gguf")
        session.sampling = apply_sampling(session.sampling, name, arg)
        self.host.notify(f"{SAMPLING[name]} = {getattr(session.sampling, SAMPLING[name])}")

    async def cmd_format(self, arg: str) -> None:
        """``/format json|schema FILE|regex P|grammar FILE|off``: the next replies are held to it (a turn copies
        the sampling settings when it starts); a model opened later keeps it, the model bar shows it."""
        from dataclasses import replace

        from app.chat.output_format import constraint_from_command
        from app.tui.widgets.model_bar import ModelBar
        from backends.constraint import ConstraintError, describe

        host = self.host
        session = host.need_session("format")
        try:
            constraint = constraint_from_command(arg)
        except ConstraintError as exc:
            raise SlashError(str(exc)) from None
        session.sampling = replace(session.sampling, constraint=constraint)
        host.options.sampling = replace(host.options.sampling, constraint=constraint)
        host.query_one(ModelBar).reply_format = describe(constraint)
        host.notify(f"Replies held to {describe(constraint)}" if constraint else "Replies are free text again")

    async def cmd_regen(self, arg: str) -> None:
        await self.regenerate()

    async def cmd_edit(self, arg: str) -> None:
        self.edit_last()

    async def cmd_copy(self, arg: str) -> None:
        host = self.host
        words = arg.split()
        if not words:
            self.copy_reply()
            return
        if words[0] != "code" or len(words) > 2:
            raise SlashError("/copy takes nothing, `code` or `code N`")
        reply = host.chat_view.last_assistant()
        blocks = reply.code_blocks() if reply else []
        if not blocks:
            raise SlashError("the last reply has no code block")
        try:
            index = int(words[1]) - 1 if len(words) == 2 else len(blocks) - 1
        except ValueError:
            raise SlashError(f"/copy code needs a block number, not {words[1]!r}") from None
        if not 0 <= index < len(blocks):
            raise SlashError(f"the last reply has {len(blocks)} code block(s)")
        host.copy_to_clipboard(blocks[index])
        host.notify(f"Copied code block {index + 1} of {len(blocks)}")

    async def cmd_export(self, arg: str) -> None:
        """The stored conversation through :mod:`app.history.export` (``.json`` keeps everything);
        with history off, the session's messages as Markdown."""
        from app.history.export import to_json, to_markdown
        from app.history.store import StoreError
        from app.tui.transcript import transcript_markdown

        session = self.host.need_session("export")
        if not session.messages:
            raise SlashError("nothing to export yet")
        path = Path(arg).expanduser() if arg else Path.cwd() / time.strftime("tokchat-%Y%m%d-%H%M%S.md")
        conv_id = self.history.conversation_id
        try:
            if conv_id is not None and self.history.store is not None:
                conversation = self.history.store.load(conv_id)
                text = to_json(conversation) if path.suffix == ".json" else to_markdown(conversation)
            else:
                text = transcript_markdown(session.messages)
            path.write_text(text, encoding="utf-8")
        except StoreError as exc:
            raise SlashError(str(exc)) from None
        except OSError as exc:
            raise SlashError(f"could not write {path}: {exc.strerror or exc}") from None
        self.host.notify(f"Exported {len(session.messages)} messages to {path}")

    async def cmd_stats(self, arg: str) -> None:
        from app.tui.transcript import totals_text

        session = self.host.need_session("stats")
        assert self.host.chat is not None  # need_session: the chat is loaded
        await self.host.chat_view.add_notice(totals_text(session.messages, session.context_used,
                                                         self.host.chat.context_size))

    async def cmd_server(self, arg: str) -> None:
        from dataclasses import replace

        from app.settings.server import server_for_command

        host = self.host
        if host.generating:
            raise SlashError("/server has to wait until the reply finishes (Esc stops it)")
        try:
            server, model = server_for_command(arg, host.options.server)
        except ValueError as exc:
            raise SlashError(str(exc)) from None
        self.reload(replace(host.options, server=server, model=model or host.options.model))

    async def cmd_help(self, arg: str) -> None:
        await self.host.chat_view.add_notice(help_text(help_rows(self.host.keys)))

    # -------------------------------------------------------------- what keys do too
    async def regenerate(self) -> None:
        """Ctrl+R and ``/regen``: a new reply to the last prompt (the old one stays as a sibling)."""
        host = self.host
        if not host.ready_to_generate():
            return
        if not any(m.role == "assistant" for m in host.session.messages):
            host.notify("Nothing to regenerate yet", severity="warning")
            return
        tail = self.history.tail_refusal("Nothing regenerated")
        if tail:
            host.notify(tail, severity="warning", timeout=10)
            return
        from app.tui.widgets.assistant_message import AssistantMessage

        self.history.record_user(None, replacing="reply")
        await host.chat_view.remove_from_last(AssistantMessage)
        await host.start_reply(host.session.regenerate, None)

    def edit_last(self) -> None:
        """Ctrl+G and ``/edit``: the last prompt back in the box; Enter resends it in its place."""
        host = self.host
        if not host.ready_to_generate():
            return
        tail = self.history.tail_refusal("Nothing to edit")
        if tail:
            host.notify(tail, severity="warning", timeout=10)
            return
        users = [m for m in host.session.messages if m.role == "user"]
        if not users:
            host.notify("No prompt to edit yet", severity="warning")
            return
        host.prompt_input.begin_edit(users[-1].content)
        host.notify("Editing the last prompt: Enter resends it in its place, Esc cancels")

    def toggle_thinking(self) -> None:
        """Ctrl+T: show or hide the newest thinking block."""
        from app.tui.widgets.assistant_message import AssistantMessage

        for reply in reversed(list(self.host.chat_view.query(AssistantMessage))):
            if reply.reasoning:
                reply.thinking.collapsed = not reply.thinking.collapsed
                return
        self.host.notify("No thinking to show in this conversation")

    def copy_reply(self) -> None:
        """Ctrl+O and ``/copy``: the last reply's text to the clipboard."""
        host = self.host
        reply = host.chat_view.last_assistant()
        if reply is None or not reply.content:
            host.notify("No reply to copy yet", severity="warning")
            return
        host.copy_to_clipboard(reply.content)
        host.notify(f"Copied the last reply ({len(reply.content)} characters)")

    # -------------------------------------------------------------- palette
    def palette(self) -> Iterable[SystemCommand]:
        """One palette entry per command."""
        for name, (hint, what) in COMMANDS.items():
            yield SystemCommand(f"/{name}{' ' + hint if hint else ''}", what, self._palette_callback(name, hint))

    def _palette_callback(self, name: str, hint: str) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            box = self.host.prompt_input
            if hint and not hint.startswith("["):
                box.load_text(f"/{name} ")
                box.move_cursor(box.document.end)
                box.focus()
                return
            await self.run(SlashCommand(name, ""))

        return run

