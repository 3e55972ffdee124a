"""What the slash commands, the key actions and the palette do, as a mixin of :class:`ChatApp`.

Parsing lives in :mod:`app.tui.slash`; here each ``/name`` maps to a
``cmd_name`` method.  Commands that take an argument appear in the palette
too: choosing one puts ``/name `` in the prompt box to finish typing.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Iterable

from textual.screen import Screen
from textual.app import SystemCommand

from app.tui.slash import COMMANDS, SAMPLING, SlashCommand, SlashError, apply_sampling, help_text


class CommandsMixin:
    """Slash commands and palette entries; mixed into ChatApp (``self`` is the app)."""

    async def run_slash(self, command: SlashCommand) -> None:
        handler = getattr(self, f"cmd_{command.name}")
        try:
            await handler(command.arg)
        except SlashError as exc:
            self.notify(str(exc), severity="error")

    def _need_session(self, name: str):
        if self.session is None:
            raise SlashError(f"/{name} needs a loaded model: open one with /model PATH.gguf")
        if self.generating:
            raise SlashError(f"/{name} has to wait until the reply finishes (Esc stops it)")
        return self.session

    # ------------------------------------------------------------- commands
    async def cmd_new(self, arg: str) -> None:
        session = self._need_session("new")
        self.end_edit("new chat")
        session.reset()
        session.set_system(self.options.system)
        await self.chat_view.clear()
        await self.chat_view.show_welcome()
        self.new_conversation()
        self.update_meter()

    async def cmd_clear(self, arg: str) -> None:
        session = self._need_session("clear")
        self.end_edit("chat cleared")
        session.reset()
        await self.chat_view.clear()
        self.new_conversation()
        self.update_meter()

    async def cmd_system(self, arg: str) -> None:
        session = self._need_session("system")
        session.set_system(arg)
        if self.recorder is not None:  # stored with the conversation, so a resume sends the same
            self.recorder.set_system(arg)
        self.update_meter()
        self.notify(f"System prompt set ({session.draft_tokens(arg) if arg else 0} tokens as a turn)"
                    if arg else "System prompt cleared")

    async def cmd_template(self, arg: str) -> None:
        from templates import TemplateError, resolve_template

        session = self._need_session("template")
        if not arg:
            raise SlashError("/template needs a name: auto | model | chatml | llama3 | gemma")
        try:
            template, notice = resolve_template(arg, self.chat.tokenizer)
        except TemplateError as exc:
            raise SlashError(str(exc)) from None
        self.chat.session = self.rebuild_session(session, template)
        self.chat.template = template
        self.show_model()
        self.update_meter()
        self.notify(notice or f"Template: {template.name}")

    def rebuild_session(self, session, template):
        """A new ChatSession with another template and the same turns and settings."""
        from app.conversation.session import ChatSession

        new = ChatSession(self.chat.tokenizer, template, backend=self.chat.backend,
                          system_prompt=session.system_prompt, sampling=session.sampling,
                          context_size=self.chat.context_size, enable_thinking=session.enable_thinking)
        new.load_messages([m for m in session.messages if m.role != "system"], session.branches)
        return new

    async def _sampling(self, name: str, arg: str) -> None:
        # allowed while a reply streams: a turn copies the sampling settings when it starts
        session = self.session
        if session is None:
            raise SlashError(f"/{name} needs a loaded model: open one with /model PATH.gguf")
        session.sampling = apply_sampling(session.sampling, name, arg)
        self.notify(f"{SAMPLING[name]} = {getattr(session.sampling, SAMPLING[name])}")

    async def cmd_temp(self, arg: str) -> None:
        await self._sampling("temp", arg)

    async def cmd_top_p(self, arg: str) -> None:
        await self._sampling("top_p", arg)

    async def cmd_top_k(self, arg: str) -> None:
        await self._sampling("top_k", arg)

    async def cmd_min_p(self, arg: str) -> None:
        await self._sampling("min_p", arg)

    async def cmd_repeat_penalty(self, arg: str) -> None:
        await self._sampling("repeat_penalty", arg)

    async def cmd_max_tokens(self, arg: str) -> None:
        await self._sampling("max_tokens", arg)

    async def cmd_seed(self, arg: str) -> None:
        await self._sampling("seed", arg)

    async def cmd_regen(self, arg: str) -> None:
        await self.action_regenerate()

    async def cmd_edit(self, arg: str) -> None:
        self.action_edit_last()

    async def cmd_copy(self, arg: str) -> None:
        words = arg.split()
        if not words:
            self.action_copy_reply()
            return
        if words[0] != "code" or len(words) > 2:
            raise SlashError("/copy takes nothing, `code` or `code N`")
        reply = self.chat_view.last_assistant()
        blocks = reply.code_blocks() if reply else []
        if not blocks:
            raise SlashError("the last reply has no code block")
        try:
            index = int(words[1]) - 1 if len(words) == 2 else len(blocks) - 1
        except ValueError:
            raise SlashError(f"/copy code needs a block number, not {words[1]!r}") from None
        if not 0 <= index < len(blocks):
            raise SlashError(f"the last reply has {len(blocks)} code block(s)")
        self.copy_to_clipboard(blocks[index])
        self.notify(f"Copied code block {index + 1} of {len(blocks)}")

    async def cmd_export(self, arg: str) -> None:
        """The stored conversation through :mod:`app.history.export` (``.json`` keeps everything);
        with history off, the session's messages as Markdown."""
        from app.history.export import to_json, to_markdown
        from app.history.store import StoreError
        from app.tui.transcript import transcript_markdown

        session = self._need_session("export")
        if not session.messages:
            raise SlashError("nothing to export yet")
        path = Path(arg).expanduser() if arg else Path.cwd() / time.strftime("tokchat-%Y%m%d-%H%M%S.md")
        conv_id = self.recorder.conversation_id if self.recorder else None
        try:
            if conv_id is not None and self.store is not None:
                conversation = self.store.load(conv_id)
                text = to_json(conversation) if path.suffix == ".json" else to_markdown(conversation)
            else:
                text = transcript_markdown(session.messages)
            path.write_text(text, encoding="utf-8")
        except StoreError as exc:
            raise SlashError(str(exc)) from None
        except OSError as exc:
            raise SlashError(f"could not write {path}: {exc.strerror or exc}") from None
        self.notify(f"Exported {len(session.messages)} messages to {path}")

    async def cmd_stats(self, arg: str) -> None:
        from app.tui.transcript import totals_text

        session = self._need_session("stats")
        await self.chat_view.add_notice(totals_text(session.messages, session.context_used,
                                                    self.chat.context_size))

    async def cmd_model(self, arg: str) -> None:
        if self.generating:
            raise SlashError("/model has to wait until the reply finishes (Esc stops it)")
        if not arg:
            self.open_model_picker()  # app.tui.pull
            return
        self.switch_model(arg)  # downloads first when arg names the hub and is not cached

    async def cmd_server(self, arg: str) -> None:
        from dataclasses import replace

        from app.settings.server import server_for_command

        if self.generating:
            raise SlashError("/server has to wait until the reply finishes (Esc stops it)")
        try:
            server, model = server_for_command(arg, self.options.server)
        except ValueError as exc:
            raise SlashError(str(exc)) from None
        self.options = replace(self.options, server=server, model=model or self.options.model)
        self.start_load()

    async def cmd_history(self, arg: str) -> None:
        self.action_toggle_history()

    async def cmd_help(self, arg: str) -> None:
        keys = [("Enter", "send"), ("Ctrl+J / Shift+Enter", "new line"), ("Up (empty box)", "previous prompts"),
                ("Esc / Ctrl+C", "stop the reply"), ("Esc (editing)", "cancel the edit"), ("Ctrl+R", "regenerate"), ("Ctrl+G", "edit the last prompt"),
                ("Ctrl+L", "continue the last reply"), ("f (history list)", "fork a conversation"),
                ("Ctrl+T", "show/hide thinking"), ("Ctrl+O", "copy the last reply"),
                ("Ctrl+B", "history"), ("F2 / double click", "token inspector"),
                ("Alt+← / Alt+→", "sibling replies"), ("Ctrl+N", "new chat"), ("Ctrl+P", "command palette"),
                ("Ctrl+Q", "quit")]
        await self.chat_view.add_notice(help_text(keys))

    async def action_new_chat(self) -> None:
        await self.run_slash(SlashCommand("new", ""))

    # -------------------------------------------------------------- key actions
    async def action_regenerate(self) -> None:
        if not self.ready_to_generate():
            return
        if not any(m.role == "assistant" for m in self.session.messages):
            self.notify("Nothing to regenerate yet", severity="warning")
            return
        from app.tui.widgets.assistant_message import AssistantMessage

        self.record_user(None, replacing="reply")
        await self.chat_view.remove_from_last(AssistantMessage)
        await self.start_reply(self.session.regenerate, None)

    def action_edit_last(self) -> None:
        if not self.ready_to_generate():
            return
        users = [m for m in self.session.messages if m.role == "user"]
        if not users:
            self.notify("No prompt to edit yet", severity="warning")
            return
        self.prompt_input.begin_edit(users[-1].content)
        self.notify("Editing the last prompt: Enter resends it in its place, Esc cancels")

    def action_toggle_thinking(self) -> None:
        from app.tui.widgets.assistant_message import AssistantMessage

        for reply in reversed(list(self.chat_view.query(AssistantMessage))):
            if reply.reasoning:
                reply.thinking.collapsed = not reply.thinking.collapsed
                return
        self.notify("No thinking to show in this conversation")

    def action_copy_reply(self) -> None:
        reply = self.chat_view.last_assistant()
        if reply is None or not reply.content:
            self.notify("No reply to copy yet", severity="warning")
            return
        self.copy_to_clipboard(reply.content)
        self.notify(f"Copied the last reply ({len(reply.content)} characters)")

    # -------------------------------------------------------------- palette
    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for name, (hint, what) in COMMANDS.items():
            yield SystemCommand(f"/{name}{' ' + hint if hint else ''}", what, self._palette_callback(name, hint))

    def _palette_callback(self, name: str, hint: str):
        async def run() -> None:
            if hint and not hint.startswith("["):
                self.prompt_input.load_text(f"/{name} ")
                self.prompt_input.move_cursor(self.prompt_input.document.end)
                self.prompt_input.focus()
                return
            await self.run_slash(SlashCommand(name, ""))

        return run
