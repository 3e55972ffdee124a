"""Conversation history in the chat: recording turns, and the sidebar of stored chats.

:class:`ChatHistory` is held by the chat window (``app.history``) and owns the
store and the :class:`app.history.recorder.HistoryRecorder`, which turns any
storage failure into one notice and never stops the chat.  The sidebar
(:class:`~app.tui.widgets.history_sidebar.HistorySidebar`) reads the same
:class:`app.history.store.ChatStore`; its messages reach the window, which
hands them here.  Everything here runs on the event loop: each store call is
one short SQLite transaction.

Two windows may share one history: a conversation deleted in one is never a reason
for the other to stop saving (:meth:`ChatHistory._still_stored` saves what the other
shows as a new conversation).  A deletion here is kept in memory until quit, so that
ctrl+z in the history list can put it back with its own ids.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.tui.branches import Branches
from app.tui.host import ChatHost
from app.tui.widgets.dialogs import DeleteScreen, RenameScreen
from app.tui.widgets.history_sidebar import HistorySidebar

if TYPE_CHECKING:
    from app.conversation.messages import ChatMessage
    from app.history.recorder import HistoryRecorder


#: why the last message on screen cannot be continued, regenerated or edited
WRITING_ELSEWHERE = ("its last reply is being written in another window; open the conversation again from "
                     "the history when it is done (a message sent now starts a branch beside it)")
NEVER_ANSWERED = ("its last message has no reply (tokchat stopped before answering it, or another window "
                  "is still reading it); a message sent now takes its place, and it stays in the history "
                  "as its sibling")

#: under a stored message whose reply never came
NO_REPLY = ("⚠ no reply: tokchat stopped before answering this message (or another window is still reading it). "
            "A message sent now takes its place; this one stays in the history as its sibling.")


def unsettled_tail(conversation: Any) -> tuple[list, list]:
    """The shown branch split into what this window builds on and its unsettled end (``settled, tail``).

    The tail is what headless ``--resume`` leaves out (:func:`app.history.resume.settled_length`): a reply
    another window is still writing (no finish reason: the store marks a dead writer's reply interrupted)
    and the user messages no reply follows.  It is shown, marked, but never continued or answered here."""
    from app.history.resume import settled_length

    end = settled_length(conversation.messages)
    return conversation.messages[:end], conversation.messages[end:]


def off_tail(branches: list, tail: list) -> list:
    """The stored branches that do not hang below the unsettled ``tail`` (its messages are left out)."""
    left_out = {m.id for m in tail}
    kept = list(branches)
    while True:
        below = [m for m in kept if m.parent_id in left_out]
        if not below:
            return kept
        left_out.update(m.id for m in below)
        kept = [m for m in kept if m.id not in left_out]


def tail_reason(tail: list) -> str | None:
    """What the unsettled ``tail`` means for the user (None when there is none)."""
    if not tail:
        return None
    return WRITING_ELSEWHERE if tail[-1].role == "assistant" else NEVER_ANSWERED


@dataclass
class Deleted:
    """A conversation deleted in this window, as it was stored: what ctrl+z puts back."""

    conversation: Any


class ChatHistory:
    """The store, the recorder of the conversation on screen, and the sidebar.

    ``store``: a ChatStore to use (tests); None opens the default one on first use.
    ``branches``: shows the "n/m" labels of a resumed conversation.
    """

    def __init__(self, host: ChatHost, store: Any, branches: Branches) -> None:
        self.host = host
        self.branches = branches
        self._store_arg = store
        self.recorder: HistoryRecorder | None = None
        #: conversations deleted here, the last one last (ctrl+z restores it); kept until quit
        self.trash: list[Deleted] = []
        #: a store to look in when the recorder switched itself off (it then has none)
        self._lookup: Any = None
        #: why the last message on screen cannot be acted on (a reply another window is writing, a message
        #: never answered), while the opened conversation shows such an unsettled end; None otherwise
        self.tail_reason: str | None = None

    # -------------------------------------------------------------- recording
    def _make_recorder(self) -> HistoryRecorder:
        from dataclasses import asdict

        from app.history.model_identity import vocabulary_fingerprint
        from app.history.recorder import HistoryRecorder

        chat = self.host.chat
        assert chat is not None  # made when a model has loaded
        # the session is what is sent: its system prompt and sampling are what a new conversation stores
        recorder = HistoryRecorder.from_options(
            self.host.options, store=self._store_arg, model_path=chat.model_path,
            model_name=chat.info.model_name or chat.model_path.stem, template=chat.template.name,
            system=chat.session.system_prompt, sampling=asdict(chat.session.sampling))
        # the vocabulary its ids belong to, as headless stores it: a --resume with another one is refused
        recorder.set_vocabulary(vocabulary_fingerprint(chat.tokenizer))
        return recorder

    def model_ready(self) -> None:
        """A model loaded: record with it; after ``/model`` the same conversation goes on."""
        old = self.recorder
        self.recorder = self._make_recorder()
        if old is not None and old.conversation_id is not None:
            self.recorder.resume(old.conversation_id, old.tip_id)
            self._still_stored()
            chat = self.host.chat  # /model: the conversation goes on with this model, template and sampling
            assert chat is not None  # a model has loaded
            self.recorder.update(model=str(chat.model_path), model_name=chat.info.model_name or chat.model_path.stem,
                                 template=chat.template.name, sampling=chat.session.sampling)
            self.recorder.store_vocabulary()  # the switch is recorded, as headless --switch-model records it
        if old is not None:
            old.close()

    @property
    def store(self) -> Any:
        """The open history store, or None when history is off or failed."""
        if self.recorder is not None:
            return self.recorder.store
        if self._store_arg is not None:
            return self._store_arg
        if not self.host.options.history:
            return None
        from app.history.store import ChatStore, StoreError

        try:
            self._store_arg = ChatStore()
        except StoreError as exc:
            self.host.notify(str(exc), severity="warning")
            return None
        return self._store_arg

    @property
    def conversation_id(self) -> int | None:
        return self.recorder.conversation_id if self.recorder is not None else None

    def _notice(self) -> None:
        notice = self.recorder.take_notice() if self.recorder else None
        if notice:
            self.host.notify(notice, severity="warning", timeout=8)

    def _lookup_store(self) -> Any:
        """A store to ask whether a conversation still exists: the recorder's, or (when the recorder
        switched itself off) one of our own on the same file."""
        if self.recorder is not None and self.recorder.enabled:
            return self.recorder.store
        if self._store_arg is not None:
            return self._store_arg
        if self._lookup is None:
            from app.history.store import ChatStore

            self._lookup = ChatStore()  # the recorder's file: it was made without a path either
        return self._lookup

    def _still_stored(self, upto: int | None = None) -> bool:
        """Before writing: when the conversation this window records into was deleted elsewhere
        (another window on the same history), save what this window shows (its messages before
        ``upto``) as a new conversation and go on recording there, and say so.  True when it did.

        The recorder would otherwise fail on the missing conversation and switch history off
        for the rest of the chat; history is only ever off because the user said so.
        """
        from app.history.store import StoreError

        recorder = self.recorder
        session = self.host.session
        if recorder is None or recorder.conversation_id is None or session is None or not self.host.options.history:
            return False
        gone = recorder.conversation_id
        try:
            if self._lookup_store().exists(gone):
                return False
        except StoreError:
            return False  # the store itself fails: the recorder's own write says how, once
        self.recorder = new_recorder = self._make_recorder()
        recorder.close()  # a reply it had open was in the deleted conversation, and went with it
        for message in session.messages[:upto]:
            if message.role == "system":
                continue
            session.mark_stored(message, None)
            self._mark(message, new_recorder.on_message(message))
        new = new_recorder.conversation_id
        where = "" if any(d.conversation.info.id == gone for d in self.trash) else " in another window"
        self.host.notify(f"Conversation #{gone} was deleted{where}: what this window shows is "
                         f"saved as a new conversation (#{new}), and the chat goes on there",
                         severity="warning", timeout=12)
        return True

    def _mark(self, message: ChatMessage, row: int | None) -> None:
        """``message`` was stored as ``row`` (None: not stored, history off): the session keeps it."""
        if row is not None:
            self.host.session.mark_stored(message, row)

    def _stored_count(self, upto: int | None = None) -> int:
        """How many of the session's messages (before ``upto``) the store holds (no system turns)."""
        messages = self.host.session.messages[:upto]
        return sum(1 for m in messages if m.role != "system")

    def tail_refusal(self, what: str) -> str | None:
        """Why ``what`` (continue, regenerate, edit ...) cannot act on the last message on screen, or None.

        An opened conversation may end in a turn that is not settled (:func:`unsettled_tail`): the keys
        that act on "the last reply" would otherwise act on the settled one before it, unseen."""
        return f"{what}: {self.tail_reason}" if self.tail_reason else None

    def record_user(self, text: str | None, *, replacing: str | None = None) -> None:
        """Before a turn starts: ``replacing`` is ``"reply"`` (regenerate) or ``"prompt"`` (edit)."""
        if text is not None:
            self.tail_reason = None  # a message sent after an unsettled end is its sibling (the screen drops it)
        if self.recorder is None:
            return
        messages = self.host.session.messages
        if replacing is not None:
            role = "assistant" if replacing == "reply" else "user"
            last = max((i for i, m in enumerate(messages) if m.role == role), default=None)
            # saved anew up to the replaced message (deleted elsewhere), the tip is already right
            if not self._still_stored(last) and last is not None:
                kept = [m for m in messages[:last] if m.role != "system"]
                if all(m.store_id is not None for m in kept):  # this chat's own branch, by id
                    self.recorder.rewind(kept[-1].store_id if kept else None)
                else:
                    self.recorder.truncate(self._stored_count(last))
        else:
            self._still_stored()
        if text is not None:
            from app.conversation.messages import ChatMessage

            self.recorder.on_user(ChatMessage("user", text))  # the session's own message is marked after the turn
        self._notice()

    def record_chunk(self, kind: str, text: str) -> None:
        """Reasoning or content text of the reply being generated (drained from the turn's events)."""
        if self.recorder is not None:
            from app.conversation.messages import ReplyEvent

            self.recorder.on_event(ReplyEvent(kind, text))

    def record_message(self, message: ChatMessage) -> None:
        """A message the tool loop added between steps (a call's reply, a tool result), in order."""
        if self.recorder is not None:
            self._mark(message, self.recorder.on_message(message))

    def record_summary(self, summary: ChatMessage) -> None:
        """A summary made while the user's message was sent (/compact summarize), stored after it."""
        if self.recorder is not None:
            self._mark(summary, self.recorder.on_summary(summary))

    def record_summary_changed(self, summary: ChatMessage) -> None:
        """``/compact edit|undo``: the stored summary is written again."""
        if self.recorder is not None:
            self.recorder.on_summary_changed(summary)

    def record_continue(self, reply: Any) -> None:
        """``/continue``: the stored reply is updated in place as it grows."""
        if self.recorder is not None:
            self._still_stored()
            self.recorder.on_continue(reply)

    def record_reply(self) -> None:
        session = self.host.session
        if self.recorder is None or session is None:
            return
        messages = session.messages
        if self._still_stored():
            pass  # deleted elsewhere meanwhile: saved anew, this reply included
        elif messages and messages[-1].role == "assistant":
            self._mark(messages[-1], self.recorder.on_reply(messages[-1]))
            user = next((m for m in reversed(messages) if m.role == "user"), None)
            if user is not None and user.store_id is None:
                session.mark_stored(user, self.recorder.last_user_id)
        else:
            self.recorder.close_reply("error")
        self._notice()
        self.refresh()

    def record_stopped_reply(self) -> None:
        """Quit mid-reply: the session has committed the stopped reply (text, counts, "cancelled")
        but the UI never drained it; store it as Esc would have, not as an unmarked interruption."""
        session = self.host.session
        if self.recorder is None or session is None:
            return
        messages = session.messages
        if messages and messages[-1].role == "assistant" and messages[-1].store_id is None:
            self._mark(messages[-1], self.recorder.on_reply(messages[-1]))

    def record_refusal(self) -> None:
        """A turn the session refused: the user message stored for it stays as a branch, and the
        next message follows the conversation's last message again (never the refused one)."""
        if self.recorder is None:
            return
        self.recorder.close_reply("error")
        kept = [m for m in self.host.session.messages if m.role != "system"]
        if all(m.store_id is not None for m in kept):
            self.recorder.rewind(kept[-1].store_id if kept else None)
        self._notice()
        self.refresh()

    def show_branch(self, tip_id: int | None) -> None:
        """Another sibling is shown: stored, so that a resumed chat shows the same branch."""
        if self.recorder is not None and not self._still_stored():
            self.recorder.show_branch(tip_id)

    def set_system(self, text: str) -> None:
        """``/system``: stored with the conversation, so a resume sends the same."""
        if self.recorder is not None:
            self._still_stored()
            self.recorder.set_system(text)

    def set_template(self, name: str) -> None:
        """``/template``: stored with the conversation, so its export, a fork and a reopen say (and render
        with) the template its turns were sent with."""
        if self.recorder is not None:
            self._still_stored()
            self.recorder.update(template=name)

    def fork(self, kept: list) -> int | None:
        """``/fork``: a new stored conversation of ``kept``, linked to this one; its id (None: not stored)."""
        if self.recorder is None:
            return None
        self._still_stored()
        at = kept[-1].store_id if kept else None
        if all(m.store_id is not None for m in kept):
            rows = self.recorder.fork(at)
            if rows is None:
                return None
            for message, row in zip(kept, rows):  # the kept path is the new conversation's, row for row
                self.host.session.mark_stored(message, row)
            return self.recorder.conversation_id
        # not stored (yet): the fork starts a conversation of its own with the next message
        self.recorder.start_new(system=self.host.session.system_prompt)
        return None

    def new_conversation(self) -> None:
        self.tail_reason = None
        if self.recorder is not None:
            session = self.host.session
            self.recorder.start_new(system=session.system_prompt if session else self.host.options.system)

    def close(self) -> None:
        if self.recorder is not None:
            self.recorder.close()
        if self._lookup is not None:
            self._lookup.close()

    # ---------------------------------------------------------------- sidebar
    @property
    def sidebar(self) -> HistorySidebar:
        return self.host.query_one(HistorySidebar)

    async def command(self, arg: str) -> None:
        """``/history``: what Ctrl+B does."""
        self.toggle_sidebar()

    def toggle_sidebar(self) -> None:
        """Ctrl+B: open the list of stored chats with the cursor in its search box, or close it.
        Open while the cursor is elsewhere (a click on the chat), it takes the cursor back to the list:
        its keys act only with the cursor there, and its hint says so (:class:`HistorySidebar`)."""
        sidebar = self.sidebar
        if sidebar.has_class("-open") and not sidebar.has_focus_within:
            sidebar.focus_search()
            return
        if sidebar.has_class("-open"):
            self.close_sidebar()
            return
        if self.store is None:
            self.host.notify(self._why_off(), severity="warning")
            return
        sidebar.show_keys(self.host.keys)
        sidebar.add_class("-open")
        self.refresh()
        sidebar.focus_search()  # typing searches: a typed word never acts on a conversation

    def close_sidebar(self) -> None:
        """The list closes and the cursor goes back to the prompt box."""
        self.sidebar.remove_class("-open")
        self.host.prompt_input.focus()

    def _why_off(self) -> str:
        """Why there is no history to show: the user's choice, else the failure that stopped it."""
        if not self.host.options.history:
            return "History is off (--no-history or history = false in the config)"
        notice = self.recorder.notice if self.recorder is not None else None
        return f"The history cannot be used in this chat: {notice or 'its database could not be opened'}"

    def refresh(self, search: str | None = None) -> None:
        """Show the stored chats (matching ``search``, default: what the search box holds)."""
        sidebar = self.sidebar
        if not sidebar.has_class("-open") or self.store is None:
            return
        if search is None:
            from textual.widgets import Input

            search = sidebar.query_one("#history-search", Input).value
        from app.history.store import StoreError

        try:
            sidebar.show(self.store.list_conversations(search or None), self.store.being_written())
        except StoreError as exc:
            self.host.notify(str(exc), severity="error")

    def rename(self, conv_id: int, title: str) -> None:
        """Ask for a new title, then store it."""

        def chosen(new: str | None) -> None:
            if new:
                self._store_call(lambda store: store.rename(conv_id, new))

        self.host.push_screen(RenameScreen(title), chosen)

    def delete(self, conv_id: int, title: str) -> None:
        """Ask (a dialog no typed word can answer), then delete and keep it in :attr:`trash`, so
        that ctrl+z brings it back; the conversation on screen stays on screen when deleted, and the
        next message saves it as a new conversation (:meth:`_still_stored`)."""
        recorder = self.recorder
        on_screen = recorder is not None and recorder.conversation_id == conv_id
        if on_screen and self.host.generating:
            self.host.notify("Wait for the reply to finish (or Esc) before deleting the conversation on screen",
                             severity="warning")
            return

        def chosen(yes: bool | None) -> None:
            if yes:
                self._delete(conv_id, title)

        self.host.push_screen(DeleteScreen(title, self.host.keys), chosen)

    def _delete(self, conv_id: int, title: str) -> None:
        from app.history.store import StoreError

        store = self.store
        try:
            conversation = store.load(conv_id)
            store.delete(conv_id)
        except StoreError as exc:
            self.host.notify(str(exc), severity="error")
            self.refresh()
            return
        # the conversation on screen stays on screen: the next write saves what it shows as a new conversation
        # (:meth:`_still_stored`), as after a deletion in another window, so that the stored conversation
        # holds every message the model answers from
        self.trash.append(Deleted(conversation))
        self.refresh()
        self.host.notify(f"Deleted “{title}” · ctrl+z in the history brings it back (until you quit)", timeout=15)

    def undo_delete(self) -> None:
        """ctrl+z in the history: put back the conversation deleted last, with its own ids."""
        from app.history.store import StoreError

        if not self.trash:
            self.host.notify("Nothing to undo: no conversation was deleted in this window", severity="warning")
            return
        deleted = self.trash.pop()
        info = deleted.conversation.info
        try:
            self.store.restore(deleted.conversation)
        except StoreError as exc:
            self.trash.append(deleted)
            self.host.notify(str(exc), severity="error")
            return
        # deleted while on screen and nothing written since: the recorder records into it again
        self.refresh()
        self.host.notify(f"Restored “{info.title or '(untitled)'}”")

    def _store_call(self, action: Any) -> None:
        from app.history.store import StoreError

        try:
            action(self.store)
        except StoreError as exc:
            self.host.notify(str(exc), severity="error")
        self.refresh()

    def _use_stored_template(self, name: str) -> None:
        """A reopened conversation goes on with the template it was stored with (``/template``), so that its
        stored counts and the meter agree; a template file this window cannot name again is said."""
        from templates import NAMES, TemplateError

        chat = self.host.chat
        if not name or chat is None or name == chat.template.name:
            return
        try:
            if name not in NAMES:
                raise TemplateError(f"it was written with the template {name!r}, which only --template-file can load")
            self.host.use_template(name)
        except TemplateError as exc:
            self.host.notify(f"The conversation goes on with the template {chat.template.name}: {exc}",
                             severity="warning", timeout=10)

    async def resume_conversation(self, conv_id: int) -> None:
        """Show a stored conversation and continue it with the loaded model."""
        from app.history.store import StoreError

        host = self.host
        if host.generating:
            host.notify("Wait for the reply to finish (or Esc) before opening another chat", severity="warning")
            return
        try:
            conversation = self.store.load(conv_id)
        except StoreError as exc:
            host.notify(str(exc), severity="error")
            return
        from app.conversation.branches import from_links
        from app.history.model_identity import switch_record, vocabulary_switch

        settled, tail = unsettled_tail(conversation)
        stored = [m for m in settled + off_tail(conversation.branches, tail) if m.role != "system"]
        chat_messages = [m.to_chat_message() for m in stored]
        # the TUI goes on where headless --resume refuses without --switch-model: opening a chat from the sidebar
        # with another model loaded is the user's choice, as /model is (the rule: model_identity.vocabulary_switch)
        switched = vocabulary_switch(conversation.info, host.chat.tokenizer) if host.chat is not None else None
        messages, branches = from_links([(m.id, m.parent_id, c) for m, c in zip(stored, chat_messages)],
                                        [m.id for m in settled if m.role != "system"])
        host.end_edit("another conversation opened")
        self.tail_reason = tail_reason(tail)
        await host.chat_view.show_messages(messages, tail=[m.to_chat_message() for m in tail],
                                           tail_note=NO_REPLY if tail and tail[-1].role == "user" else "")
        host.sub_title = conversation.info.title
        session = host.session
        if session is None:
            host.notify("Showing a stored chat; load a model (/model PATH) to continue it", severity="warning")
            return
        if switched is None:  # another vocabulary goes on with its own model's template
            self._use_stored_template(conversation.info.template)
            session = host.session  # a new one when the template changed
        session.set_system(conversation.info.system_prompt)
        session.load_messages(messages, branches)
        if switched is not None:  # ids of another vocabulary: the replies are encoded again from their text
            session.forget_reply_ids()
        if self.recorder is not None:
            # the next message follows the last settled one: a turn another window is still writing (or one
            # that never got its reply) is not this window's to build on, as headless --resume leaves it out
            self.recorder.resume(conv_id, settled[-1].id if settled else None)
            if switched is not None:  # recorded as /model and headless --switch-model record it
                chat = host.chat
                assert chat is not None  # the switch is to the model loaded
                self.recorder.update(**switch_record(
                    conversation.info, switched, model=str(chat.model_path),
                    model_name=chat.info.model_name or chat.model_path.stem, template=chat.template.name,
                    sampling=session.sampling))
        if switched is not None:
            host.notify(f"#{conv_id} was written by {switched.was}, whose vocabulary is not this model's: it goes on "
                        "with this model, its replies encoded again from their text (the switch is recorded)",
                        severity="warning", timeout=12)
        await self.branches.show_labels()
        host.update_meter()
        # the list closes: its keys (ctrl+r rename ...) would otherwise be on screen while the cursor is in
        # the prompt box, where the same keys act on the chat (ctrl+r regenerates)
        self.close_sidebar()
