"""Conversation history, as a mixin of ChatApp: recording turns and the sidebar.

Turns are written through :class:`app.history.recorder.HistoryRecorder`, which
turns any storage failure into one notice and never stops the chat.  The
sidebar reads the same :class:`app.history.store.ChatStore`.  Everything here runs
on the event loop: each store call is one short SQLite transaction.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from textual import work
from textual.app import ComposeResult

from app.tui.widgets.dialogs import ConfirmScreen, RenameScreen
from app.tui.widgets.history_sidebar import HistorySidebar


class HistoryMixin:
    """Mixed into ChatApp (``self`` is the app)."""

    def init_history(self, store: Any) -> None:
        """``store``: a ChatStore to use (tests); None opens the default one on first use."""
        self._store_arg = store
        self.recorder = None
        self._resume_id: int | None = None

    def compose_history(self) -> ComposeResult:
        yield HistorySidebar()

    # -------------------------------------------------------------- recording
    def _make_recorder(self):
        from app.history.recorder import HistoryRecorder

        from dataclasses import asdict

        chat = self.chat
        # the session is what is sent: its system prompt and sampling are what a new conversation stores
        return HistoryRecorder.from_options(
            self.options, store=self._store_arg, model_path=chat.model_path,
            model_name=chat.info.model_name or chat.model_path.stem, template=chat.template.name,
            system=chat.session.system_prompt, sampling=asdict(chat.session.sampling))

    def on_model_ready(self) -> None:
        old = self.recorder
        self.recorder = self._make_recorder()
        if old is not None and old.conversation_id is not None:
            self.recorder.resume(old.conversation_id, old.tip_id)
            chat = self.chat  # /model: the conversation goes on with this model, template and sampling
            self.recorder.update(model=str(chat.model_path), model_name=chat.info.model_name or chat.model_path.stem,
                                 template=chat.template.name, sampling=chat.session.sampling)
        if old is not None:
            old.close()

    @property
    def store(self):
        """The open history store, or None when history is off or failed."""
        if self.recorder is not None:
            return self.recorder.store
        if self._store_arg is not None:
            return self._store_arg
        if not self.options.history:
            return None
        from app.history.store import ChatStore, StoreError

        try:
            self._store_arg = ChatStore()
        except StoreError as exc:
            self.notify(str(exc), severity="warning")
            return None
        return self._store_arg

    def _history_notice(self) -> None:
        notice = self.recorder.take_notice() if self.recorder else None
        if notice:
            self.notify(notice, severity="warning", timeout=8)

    def _stored_count(self, upto: int | None = None) -> int:
        """How many of the session's messages (before ``upto``) the store holds (no system turns)."""
        messages = self.session.messages[:upto]
        return sum(1 for m in messages if m.role != "system")

    def record_user(self, text: str, *, replacing: str | None = None) -> None:
        """Before a turn starts: ``replacing`` is ``"reply"`` (regenerate) or ``"prompt"`` (edit)."""
        if self.recorder is None:
            return
        messages = self.session.messages
        if replacing is not None:
            role = "assistant" if replacing == "reply" else "user"
            last = max((i for i, m in enumerate(messages) if m.role == role), default=None)
            if last is not None:
                kept = [m for m in messages[:last] if m.role != "system"]
                if all(m.store_id is not None for m in kept):  # this chat's own branch, by id
                    self.recorder.rewind(kept[-1].store_id if kept else None)
                else:
                    self.recorder.truncate(self._stored_count(last))
        if text is not None:
            self.recorder.on_user(SimpleNamespace(role="user", content=text, reasoning="", stats=None,
                                                  finish_reason=None))
        self._history_notice()

    def record_chunk(self, kind: str, text: str) -> None:
        if self.recorder is not None:
            self.recorder.on_event(SimpleNamespace(kind=kind, text=text))

    def record_reply(self) -> None:
        if self.recorder is None or self.session is None:
            return
        messages = self.session.messages
        if messages and messages[-1].role == "assistant":
            self.recorder.on_reply(messages[-1])
            user = next((m for m in reversed(messages) if m.role == "user"), None)
            if user is not None and user.store_id is None:
                user.store_id = self.recorder.last_user_id
        else:
            self.recorder.close_reply("error")
        self._history_notice()
        self.refresh_history()

    def record_refusal(self) -> None:
        """A turn the session refused: the user message stored for it stays as a branch, and the
        next message follows the conversation's last message again (never the refused one)."""
        if self.recorder is None:
            return
        self.recorder.close_reply("error")
        kept = [m for m in self.session.messages if m.role != "system"]
        if all(m.store_id is not None for m in kept):
            self.recorder.rewind(kept[-1].store_id if kept else None)
        self._history_notice()
        self.refresh_history()

    def new_conversation(self) -> None:
        if self.recorder is not None:
            self.recorder.start_new(system=self.session.system_prompt if self.session else self.options.system)

    def close_history(self) -> None:
        if self.recorder is not None:
            self.recorder.close()

    # ---------------------------------------------------------------- sidebar
    @property
    def sidebar(self) -> HistorySidebar:
        return self.query_one(HistorySidebar)

    def action_toggle_history(self) -> None:
        sidebar = self.sidebar
        if sidebar.has_class("-open"):
            sidebar.remove_class("-open")
            self.prompt_input.focus()
            return
        if self.store is None:
            self.notify("History is off (--no-history or history = false in the config)", severity="warning")
            return
        sidebar.add_class("-open")
        self.refresh_history()
        sidebar.query_one("#history-list").focus()

    def refresh_history(self, search: str | None = None) -> None:
        sidebar = self.sidebar
        if not sidebar.has_class("-open") or self.store is None:
            return
        if search is None:
            search = sidebar.query_one("#history-search").value
        from app.history.store import StoreError

        try:
            sidebar.show(self.store.list_conversations(search or None))
        except StoreError as exc:
            self.notify(str(exc), severity="error")

    def on_history_sidebar_search_changed(self, message: HistorySidebar.SearchChanged) -> None:
        self.refresh_history(message.text)

    async def on_history_sidebar_new_requested(self) -> None:
        await self.action_new_chat()

    @work
    async def on_history_sidebar_rename_requested(self, message: HistorySidebar.RenameRequested) -> None:
        title = await self.push_screen_wait(RenameScreen(message.title))
        if title:
            self._store_call(lambda store: store.rename(message.conv_id, title))

    @work
    async def on_history_sidebar_delete_requested(self, message: HistorySidebar.DeleteRequested) -> None:
        if await self.push_screen_wait(ConfirmScreen(f"Delete “{message.title}”? This cannot be undone.")):
            self._store_call(lambda store: store.delete(message.conv_id))
            if self.recorder is not None and self.recorder.conversation_id == message.conv_id:
                self.recorder.start_new()

    def _store_call(self, action) -> None:
        from app.history.store import StoreError

        try:
            action(self.store)
        except StoreError as exc:
            self.notify(str(exc), severity="error")
        self.refresh_history()

    async def on_history_sidebar_conversation_selected(self, message: HistorySidebar.ConversationSelected) -> None:
        await self.resume_conversation(message.conv_id)

    async def resume_conversation(self, conv_id: int) -> None:
        """Show a stored conversation and continue it with the loaded model."""
        from app.history.store import StoreError

        if self.generating:
            self.notify("Wait for the reply to finish (or Esc) before opening another chat", severity="warning")
            return
        try:
            conversation = self.store.load(conv_id)
        except StoreError as exc:
            self.notify(str(exc), severity="error")
            return
        from app.conversation.branches import from_links

        stored = [m for m in conversation.messages + conversation.branches if m.role != "system"]
        messages, branches = from_links([(m.id, m.parent_id, m.to_chat_message()) for m in stored],
                                        [m.id for m in conversation.messages if m.role != "system"])
        self.end_edit("another conversation opened")
        await self.chat_view.show_messages(messages)
        self.sub_title = conversation.info.title
        if self.session is None:
            self.notify("Showing a stored chat; load a model (/model PATH) to continue it", severity="warning")
            return
        self.session.set_system(conversation.info.system_prompt)
        self.session.load_messages(messages, branches)
        if self.recorder is not None:
            self.recorder.resume(conv_id, conversation.messages[-1].id if conversation.messages else None)
        await self.show_branch_labels()
        self.update_meter()
        self.prompt_input.focus()

