"""Opening the token inspector from the chat: ``/tokens``, F2, the palette, a double click.

:class:`TokenInspectorOpener` is held by the chat window (``app.inspector``).
The inspector shows the :class:`~app.conversation.context_breakdown.PromptRecord`
a reply kept: the last one by default; a double click on a reply opens the
prompt that reply answered, and on a user message the prompt that message was
sent in, with its ids selected.  Turns loaded from the history, and live
replies older than the newest :data:`app.conversation.session.RECORDS_KEPT`,
have no record: their prompt is rebuilt from the stored text, and the title
says so.  The inspector screen asks for another turn with a
:class:`~app.tui.screens.token_inspector.TokenInspector.TurnRequested`
message, which the window routes to :meth:`TokenInspectorOpener.inspect_turn`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from textual import events

from app.tui.host import ChatHost
from app.tui.widgets.user_message import UserMessage

if TYPE_CHECKING:
    from textual.dom import DOMNode

    from app.conversation.context_breakdown import PromptRecord
    from app.conversation.messages import ChatMessage
    from app.conversation.session import ChatSession


def _message_widgets() -> tuple[type, type]:
    """The chat's message widget classes (imported on first use: Markdown is not needed to paint)."""
    from app.tui.widgets.assistant_message import AssistantMessage

    return UserMessage, AssistantMessage


class TokenInspectorOpener:
    """Which prompt record to show, and the screen that shows it.

    ``draft_tokens(text)``: what the draft in the box would cost as sent (attached files
    included), shown in the inspector's breakdown; the attachments feature knows that.
    """

    def __init__(self, host: ChatHost, draft_tokens: Callable[[str], int]) -> None:
        self.host = host
        self.draft_tokens = draft_tokens

    async def command(self, arg: str) -> None:
        """``/tokens``."""
        self.show()

    def show(self, message: ChatMessage | None = None) -> None:
        host = self.host
        session = host.session
        if session is None:
            host.notify("No model is loaded yet: the inspector shows what a turn sent", severity="warning")
            return
        if host.generating:
            host.notify("A reply is still streaming: open the inspector when it has finished", severity="warning")
            return
        record, focus, title, reply = self.record_for(session, message)
        if record is None:
            host.notify("No turn to inspect yet: send a message first", severity="warning")
            return
        draft = host.prompt_input.text
        # the draft as it would be sent, attached files included
        draft_tokens = self.draft_tokens(draft) if not draft.lstrip().startswith("/") else 0
        from app.conversation.context_breakdown import breakdown
        from app.tui.screens.token_inspector import TokenInspector

        parts = breakdown(session.tokenizer, record, draft_tokens=draft_tokens, count=session.token_count,
                          extra_spans=session.tool_schema_spans(record))
        turn = int(title.split()[1]) if title.startswith("turn ") else 0
        stats = reply.stats if reply is not None else None
        new = stats.new_prompt_tokens if stats is not None and stats.prompt_tokens == len(record.ids) else None
        host.push_screen(TokenInspector(session.tokenizer, record, parts, title=title, focus_message=focus,
                                        turn=turn, new_ids=new,
                                        state=stats.state if stats is not None and new is not None else ""))

    def inspect_turn(self, turn: int) -> None:
        """Replace the open inspector with turn ``turn`` (1-based, counted in replies)."""
        host = self.host
        replies = [m for m in host.session.messages if m.role == "assistant"] if host.session else []
        if not 1 <= turn <= len(replies):
            host.notify(f"no turn {turn}: this conversation has {len(replies)}", severity="warning")
            return
        from app.tui.screens.token_inspector import TokenInspector

        if isinstance(host.screen, TokenInspector):
            host.pop_screen()
        self.show(replies[turn - 1])

    @staticmethod
    def record_for(session: ChatSession, message: ChatMessage | None
                   ) -> tuple[PromptRecord | None, int | None, str, ChatMessage | None]:
        """The record to show for ``message`` (None: the last turn), the message's index in it, a title,
        and the reply the record answered (whose stats say how many of its prompt ids were new).

        A reply without a record (a resumed chat) gets one rebuilt from the
        stored text, and the title says so.
        """
        messages = session.messages
        replies = [i for i, m in enumerate(messages) if m.role == "assistant"]
        if not replies:
            return None, None, "", None
        reply_index: int | None
        if message is None:
            reply_index = replies[-1]
        else:
            index = next((i for i, m in enumerate(messages) if m is message), None)
            if index is None:
                return None, None, "", None
            reply_index = next((i for i in replies if i >= index), None)
            if reply_index is None:
                return None, None, "", None
        turn = replies.index(reply_index) + 1
        record = messages[reply_index].record
        title = f"turn {turn}"
        if record is None:
            record = session.rebuilt_record(reply_index)
            title += " (rebuilt from the stored text: its ids were not kept)"
        focus = next((i for i, m in enumerate(record.messages) if m is message), None) if message else None
        return record, focus, title, messages[reply_index]

    def message_for_widget(self, widget: DOMNode) -> ChatMessage | None:
        """The session message a chat widget shows (matched from the newest end, by role)."""
        view = self.host.chat_view
        shown = [w for w in view.children if isinstance(w, _message_widgets())]
        messages = [m for m in self.host.session.messages if m.role in ("user", "assistant")]
        if widget not in shown:
            return None
        offset = len(shown) - shown.index(widget)
        if offset > len(messages):
            return None
        message = messages[-offset]
        expected = "user" if isinstance(widget, UserMessage) else "assistant"
        return message if message.role == expected else None

    def clicked(self, event: events.Click) -> None:
        """A double click on a message opens its tokens."""
        if getattr(event, "chain", 1) < 2 or self.host.session is None:
            return
        widget: DOMNode | None = event.widget
        while widget is not None and not isinstance(widget, _message_widgets()):
            widget = widget.parent
        if widget is None:
            return
        message = self.message_for_widget(widget)
        if message is not None:
            self.show(message)
