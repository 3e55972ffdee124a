"""The prompt box: a multi-line text area that grows with its text.

Enter sends; Shift+Enter and Ctrl+J insert a newline (most terminals send
Shift+Enter as plain Enter, so Ctrl+J is the one that always works).  Up in
an empty box walks back through the prompts sent so far, Down walks forward.
The box's own bound keys (Backspace, Delete, arrows...) run in its key handler, so
a burst of keys applies in the order typed (:meth:`PromptInput._run_own_binding`).
Tab right after an ``@path`` word completes the path (attachments).

Edit mode (Ctrl+G) is this widget's own state: :meth:`PromptInput.begin_edit`
loads the last prompt and says so on the border, Esc (:meth:`end_edit`)
leaves it, and the app ends it whenever the conversation on screen changes
(new chat, /clear, another conversation, another model), so an edit can
never be sent into a conversation it was not started in.  The reply edit
(``/reply`` alone: :meth:`begin_reply_edit`) is the same kind of state and
ends the same way; its text (``/reply`` and one conversation's reply) leaves
the box then, kept in the recall list (Up), since Enter would put it into the
conversation switched to.  A bracketed paste
is text: inserted in order with control characters made visible
(:func:`app.tui.inert.inert_text`), never read as keys, never sent.  A large
one (``chip_rule`` says so) is posted as :class:`PromptInput.ChipPasted`
instead, and the app holds it as an attachment chip (:mod:`app.tui.paste_chips`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import TextArea

from app.tui.keys import KeyMap, keymap_for
from app.tui.keys import default as key

#: on the box's border while an edit is pending
EDIT_TITLE = "editing the last prompt · Enter resends it in its place · Esc cancels"
REPLY_TITLE = "editing the last reply · Enter continues from your text · Esc cancels"


#: what a ``/reply`` edit starts with; the rest of the box is the reply as the user left it
REPLY_PREFIX = "/reply "


class PromptInput(TextArea):
    """Where the user types; posts :class:`PromptInput.Submitted` on Enter."""

    DEFAULT_CSS = """
    PromptInput {
        height: auto;
        min-height: 3;
        max-height: 12;
    }
    """

    # id: the [keys] name (app.tui.keys), so the key that stops a reply also leaves an edit
    BINDINGS = [Binding(key("cancel"), "cancel_edit", "Cancel edit", tooltip="leave the edit; the box is cleared",
                        id="cancel")]

    #: Enter replaces the last prompt (Ctrl+G) instead of sending a new one
    editing: reactive[bool] = reactive(False)
    #: the box holds ``/reply`` and the last reply to edit (``/reply`` alone); Enter continues from it
    replying: reactive[bool] = reactive(False)

    @dataclass
    class Submitted(Message):
        """The user pressed Enter on a non-empty prompt; ``editing``: it replaces the last prompt."""

        input: "PromptInput"
        text: str
        editing: bool = False
        #: a ``/reply`` edit (:meth:`PromptInput.begin_reply_edit`): the reply's text exactly as in the box
        #: after ``/reply ``, its leading and trailing whitespace included (a command's argument is stripped)
        reply: str | None = None

    @dataclass
    class ChipPasted(Message):
        """A paste too large for the box (see ``chip_rule``): the app holds it as an attachment."""

        input: "PromptInput"
        text: str

    @dataclass
    class EditEnded(Message):
        """Edit mode ended without a resend; ``why`` is shown to the user."""

        input: "PromptInput"
        why: str

    def __init__(self, **kwargs) -> None:
        super().__init__(soft_wrap=True, show_line_numbers=False, tab_behavior="focus", **kwargs)
        #: prompts sent so far, oldest first
        self.sent: list[str] = []
        # index into ``sent`` while recalling; None when not recalling
        self._recall: int | None = None
        #: text -> whether a paste of it becomes an attachment chip (set by the app; None: never)
        self.chip_rule: Callable[[str], bool] | None = None
        #: files or pasted chips are held for the next message (set by app.tui.paste_chips): Enter in an
        #: empty box then sends them alone
        self.holding = False
        #: the keys in use (set by the app from [keys]): which send and which insert a newline
        self.keymap: KeyMap = keymap_for(None)

    def use_keys(self, keymap: KeyMap) -> None:
        """The keys in use ([keys]): which send, which insert a newline; and the chat's own keys win over
        the box's editing keys (a TextArea takes ctrl+e to the line's end and ctrl+y to redo: a key the user
        gave an action in the config must reach it)."""
        self.keymap = keymap
        bindings = self._bindings.copy()
        # the box's own Esc binding (id "cancel") on the key configured, in place of an editing key there;
        # the box runs its bindings itself (_run_own_binding), before Textual's chain would apply the keymap
        bindings.apply_keymap(keymap.textual())
        for key_name in keymap.chat_keys() & set(bindings.key_to_bindings):
            kept = [b for b in bindings.key_to_bindings[key_name] if b.id == "cancel"]
            if kept:
                bindings.key_to_bindings[key_name] = kept
            else:
                del bindings.key_to_bindings[key_name]
        self._bindings = bindings

    # -- edit mode ------------------------------------------------------------------------------

    def begin_edit(self, text: str) -> None:
        """Put ``text`` (the last prompt) in the box; the next Enter replaces it."""
        self.replying = False  # one edit at a time: the box now holds the prompt
        self.load_text(text)
        self.move_cursor(self.document.end)
        self.editing = True
        self.focus()

    def begin_reply_edit(self, reply: str) -> None:
        """Put ``/reply`` and the last reply in the box; Enter continues from the edited text."""
        self.end_edit("")  # one edit at a time (nothing to say: the new one is on the border)
        self.load_text(REPLY_PREFIX + reply)
        self.move_cursor(self.document.end)
        self.replying = True
        self.focus()

    def end_edit(self, why: str, *, clear: bool = False) -> bool:
        """Leave edit mode (False if not editing); ``clear`` empties the box, else a prompt edit's text
        stays.  A reply edit's text never stays: it goes to the recall list (Up)."""
        if self.replying:
            self.replying = False
            if self.text.strip() and not clear:
                self.remember(self.text)
            self.load_text("")
        elif self.editing:
            self.editing = False
            if clear:
                self.load_text("")
        else:
            return False
        if why:
            self.post_message(self.EditEnded(self, why))
        return True

    def conversation_changed(self, why: str) -> None:
        """The conversation on screen changes (``why``): an edit pending for the old one ends, and says how."""
        if self.replying:
            self.end_edit(f"{why}: the edit of the last reply ended and that reply is unchanged; "
                          "Up brings your text back")
        else:
            self.end_edit(f"{why}: the edit of the last prompt ended; its text stays in the box")

    def watch_editing(self, editing: bool) -> None:
        self._show_mode()

    def watch_replying(self, replying: bool) -> None:
        self._show_mode()

    def _show_mode(self) -> None:
        self.border_title = EDIT_TITLE if self.editing else REPLY_TITLE if self.replying else ""
        self.set_class(self.editing or self.replying, "-editing")
        self.app.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel_edit":
            return self.editing or self.replying  # otherwise Esc goes on to the app (stop a reply)
        return True

    def action_cancel_edit(self) -> None:
        self.end_edit("edit cancelled", clear=True)

    # -- paste ----------------------------------------------------------------------------------

    async def _on_paste(self, event: events.Paste) -> None:
        """Insert the pasted text as typed text: newlines normalized, other controls made visible."""
        from app.tui.inert import inert_text

        event.stop()
        event.prevent_default()
        if self.read_only:
            return
        text = event.text.replace("\r\n", "\n").replace("\r", "\n")
        if self.chip_rule is not None and self.chip_rule(text):
            self.post_message(self.ChipPasted(self, text))
            return
        result = self._replace_via_keyboard(inert_text(text), *self.selection)
        if result:
            self.move_cursor(result.end_location)
        self.focus()

    def remember(self, text: str) -> None:
        """Add a sent prompt to the recall list (no consecutive duplicates, nothing for a message of
        held files alone)."""
        if not text.strip():
            self._recall = None
            return
        if not self.sent or self.sent[-1] != text:
            self.sent.append(text)
        self._recall = None

    async def _on_key(self, event: events.Key) -> None:
        key = event.key
        if key in self.keymap.of("send"):
            event.stop()
            event.prevent_default()
            text = self.text
            if text.strip():
                reply = text[len(REPLY_PREFIX):] if self.replying and text.startswith(REPLY_PREFIX) else None
                self.post_message(self.Submitted(self, text, self.editing, reply))
                self.replying = False  # its text went with the Enter (as the /reply command)
                return
            if text:
                self.load_text("")  # whitespace alone is not a message, and must not lead the next one
            if self.holding and not self.editing and not self.replying:
                self.post_message(self.Submitted(self, ""))  # a held paste or file is the message
            return
        if key == "tab" and self._complete_at():
            event.stop()
            event.prevent_default()
            return
        if key in self.keymap.of("newline"):
            event.stop()
            event.prevent_default()
            self.insert("\n")
            return
        if key == "up" and self._can_recall():
            event.stop()
            event.prevent_default()
            self._recall_step(-1)
            return
        if key == "down" and self._recall is not None:
            event.stop()
            event.prevent_default()
            self._recall_step(+1)
            return
        if event.is_printable or key in ("backspace", "delete"):
            self._recall = None
        if not event.is_printable and await self._run_own_binding(event):
            return
        await super()._on_key(event)

    async def _run_own_binding(self, event: events.Key) -> bool:
        """Run this box's own binding of ``event`` (Backspace, Delete, the arrows, Home...) now.

        Left to Textual, a bound key bubbles up to the app before its binding runs, while printable
        keys are inserted here at once: in a burst (a fast typist, keys typed while a reply streams)
        the letters typed after a Backspace then land before it.  Run here, every key applies in the
        order it was typed.  False when no binding of this box takes the key (or its check refuses).
        """
        for binding in self._bindings.key_to_bindings.get(event.key, ()):
            if binding.priority:
                continue  # the app already ran priority bindings before the key reached the box
            if await self.app.run_action(binding.action, self):
                event.stop()
                event.prevent_default()
                return True
        return False

    def _complete_at(self) -> bool:
        """Tab after ``@partial/pa``: complete the path (app.conversation.attachments.complete_path); False if none."""
        from app.conversation.attachments import complete_path

        row, col = self.cursor_location
        line = self.document.get_line(row)[:col]
        word = line.split()[-1] if line.strip() and not line.endswith((" ", "\t")) else ""
        if not word.startswith("@"):
            return False
        done = complete_path(word[1:])
        if done is None:
            return False
        self.insert(done[len(word) - 1:])
        return True

    def _can_recall(self) -> bool:
        if not self.sent:
            return False
        if self._recall is not None:
            return self.cursor_location[0] == 0
        return not self.text

    def _recall_step(self, step: int) -> None:
        index = len(self.sent) if self._recall is None else self._recall
        index = max(0, index + step)
        if index >= len(self.sent):
            self._recall = None
            self.load_text("")
            return
        self._recall = index
        self.load_text(self.sent[index])
        self.move_cursor(self.document.end)
