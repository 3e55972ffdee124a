"""The scrolling conversation: user turns, replies and notices, newest at the bottom.

Autoscroll is Textual's anchor: the view follows new text until the user
scrolls up, and follows again once they scroll back to the bottom.
"""
from __future__ import annotations

from textual.containers import VerticalScroll
from textual.widgets import Static

from app.tui.widgets.assistant_message import AssistantMessage
from app.tui.widgets.notice import Notice
from app.tui.widgets.user_message import UserMessage

WELCOME = (
    "Type a message and press Enter (Ctrl+J for a new line).  "
    "Esc stops a reply, Ctrl+R regenerates it, Ctrl+P opens the commands, /help lists them."
)


class ChatView(VerticalScroll):
    """Holds the turn widgets; everything is appended at the bottom."""

    DEFAULT_CSS = """
    ChatView { height: 1fr; padding: 0 0 1 0; }
    ChatView > #welcome { color: $text-muted; margin: 1 2; }
    """

    def on_mount(self) -> None:
        self.anchor()

    async def show_welcome(self, text: str = WELCOME) -> None:
        await self.mount(Static(text, id="welcome", markup=False))

    def _drop_welcome(self) -> None:
        for widget in self.query("#welcome"):
            widget.remove()

    async def add_user(self, text: str) -> UserMessage:
        self._drop_welcome()
        widget = UserMessage(text)
        await self.mount(widget)
        return widget

    async def add_assistant(self) -> AssistantMessage:
        self._drop_welcome()
        widget = AssistantMessage()
        await self.mount(widget)
        return widget

    async def add_notice(self, text: str, kind: str = "info") -> Notice:
        self._drop_welcome()
        widget = Notice(text, kind)
        await self.mount(widget)
        return widget

    async def show_messages(self, messages) -> None:
        """Replace the view with a stored conversation, mounted in one batch."""
        widgets = []
        for message in messages:
            if message.role == "user":
                widgets.append(UserMessage(message.content))
            elif message.role == "assistant":
                widgets.append(AssistantMessage(content=message.content, reasoning=message.reasoning,
                                                stats=message.stats, stored=True))
        await self.remove_children()
        await self.mount_all(widgets)
        self.scroll_end(animate=False, immediate=True)

    async def clear(self) -> None:
        await self.remove_children()

    def last_assistant(self) -> AssistantMessage | None:
        replies = self.query(AssistantMessage)
        return replies.last() if replies else None

    async def remove_from_last(self, widget_type: type) -> None:
        """Remove the last widget of ``widget_type`` and everything after it (regenerate, edit)."""
        children = list(self.children)
        for index in range(len(children) - 1, -1, -1):
            if isinstance(children[index], widget_type):
                await self.remove_children(children[index:])
                return
