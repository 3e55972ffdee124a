"""The tokchat chat window: layout, model loading, sending and streaming.

The window opens at once; the model loads in a thread worker while the
header shows what is loading.  Each reply runs in its own thread worker
(:meth:`ChatApp._generate`), which moves the session's ReplyEvents into an
:class:`~app.tui.generation.EventBuffer`; the event loop drains it and
appends to the reply's Markdown stream.

The window keeps what belongs to the whole chat: the loaded model and its
session, the chat view, the prompt box and meter, the turn being streamed, and
the key bindings.  Each feature is an object it holds and that owns its own
state, typed against :class:`app.tui.host.ChatHost` (never this class):
``attachments`` (:mod:`app.tui.attach`), ``paste_chips``
(:mod:`app.tui.paste_chips`), ``branches`` (:mod:`app.tui.branches`),
``inspector`` (:mod:`app.tui.inspect`), ``pull`` (:mod:`app.tui.pull`),
``tools`` (:mod:`app.tui.tools`), ``history`` (:mod:`app.tui.history`),
``steer`` (:mod:`app.tui.steer`) and ``commands`` (:mod:`app.tui.commands`, the
slash-command table).  Widgets and features tell the window things with Textual
messages; its ``on_...`` handlers route each to the feature that owns it.
"""
from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.timer import Timer
from textual.widgets import Footer, TextArea
from textual.worker import get_current_worker

from textual import events
from textual.app import SystemCommand
from textual.screen import Screen

from app.conversation.compaction import next_send
from app.settings.options import ChatOptions
from app.tui.attach import Attachments
from app.tui.branches import Branches
from app.tui.commands import SlashCommands
from app.tui.compaction import Compaction
from app.tui.format import device_label, error_text, model_bar_text
from backends.constraint import describe
from app.tui.generation import EventBuffer, pump
from app.tui.history import ChatHistory
from app.tui.inspect import TokenInspectorOpener
from app.tui.keys import default as key
from app.tui.keys import keymap_for
from app.tui.loader import LoadedChat, Loader, load_chat
from app.tui.paste_chips import PasteChips
from app.tui.prompt_progress import PromptProgressWatch
from app.tui.pull import ModelPull
from app.tui.slash import SlashError
from app.tui.steer import Steering
from app.tui.tools import ChatTools
from app.tui.widgets.attachment_chips import AttachmentChips
from app.tui.widgets.chat_view import ChatView
from app.tui.widgets.context_meter import ContextMeter
from app.tui.widgets.history_sidebar import HistorySidebar
from app.tui.widgets.model_bar import ModelBar
from app.tui.widgets.prompt_input import PromptInput
from app.tui.widgets.user_message import UserMessage

if TYPE_CHECKING:  # imported where a reply is shown: Markdown is not needed for the first frame
    from app.conversation.session import ChatSession
    from app.tui.screens.token_inspector import TokenInspector
    from app.tui.widgets.assistant_message import AssistantMessage

#: how long typing must pause before the draft is re-tokenized for the meter
DRAFT_DEBOUNCE_S = 0.15
#: the shortest time between two updates of a streaming reply (30 per second)
FRAME_S = 1 / 30


__all__ = ["ChatApp", "error_text"]


class ChatApp(App):
    """``tokchat``'s TUI.  ``loader`` and ``stats_filter`` are for tests and benchmarks."""

    # layout only (colours come from the theme); inline so that no data file has to be packaged
    CSS = """
    #main { height: 1fr; }
    #chat-column { height: 1fr; width: 1fr; }
    #prompt { margin: 0 1; border: round $primary 60%; }
    #prompt:focus { border: round $primary; }
    #footer-bar { dock: bottom; height: 1; }
    #footer-bar > Footer { dock: none; width: 1fr; }
    """
    TITLE = "tokchat"
    # each id is the key's name under [keys] in the config (app.tui.keys): the user's keys are the keymap
    BINDINGS = [
        Binding(key("cancel"), "stop", "Stop", tooltip="stop the reply; the partial text is kept", id="cancel"),
        Binding(key("regenerate"), "regenerate", "Regen", tooltip="regenerate the last reply", id="regenerate"),
        Binding(key("edit_last"), "edit_last", "Edit", tooltip="edit the last prompt and resend it", id="edit_last"),
        Binding(key("continue_reply"), "continue_reply", "Continue", show=False,
                tooltip="continue the last reply (cut or stopped)", id="continue_reply"),
        Binding(key("toggle_thinking"), "toggle_thinking", "Think", tooltip="show or hide the last thinking block",
                id="toggle_thinking"),
        Binding(key("copy_reply"), "copy_reply", "Copy", tooltip="copy the last reply", id="copy_reply"),
        Binding(key("toggle_sidebar"), "toggle_history", "History", tooltip="stored conversations",
                id="toggle_sidebar"),
        Binding(key("new_chat"), "new_chat", "New", tooltip="start a new conversation", id="new_chat"),
        Binding(key("previous_reply"), "branch(-1)", "Prev sibling", show=False,
                tooltip="the previous regenerated reply", id="previous_reply"),
        Binding(key("next_reply"), "branch(1)", "Next sibling", show=False, tooltip="the next regenerated reply",
                id="next_reply"),
        Binding(key("token_inspector"), "show_tokens", "Tokens", show=False, tooltip="the token inspector",
                id="token_inspector"),
        Binding(key("quit"), "quit", "Quit", show=False, priority=True, tooltip="quit tokchat", id="quit"),
    ]

    #: a reply is streaming
    generating: reactive[bool] = reactive(False)

    @dataclass
    class ReplyArrived(Message):
        """The generation thread queued events in ``buffer`` (drain it)."""

        buffer: EventBuffer

    @dataclass
    class ModelLoaded(Message):
        chat: LoadedChat
        #: the options it was loaded with: the window's from now on
        options: ChatOptions

    @dataclass
    class ModelLoadFailed(Message):
        error: str

    #: the paste chips (made in __init__ after the attachments, whose callback already names them)
    paste_chips: PasteChips

    def __init__(self, options: ChatOptions, *, loader: Loader | None = None,
                 stats_filter: Callable[[Any], Any] | None = None, store: Any = None,
                 with_preset: Callable[[], ChatOptions] | None = None) -> None:
        super().__init__()
        self.options = options
        #: the same options with the model's preset applied, built in the load thread (it reads the model)
        self._with_preset = with_preset
        #: the model ``/model`` opens next (its preset is applied in the load thread)
        self._next_model: str | None = None
        #: the options ``/server`` loads with next; they become :attr:`options` only once that load succeeded
        self._next_options: ChatOptions | None = None
        #: what is loading now (shown in one line when a message or a command has to wait for it), else None
        self._loading: str | None = None
        #: a model whose download ended while a reply streamed: it loads when the reply has finished
        self._model_after_reply: str | None = None
        #: what the last load set aside for the model it loaded (a draft model of another vocabulary), shown with it
        self._load_notice: str | None = None
        self.loader: Loader = loader or load_chat
        #: applied to every TurnStats before it is shown (snapshots pin the timings)
        self.stats_filter = stats_filter or (lambda stats: stats)
        self.chat: LoadedChat | None = None
        self.reply: AssistantMessage | None = None
        self._meter_base = 0
        self._streamed = 0
        self._errors: list[str] = []
        self._buffer: EventBuffer | None = None
        self._last_drain = 0.0
        self._drain_pending = False
        #: set when the current generation thread has returned (the engine may then be closed)
        self._generation_done = threading.Event()
        self._generation_done.set()
        #: how the session's step of the current turn ended (None until it has; see start_reply)
        self._turn_outcome: Any = None
        self._turn_typed: str | None = None
        self._draft_timer: Timer | None = None
        #: what the prompt box last held, and the message being sent until its turn has started:
        #: printed after a crash (app.tui.exit_status) so that what was typed is never lost
        self._draft_text = ""
        self._sending: str | None = None
        # the features, each owning its state (see the module's docstring)
        self.attachments = Attachments(self, changed=lambda held: self.paste_chips.show(held))
        self.paste_chips = PasteChips(self, self.attachments)
        self.branches = Branches(self)
        self.inspector = TokenInspectorOpener(self, draft_tokens=self.attachments.show_cost)
        self.pull = ModelPull(self)
        self.tools = ChatTools(self)
        #: the keys in use: [keys] over the defaults (the footer, /help and the history list show them)
        self.keys = keymap_for(options.keys)
        self.history = ChatHistory(self, store, self.branches)
        self.steer = Steering(self, self.history)
        self.compaction = Compaction(self, self.history)
        self.commands = SlashCommands(self, self.history, reload=self.reload, features={
            "attach": self.attachments.command, "branch": self.branches.command,
            "tokens": self.inspector.command, "model": self.pull.command, "tools": self.tools.command,
            "continue": self.steer.cmd_continue, "reply": self.steer.cmd_reply, "fork": self.steer.cmd_fork,
            "think": self.steer.cmd_think, "history": self.history.command,
            "compact": self.compaction.cmd_compact, "pin": self.compaction.cmd_pin,
        })

    # ----------------------------------------------------------------- layout
    def compose(self) -> ComposeResult:
        yield ModelBar()
        with Horizontal(id="main"):
            yield HistorySidebar()
            with Vertical(id="chat-column"):
                yield ChatView()
                yield AttachmentChips()
                yield PromptInput(id="prompt")
        with Horizontal(id="footer-bar"):
            yield Footer()
            yield ContextMeter()

    @property
    def chat_view(self) -> ChatView:
        return self.query_one(ChatView)

    @property
    def prompt_input(self) -> PromptInput:
        return self.query_one(PromptInput)

    @property
    def meter(self) -> ContextMeter:
        return self.query_one(ContextMeter)

    @property
    def session(self) -> Any:
        return self.chat.session if self.chat else None

    async def on_mount(self) -> None:
        if self.options.theme:
            if self.options.theme in self.available_themes:
                self.theme = self.options.theme
            else:
                self.notify(f"unknown theme {self.options.theme!r}; choose one with Ctrl+P > Change theme",
                            severity="warning")
        self.set_keymap(self.keys.textual())
        if self.keys.problem:
            self.notify(self.keys.problem, severity="error", timeout=15, markup=False)
        await self.chat_view.show_welcome(self.keys)
        self.prompt_input.chip_rule = self.paste_chips.paste_is_chip
        self.prompt_input.use_keys(self.keys)
        self.prompt_input.focus()
        # after the first frame: the load thread would otherwise compete with it for the GIL
        self.call_after_refresh(self.start_load)

    # ------------------------------------------------------------ model load
    def start_load(self) -> None:
        self.query_one(ModelBar).state = "loading"
        options = self._next_options or self.options
        if self._next_options is not None and options.server is not None:
            self._loading = f"the server {options.server.url}"
        else:
            model = self._next_model or options.model or "the model"
            self._loading = Path(model).name if "/" in model else model
        self._load()

    def reload(self, options: ChatOptions) -> None:
        """``/server``: load again with ``options``; they are the window's once that load succeeded (a server
        that cannot be reached leaves the chat as it was, and the next ``/model`` loads here as before)."""
        if self.refused_while_loading("/server"):
            return
        self._next_options = options
        self.start_load()

    def load_model(self, model: str) -> None:
        """``/model``: load ``model`` with its own preset (sampling, template, context).

        What ``/temp`` and the other sampling commands set in this session was
        the user's choice, as a flag is: it goes on with the new model (the
        preset fills only what nobody set), instead of the options the window
        was opened with.  A reply streaming now finishes first: the engine
        writing it is closed only once the new one is loaded, so the new model
        loads after the reply (a download that ended mid-reply)."""
        if self.generating:
            self._model_after_reply = model
            self.notify(f"{Path(model).name} loads when this reply has finished (Esc stops it)")
            return
        if self.refused_while_loading("/model"):
            return
        if self.chat is not None:
            self.options = replace(self.options, sampling=replace(self.chat.session.sampling))
        self._next_model = model
        self.start_load()

    def refused_while_loading(self, what: str) -> bool:
        """Say in one line that ``what`` waits for the model loading now; True when one is loading."""
        if self._loading is None:
            return False
        self.notify(f"{self._loading} is still loading: {what} has to wait until it is ready", severity="warning")
        return True

    @work(thread=True, exclusive=True, group="load")
    def _load(self) -> None:
        def progress(text: str) -> None:
            self.call_from_thread(self._show_progress, text)

        try:
            if self._with_preset is not None:
                # the preset (template, sampling, context) comes from the model's header: read here,
                # not before the first frame; the header is then handed on to the loader
                self.options, self._with_preset = self._with_preset(), None
            options, self._next_options = self._next_options or self.options, None
            load_options, self._load_notice = options, None
            if self._next_model is not None:
                from app.tui.loader import draft_for_model, options_for_model

                model, self._next_model = self._next_model, None
                options = options_for_model(options, model)
                load_options, self._load_notice = draft_for_model(options)
            chat = self.loader(load_options, progress)
            # the reply widget (Markdown) is imported here, off the event loop, before the first reply
            import app.tui.widgets.assistant_message  # noqa: F401
        except Exception as exc:  # shown on screen; the app stays usable
            self.post_message(self.ModelLoadFailed(error_text(exc)))
            return
        self.post_message(self.ModelLoaded(chat, options))

    def _show_progress(self, text: str) -> None:
        self.query_one(ModelBar).text = text + " …"

    async def on_chat_app_model_loaded(self, message: ModelLoaded) -> None:
        # no turn starts while a model loads (ready_to_generate, need_session) and no load starts during a
        # turn (load_model): the old engine, closed below, never has a reply running
        assert not self.generating, "a model finished loading while a reply streamed"
        self._loading = None
        self.options = message.options
        old, self.chat = self.chat, message.chat
        chat = message.chat
        if old is not None:
            self.end_edit("model changed")
            # /model: the conversation goes on with the new model (re-tokenized by its tokenizer)
            chat.session.set_system(old.session.system_prompt)
            chat.session.load_messages(old.session.messages, old.session.branches)
            chat.session.compact_policy = old.session.compact_policy  # /compact is the chat's, not the model's
            if old.backend is not chat.backend:
                old.backend.close()
        self.show_model()
        if chat.template_notice:
            await self.chat_view.add_notice(chat.template_notice, "warning")
        for note in getattr(chat.info, "notes", []):
            await self.chat_view.add_notice(note)
        if self._load_notice:
            await self.chat_view.add_notice(self._load_notice, "warning")
        self.steer.apply_remembered()  # thinking and budget remembered for this model
        self.update_meter()
        self.history.model_ready()
        self.attachments.model_changed()  # held files and chips priced by this model's tokenizer
        self.tools.start()
        self.query_one(ModelBar).state = "ready"  # last: tests wait for this

    def show_model(self) -> None:
        chat = self.chat
        assert chat is not None
        info = chat.info
        bar = self.query_one(ModelBar)
        held = chat.session.sampling.constraint  # a format from the config or a preset, or /format's
        bar.reply_format = describe(held) if held is not None and held.kind != "tool_calls" else ""
        bar.text = model_bar_text(info.model_name or chat.model_path.stem, info.quantization,
                                  info.backend, device_label(info.device, getattr(info, "offloaded_layers", 0),
                                                             getattr(info, "total_layers", 0)),
                                  chat.session.template.name,
                                  chat.context_size, getattr(info, "caveat", ""))
        self.meter.limit = chat.context_size

    def use_template(self, name: str) -> str | None:
        """Chat on with the template ``name`` (``/template``; a reopened conversation stored with another):
        a new session with the same turns and every setting (:meth:`ChatSession.with_template`).  Returns
        the resolver's notice (``auto`` fell back); raises TemplateError (one line) for a name the model
        cannot use."""
        from templates import resolve_template

        chat = self.chat
        assert chat is not None
        template, notice = resolve_template(name, chat.tokenizer)
        chat.session = chat.session.with_template(template)
        chat.template = template
        self.show_model()
        self.update_meter()
        return notice

    async def on_chat_app_model_load_failed(self, message: ModelLoadFailed) -> None:
        self._loading = None
        bar = self.query_one(ModelBar)
        if self.chat is not None:  # a /model that failed: the loaded model stays
            self.show_model()
            bar.state = "ready"
            await self.chat_view.add_notice(f"Could not load the model: {message.error}\n"
                                            "Still chatting with the model loaded before.", "error")
            self.notify(message.error, title="Model not loaded", severity="error", timeout=8)
            return
        bar.state = "failed"
        bar.text = "no model loaded"
        await self.chat_view.add_notice(
            f"Could not load the model: {message.error}\n"
            "Open another with /model PATH.gguf, browse old chats with Ctrl+B, "
            "or quit (Ctrl+Q) and run `tokchat doctor`.", "error")
        self.notify(message.error, title="Model not loaded", severity="error", timeout=8)

    # ---------------------------------------------------------------- input
    @on(PromptInput.Submitted)
    async def on_prompt_submitted(self, message: PromptInput.Submitted) -> None:
        if message.reply is not None and message.reply.strip():
            # an edited reply is sent as it stands: parsing it as a command would strip its whitespace
            self._sending = message.text
            self.prompt_input.remember(message.text)
            self.prompt_input.load_text("")
            await self.commands.run_named("reply", message.reply)
            self._sending = None
            return
        await self.submit(message.text, editing=message.editing)

    @on(PromptInput.EditEnded)
    def on_edit_ended(self, message: PromptInput.EditEnded) -> None:
        self.notify(message.why)
        self.update_draft()

    def end_edit(self, why: str) -> None:
        """The conversation on screen changes: an edit pending for the old one ends (its text stays)."""
        self.prompt_input.conversation_changed(why)

    async def submit(self, text: str, *, editing: bool = False) -> None:
        """Run a slash command or send a prompt (what Enter does)."""
        from app.tui.slash import SlashError, parse_slash, unescape_prompt

        try:
            command = parse_slash(text)
        except SlashError as exc:
            self.notify(str(exc), severity="error")
            return
        if command is not None:
            self._sending = text
            self.prompt_input.remember(text)
            self.prompt_input.load_text("")
            await self.commands.run(command)
            self._sending = None
            return
        if not self.ready_to_generate():
            return
        typed = unescape_prompt(text)
        held = list(self.attachments.pending)
        message = self.attachments.message_with_attachments(typed)  # held files and @file words, in blocks
        if message is None:
            return  # a file was refused (said in one line); the draft stays for another try
        text = message
        why = self.attachments.refusal(text, held)  # the session's rule, said for the files held
        if why is not None:  # refused before the box is cleared: the draft and the files stay
            self.attachments.restore(held, self.prompt_input.text)
            self.notify(why, title="Not sent", severity="error", timeout=10)
            return
        self._sending = typed
        self.prompt_input.remember(typed)
        self.prompt_input.load_text("")
        editing = editing and self.prompt_input.editing
        self.prompt_input.editing = False
        if editing and any(m.role == "user" for m in self.session.messages):
            self.history.record_user(text, replacing="prompt")
            await self.chat_view.remove_from_last(UserMessage)
            await self.chat_view.add_user(text)
            await self.start_reply(lambda: self.session.edit_last_user(text), text)
        else:
            self.history.record_user(text)
            await self.chat_view.add_user(text)
            await self.start_reply(lambda: self.session.send(text), text)
        self._sending = None

    def ready_to_generate(self) -> bool:
        if self.chat is None:
            self.notify("No model is loaded yet: wait for it, or open one with /model PATH.gguf",
                        severity="warning")
            return False
        if self.generating:
            self.notify("A reply is still streaming: wait, or press Esc to stop it", severity="warning")
            return False
        if self._loading is not None:  # the engine that would answer is closed when the load ends
            self.notify(f"{self._loading} is still loading: send when it is ready (the message stays in the box)",
                        severity="warning")
            return False
        return True

    def need_session(self, name: str) -> ChatSession:
        """The session, for a command that needs a loaded model, no reply streaming and no model loading
        (a load ends by moving the conversation to the new model's session and closing the old engine)."""
        if self.session is None:
            raise SlashError(f"/{name} needs a loaded model: open one with /model PATH.gguf")
        if self.generating:
            raise SlashError(f"/{name} has to wait until the reply finishes (Esc stops it)")
        if self._loading is not None:
            raise SlashError(f"{self._loading} is still loading: /{name} has to wait until it is ready")
        return self.session

    def unsent_text(self) -> str:
        """The message being sent when the app stopped, else the text in the prompt box."""
        return self._sending if self._sending is not None else self._draft_text

    @on(TextArea.Changed, "#prompt")
    def on_draft_changed(self, message: TextArea.Changed) -> None:
        self._draft_text = message.text_area.text
        if self._draft_timer is not None:
            self._draft_timer.stop()
        self._draft_timer = self.set_timer(DRAFT_DEBOUNCE_S, self.update_draft)

    def update_draft(self) -> None:
        """Tokenize the draft for the meter (debounced)."""
        boxes = self.query(PromptInput)
        if not boxes:
            return  # the app is closing
        box = boxes.first()
        text = box.text
        if self.session is not None and not self.generating:
            self.meter.used = self._kept_tokens(box.editing)
        if self.session is None or text.lstrip().startswith("/") or self.generating:
            self.meter.draft = 0
            self.attachments.show_cost()
            if self.session is not None and not self.generating:
                self.meter.next_send = next_send(self.session, "").describe()
            return
        # the message as it will be sent: held and @file attachments in blocks, then the text
        self.meter.draft = self.attachments.show_cost(text)
        self.meter.next_send = next_send(self.session, text).describe()

    def _kept_tokens(self, editing: bool) -> int:
        """What the next prompt keeps of the conversation: all of it, or, while the last prompt is
        being edited, what comes before it (the draft replaces that prompt and its reply)."""
        session = self.session
        if editing:
            last = max((i for i, m in enumerate(session.messages) if m.role == "user"), default=None)
            if last is not None:
                return session.tokens_before(last)
        return session.context_used

    def update_meter(self) -> None:
        if self.session is not None and self.chat is not None:
            self.meter.used = self._kept_tokens(self.prompt_input.editing)
            self.meter.limit = self.chat.context_size
            if not self.generating:  # what the next send does (app.conversation.compaction), said before it
                self.meter.next_send = next_send(self.session, self._draft_text).describe()

    # ------------------------------------------------------------ streaming
    async def start_reply(self, make_events: Callable[[], Iterator[Any]], user_text: str | None, *,
                          into: AssistantMessage | None = None, opening: str = "") -> None:
        """Open a reply widget and run ``make_events`` (session.send/regenerate/edit) in a worker.

        ``into``: the reply widget a continuation streams into (/continue); ``opening``: the reply's
        start the user wrote (/reply), shown at once and marked as theirs."""
        from app.conversation.turn import watch_outcome

        session = self.session
        self._turn_outcome = None
        #: what the user typed for this turn (None for a regenerate), put back if the turn is refused
        self._turn_typed = self.prompt_input.sent[-1] if user_text is not None and self.prompt_input.sent else None
        self._meter_base = session.context_used + (session.draft_tokens(user_text) if user_text else 0)
        self._streamed = 0
        self._prompt_before = session.last_prompt
        self._errors = []
        self.meter.draft = 0
        self.meter.next_send = ""
        self.meter.used = self._meter_base
        if into is not None:
            into.reopen()
            self.reply = into
        else:
            self.reply = await self.chat_view.add_assistant()
        if opening:
            await self.reply.show_opening(opening)
        buffer = EventBuffer(lambda: self.post_message(self.ReplyArrived(buffer)))
        self._buffer = buffer
        self.generating = True
        reply = self.reply
        PromptProgressWatch(self, lambda: session.generation_stats, reply,
                            lambda: self.reply is reply and not reply.content and not reply.reasoning)
        self._generation_done = threading.Event()

        def keep_outcome(outcome: Any) -> None:  # in the worker, before its ``done`` reaches the screen
            self._turn_outcome = outcome

        self._generate(lambda: self.tools.with_tools(watch_outcome(make_events(), keep_outcome), buffer), buffer,
                       self._generation_done)

    @work(thread=True, group="generate")
    def _generate(self, make_events: Callable[[], Iterator[Any]], buffer: EventBuffer,
                  done: threading.Event) -> None:
        from app.conversation.session import ReplyEvent

        worker = get_current_worker()
        try:
            pump(make_events(), buffer, lambda: worker.is_cancelled, self.tools.cancel_turn,
                 lambda exc: ReplyEvent("error", text=error_text(exc)))
        finally:
            done.set()

    async def on_chat_app_reply_arrived(self, message: ReplyArrived) -> None:
        if message.buffer is not self._buffer:
            return  # the last wake-up of a generation that has already been finished
        # at most one UI update per frame: a busy event loop holds the GIL, and the generation
        # thread needs it for every token, so updating per token would slow the engine down
        wait = self._last_drain + FRAME_S - time.monotonic()
        if wait > 0:
            if not self._drain_pending:
                self._drain_pending = True
                self.set_timer(wait, lambda: self._drain_later(message))
            return
        await self._drain(message.buffer)

    async def _drain_later(self, message: ReplyArrived) -> None:
        self._drain_pending = False
        if message.buffer is self._buffer:
            await self._drain(message.buffer)

    async def _drain(self, buffer: EventBuffer) -> None:
        self._last_drain = time.monotonic()
        drained = buffer.drain()
        reply = self.reply
        assert reply is not None
        for kind, item in drained.chunks:
            if not isinstance(item, str):  # an event of the tool loop or of compaction
                if kind == "tool_message":  # a message the tool loop added: stored in order
                    self.history.record_message(item.data)
                elif kind == "summary":  # the turns leaving the prompt, summarized first (/compact summarize)
                    await self.compaction.show_summary(item.data, before=reply)
                else:
                    await self.tools.show_event(reply, kind, item)
            elif kind == "content":
                await reply.add_content(item)
                self.history.record_chunk(kind, item)
            elif kind == "reasoning":
                await reply.add_reasoning(item)
                self.history.record_chunk(kind, item)
            elif kind.startswith("tool_"):  # a tool call's text as it is generated
                await self.tools.show_event(reply, kind, item)
            else:
                await self.chat_view.add_notice(item, "warning")
                self.chat_view.move_child(self.chat_view.children[-1], before=reply)
        self._streamed += drained.text_events
        prompt = self.session.last_prompt
        if prompt is not None and prompt is not self._prompt_before:
            self._meter_base = len(prompt.ids)  # this turn's prompt is built: its exact size
        self.meter.used = self._meter_base + self._streamed
        for error in drained.errors:
            self._errors.append(error)
            self.notify(error, title="Generation failed", severity="error", timeout=8)
        if drained.done is None and not drained.finished:
            return
        # "done" is the session's last word (the reply is committed): the turn is over for the
        # UI even if the worker thread has not quite returned yet
        self._buffer = None
        self.reply = None
        stats = drained.done.stats if drained.done is not None else None
        stats = self.stats_filter(stats) if stats is not None else None
        self.tools.turn_finished()
        await reply.finish(stats, error="; ".join(self._errors) or None)
        self.reply_finished(reply)
        self.generating = False
        self.update_meter()
        self.update_draft()
        self._after_reply()

    def _after_reply(self) -> None:
        """A model whose download ended while the reply streamed loads now."""
        model, self._model_after_reply = self._model_after_reply, None
        if model is not None:
            self.load_model(model)

    def reply_finished(self, reply: AssistantMessage) -> None:
        """A reply is complete (or stopped): record it; a turn the session refused changed nothing."""
        outcome = self._turn_outcome
        if outcome is not None and outcome.refused:
            self.call_later(self.turn_refused)
            return
        self.history.record_reply()
        self.call_later(self.branches.show_labels)  # "2/3" above a regenerated reply

    async def turn_refused(self) -> None:
        """The session refused the turn (said in the error): the conversation is as it was, so the
        history goes back to its last message and the screen shows the conversation again."""
        self.history.record_refusal()
        await self.chat_view.show_messages(self.session.messages)
        await self.branches.show_labels()
        if self._turn_typed and not self.prompt_input.text:
            self.prompt_input.load_text(self._turn_typed)  # what was typed, back in the box

    async def on_unmount(self) -> None:
        """Quit: stop a reply still streaming (kept as cancelled), then close history and engine.

        The engine must outlive its generation thread, or the process can crash on exit.
        """
        done = self._generation_done
        if not done.is_set():
            self.tools.cancel_turn()
            deadline = time.monotonic() + 30
            while not done.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        if self._buffer is not None:  # quit mid-reply: the stopped reply is stored as Esc would have
            self.history.record_stopped_reply()
        self.history.close()
        self.tools.close()
        if self.chat is not None:
            self.chat.backend.close()
        self.pull.close()  # a download stops at its next chunk, so the process can exit

    # -------------------------------------------------------------- actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop":
            return self.generating or self.pull.pulling  # Esc in an edit is the prompt box's own binding
        return True

    def watch_generating(self) -> None:
        self.refresh_bindings()

    def action_help_quit(self) -> None:
        """Ctrl+C (when the prompt box has no selection to copy): stop the reply, as in llama-cli
        and ``ollama run``; otherwise cancel a download; on an idle chat, say how to quit."""
        if self.generating or self.pull.pulling:
            self.action_stop()
            return
        super().action_help_quit()

    def action_stop(self) -> None:
        """Esc: stop the reply now; the session keeps the partial text (marked stopped).
        With no reply streaming, Esc cancels a model download (:mod:`app.tui.pull`)."""
        if not self.generating and self.pull.cancel():
            return
        if self.session is not None and self.generating:
            self.tools.cancel_turn()
            self.workers.cancel_group(self, "generate")

    # the keys: each runs what its command runs (app.tui.commands), or its feature
    async def action_regenerate(self) -> None:
        await self.commands.regenerate()

    def action_edit_last(self) -> None:
        self.commands.edit_last()

    def action_toggle_thinking(self) -> None:
        self.commands.toggle_thinking()

    def action_copy_reply(self) -> None:
        self.commands.copy_reply()

    async def action_new_chat(self) -> None:
        await self.commands.run_named("new")

    async def action_continue_reply(self) -> None:
        """Ctrl+L: continue the last reply (cut by max_tokens or stopped)."""
        if not self.ready_to_generate():
            return
        await self.commands.run_named("continue")

    def action_toggle_history(self) -> None:
        self.history.toggle_sidebar()

    async def action_branch(self, step: int) -> None:
        await self.branches.move(step=step)

    def action_show_tokens(self) -> None:
        self.inspector.show()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield from self.commands.palette()

    # ------------------------------------------------- routing: messages to the feature that owns them
    def on_click(self, event: events.Click) -> None:
        self.inspector.clicked(event)  # a double click on a message opens its tokens

    def on_token_inspector_turn_requested(self, message: TokenInspector.TurnRequested) -> None:
        self.inspector.inspect_turn(message.turn)

    def on_model_pull_open(self, message: ModelPull.Open) -> None:
        self.load_model(message.model)

    def on_branches_switched(self, message: Branches.Switched) -> None:
        self.history.show_branch(message.tip_id)

    def on_prompt_input_chip_pasted(self, message: PromptInput.ChipPasted) -> None:
        self.paste_chips.pasted(message.text)

    def on_attachment_chips_chip_action(self, message: AttachmentChips.ChipAction) -> None:
        self.paste_chips.chip_action(message.action, message.index)

    def on_history_sidebar_search_changed(self, message: HistorySidebar.SearchChanged) -> None:
        self.history.refresh(message.text)

    def on_history_sidebar_undo_delete_requested(self) -> None:
        self.history.undo_delete()

    def on_history_sidebar_rename_requested(self, message: HistorySidebar.RenameRequested) -> None:
        self.history.rename(message.conv_id, message.title)

    def on_history_sidebar_delete_requested(self, message: HistorySidebar.DeleteRequested) -> None:
        self.history.delete(message.conv_id, message.title)

    async def on_history_sidebar_conversation_selected(self, message: HistorySidebar.ConversationSelected) -> None:
        await self.history.resume_conversation(message.conv_id)

    async def on_history_sidebar_fork_requested(self, message: HistorySidebar.ForkRequested) -> None:
        await self.steer.fork_stored(message.conv_id, message.title)
