"""The scrolling conversation: user turns, replies and notices, newest at the bottom.

Autoscroll is Textual's anchor: the view follows new text until the user
scrolls up, and follows again once they scroll back to the bottom.  A
resumed conversation shows its newest :data:`PAGE` messages; older ones
come in a page at a time through :class:`EarlierMessages`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from textual.containers import VerticalScroll
from textual.widgets import Static

from app.tui.keys import KeyMap, keymap_for, spoken
from app.tui.widgets.earlier_messages import EarlierMessages
from app.tui.widgets.notice import Notice
from app.tui.widgets.unsettled_tail import UnsettledTail
from app.tui.widgets.user_message import UserMessage

if TYPE_CHECKING:
    from textual.widget import Widget

    from app.conversation.messages import ChatMessage
    from app.tui.widgets.assistant_message import AssistantMessage

#: messages mounted at once when a stored conversation opens, and per "show earlier"
PAGE = 10



def welcome(keys: KeyMap) -> str:
    """The first screen's line, with the keys in use."""
    newline = spoken(keys.of("newline")[-1])  # the default's last, Ctrl+J, is the one every terminal sends
    return (f"Type a message and press {keys.said('send')} ({newline} for a new line).  "
            f"{keys.said('cancel')} stops a reply, {keys.said('regenerate')} regenerates it, "
            "Ctrl+P opens the commands, /help lists them.")


class ChatView(VerticalScroll):
    """Holds the turn widgets; everything is appended at the bottom."""

    DEFAULT_CSS = """
    ChatView { height: 1fr; padding: 0 0 1 0; }
    ChatView > #welcome { color: $text-muted; margin: 1 2; }
    """

    def on_mount(self) -> None:
        self._hidden: list[ChatMessage] = []  # older stored messages not mounted yet, oldest first
        #: a shown tool result's message (by identity) -> the call it answers, from the reply that made it
        self._calls: dict[int, dict | None] = {}
        self.anchor()

    async def show_welcome(self, keys: KeyMap | None = None) -> None:
        await self.mount(Static(welcome(keys or keymap_for(None)), id="welcome", markup=False))

    def _drop_welcome(self) -> None:
        for widget in self.query("#welcome"):
            widget.remove()

    async def _drop_tail(self) -> None:
        """A turn starts: an opened conversation's unsettled end leaves the screen (the new turn is its
        sibling in the history, see :mod:`app.tui.widgets.unsettled_tail`)."""
        for tail in list(self.query(UnsettledTail)):
            await tail.remove()

    async def add_user(self, text: str) -> UserMessage:
        self._drop_welcome()
        await self._drop_tail()
        widget = UserMessage(text)
        await self.mount(widget)
        return widget

    async def add_assistant(self) -> AssistantMessage:
        from app.tui.widgets.assistant_message import AssistantMessage  # Markdown: not for the first frame

        self._drop_welcome()
        await self._drop_tail()
        widget = AssistantMessage()
        await self.mount(widget)
        return widget

    async def add_notice(self, text: str, kind: str = "info") -> Notice:
        self._drop_welcome()
        widget = Notice(text, kind)
        await self.mount(widget)
        return widget

    async def show_messages(self, messages: Sequence[ChatMessage], *, tail: Sequence[ChatMessage] = (),
                            tail_note: str = "") -> None:
        """Replace the view with a stored conversation: the newest page now, the rest on request.

        ``tail``: its unsettled end (a reply another window is writing, a message never answered), shown
        after it, apart and marked (:class:`UnsettledTail`), with ``tail_note`` under it."""
        self._hidden = [m for m in messages if m.role in ("user", "assistant", "tool", "summary")]
        calls = {c.get("id"): c for m in self._hidden for c in (m.tool_calls or [])}
        # a stored tool result is shown as its call's block: pair each with the call it answers
        self._calls = {id(m): calls.get(m.tool_call_id) for m in self._hidden if m.role == "tool"}
        await self.remove_children()
        await self._show_page()
        if tail:
            self._drop_welcome()
            await self.mount(UnsettledTail(tail, tail_note))
        self.scroll_end(animate=False, immediate=True)

    async def _show_page(self) -> None:
        page, self._hidden = self._hidden[-PAGE:], self._hidden[:-PAGE]
        widgets = [self._stored_widget(m) for m in page]
        for old in self.query(EarlierMessages):
            await old.remove()
        if self._hidden:
            widgets.insert(0, EarlierMessages(len(self._hidden)))
        if self.children:
            await self.mount_all(widgets, before=0)
        else:
            await self.mount_all(widgets)

    def _stored_widget(self, message: ChatMessage) -> Widget:
        from app.tui.widgets.assistant_message import AssistantMessage

        if message.role == "user":
            return UserMessage(message.content)
        if message.role == "summary":  # turns compacted out of the prompt (app.conversation.compaction)
            from app.tui.widgets.summary_message import SummaryMessage

            return SummaryMessage(message)
        if message.role == "tool":
            from app.tui.widgets.tool_call_block import ToolCallBlock

            return ToolCallBlock.stored(self._calls.get(id(message)), message)
        return AssistantMessage(content=message.content, reasoning=message.reasoning,
                                stats=message.stats, stored=True, opening=message.opening,
                                finish_reason=message.finish_reason)

    async def on_earlier_messages_requested(self, message: EarlierMessages.Requested) -> None:
        message.stop()
        await self._show_page()

    async def clear(self) -> None:
        self._hidden = []
        await self.remove_children()

    def last_assistant(self) -> AssistantMessage | None:
        from app.tui.widgets.assistant_message import AssistantMessage

        replies = self.query_children(AssistantMessage)  # never one of an unsettled end (UnsettledTail)
        return replies.last() if replies else None

    async def remove_from_last(self, widget_type: type) -> None:
        """Remove the last widget of ``widget_type`` and everything after it (regenerate, edit)."""
        children = list(self.children)
        for index in range(len(children) - 1, -1, -1):
            if isinstance(children[index], widget_type):
                await self.remove_children(children[index:])
                return
