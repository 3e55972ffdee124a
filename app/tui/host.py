"""What a TUI feature may use of the chat window: :class:`ChatHost`.

The chat's features (attachments, paste chips, branches, the token inspector,
model downloads, tools, history, steering, slash commands) are objects the
window holds (``app.attachments``, ``app.history`` ...), each owning its own
state.  They are handed the window as a ``ChatHost``: the part of it that
belongs to the whole chat (the loaded model and session, the chat view, the
prompt box, the meter and the turn machinery) plus Textual's own App API
(notify, screens, workers, messages).  Typing them against this protocol,
never against :class:`app.tui.app.ChatApp`, is what keeps the features from
importing the window (no import circle) and from reaching into its private
state; what one feature tells another goes through the window's handlers
(Textual messages) or through the feature objects the window wires together.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol, TypeVar, overload

if TYPE_CHECKING:
    from app.conversation.session import ChatSession
    from textual.notifications import SeverityLevel
    from textual.timer import Timer
    from textual.widget import Widget

    from app.settings.options import ChatOptions
    from app.tui.keys import KeyMap
    from app.tui.loader import LoadedChat
    from app.tui.widgets.chat_view import ChatView
    from app.tui.widgets.prompt_input import PromptInput

#: a widget class asked for by type (``query_one(ChatView)``), as Textual's own ``QueryType``
W = TypeVar("W", bound="Widget")


class ChatHost(Protocol):
    """The chat window as its features see it (implemented by :class:`app.tui.app.ChatApp`)."""

    options: ChatOptions
    #: the keys in use ([keys] over the defaults): what hints and /help name
    keys: KeyMap
    chat: LoadedChat | None
    generating: bool
    sub_title: str

    @property
    def session(self) -> Any: ...

    @property
    def chat_view(self) -> ChatView: ...

    @property
    def prompt_input(self) -> PromptInput: ...

    @property
    def screen(self) -> Any: ...

    # -- the chat's own machinery ----------------------------------------------------------------
    def need_session(self, name: str) -> ChatSession: ...

    def ready_to_generate(self) -> bool: ...

    def end_edit(self, why: str) -> None: ...

    def update_meter(self) -> None: ...

    def update_draft(self) -> None: ...

    def show_model(self) -> None: ...

    def use_template(self, name: str) -> str | None: ...

    async def start_reply(self, make_events: Callable[[], Iterator[Any]], user_text: str | None, *,
                          into: Any = None, opening: str = "") -> None: ...

    # -- Textual's App API (the subset the features use) -----------------------------------------
    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None: ...

    def push_screen(self, screen: Any, callback: Any = None, wait_for_dismiss: bool = False) -> Any: ...

    def pop_screen(self) -> Any: ...

    def query(self, selector: Any = None) -> Any: ...

    @overload
    def query_one(self, selector: str) -> Widget: ...

    @overload
    def query_one(self, selector: type[W]) -> W: ...

    @overload
    def query_one(self, selector: str, expect_type: type[W]) -> W: ...

    def post_message(self, message: Any) -> bool: ...

    def call_later(self, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> bool: ...

    def call_from_thread(self, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...

    def set_interval(self, interval: float, callback: Callable[[], Any] | None = None, *, name: str | None = None,
                     repeat: int = 0, pause: bool = False) -> Timer: ...

    def run_worker(self, work: Any, name: str | None = "", group: str = "default", description: str = "",
                   exit_on_error: bool = True, start: bool = True, exclusive: bool = False,
                   thread: bool = False) -> Any: ...

    def refresh_bindings(self) -> None: ...

    def copy_to_clipboard(self, text: str) -> None: ...

    def log(self, *objects: Any, **kwargs: Any) -> None: ...
