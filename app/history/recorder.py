"""Record one chat into the history, and never let the history stop the chat.

:class:`HistoryRecorder` is the one recorder headless runs and the TUI both save through, in
typed values (:class:`~app.conversation.messages.ChatMessage`,
:class:`~app.conversation.messages.ReplyEvent`).  The calls follow a turn:

    recorder.on_user(ChatMessage("user", text))      # committed before generation starts
    for event in session.send(text):
        recorder.on_event(event)                     # partial reply saved about once a second; a summary
                                                     # and the tool loop's messages stored in order
    recorder.on_reply(session.messages[-1])          # final text, stats and finish reason
    ...
    recorder.close()                                 # a reply still open is kept as "interrupted"

A message's row id is returned (``on_user``, ``on_reply``, ``on_message``): the caller's conversation
keeps it (:meth:`app.conversation.conversation.Conversation.mark_stored`); the recorder never writes
onto the messages it is given.

The first :class:`app.history.store.StoreError` (read-only directory, full disk, a
database from a newer tokchat) switches the recorder off for the rest of the
chat; :meth:`take_notice` hands out the one-line explanation exactly once, so
the UI says it once.  ``history = false`` / ``--no-history`` gives a recorder
that never opens, creates or writes anything.

The recorder owns this chat's place in the stored tree: :attr:`HistoryRecorder.tip_id`,
the last message it wrote or was shown.  Every message it writes follows that one, not the
conversation's shared tip, so two processes on one conversation each extend their own
branch (the conversation's tip then names the branch written last).
"""
from __future__ import annotations

import time
from pathlib import Path
from types import EllipsisType
from typing import TYPE_CHECKING, Any, Callable, Protocol

from app.history.store import ChatStore, StoreError

if TYPE_CHECKING:  # the conversation's values; imported where a turn runs, not at startup
    from app.conversation.messages import ChatMessage, ReplyEvent
    from backends.base import SamplingParams


class RecordedOptions(Protocol):
    """What :meth:`HistoryRecorder.from_options` reads of a chat's options (``app.settings.options.ChatOptions``,
    a room above the history: it is named here by what is read, not imported)."""

    model: str | None
    model_path: Path | None
    system: str
    template: str
    backend: str
    sampling: SamplingParams
    ctx: int | None
    think: bool | None
    history: bool
    preset: str | None


class HistoryRecorder:
    """Writes one conversation as it happens; inert once disabled."""

    def __init__(self, *, enabled: bool = True, store_path: str | Path | None = None,
                 store: ChatStore | None = None, model_path: str | Path = "", model_name: str = "",
                 template: str = "", system: str = "", sampling: Any = None,
                 settings: dict | None = None, progress_interval_s: float = 1.0,
                 notify: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``notify``: called once with the notice when history switches itself off (headless:
        print it to stderr); without it, poll :meth:`take_notice`."""
        self.enabled = enabled
        self._notify = notify
        self._store = store
        self._store_path = store_path
        self._owns_store = store is None
        self._meta = dict(model=str(model_path or ""), model_name=model_name, template=template,
                          system=system, sampling=sampling, settings=settings or {})
        self.conversation_id: int | None = None
        #: the row id of the last user message committed (None before, or when history is off)
        self.last_user_id: int | None = None
        #: this chat's last message in the stored tree: what the next message follows
        self.tip_id: int | None = None
        self._notice: str | None = None
        self._notice_taken = False
        self._reply_id: int | None = None
        #: a stored reply being continued (:meth:`on_continue`): its row is written again from its first event
        self._continuing: ChatMessage | None = None
        self._partial = {"content": "", "reasoning": ""}
        self._opening = ""  # the user's start of the reply open now (kept when it is closed as cut)
        self._interval = progress_interval_s
        self._clock = clock
        self._last_progress = 0.0

    @classmethod
    def from_options(cls, options: RecordedOptions, *, model_path: str | Path = "", model_name: str = "",
                     template: str = "", **kwargs: Any) -> HistoryRecorder:
        """A recorder for a chat run with :class:`app.settings.options.ChatOptions`.

        ``model_path`` defaults to the path :func:`app.models.preset_match.chat_options` resolved; model name
        and template, known only once the model is loaded, can follow through :meth:`start_new`
        before the first :meth:`on_user`.
        """
        from dataclasses import asdict

        settings = {"backend": options.backend, "ctx": options.ctx, "think": options.think,
                    "template_option": options.template, "preset": options.preset}
        model_path = model_path or options.model_path or options.model or ""
        kwargs.setdefault("system", options.system)
        kwargs.setdefault("sampling", asdict(options.sampling))
        return cls(enabled=options.history, model_path=model_path, model_name=model_name,
                   template=template, settings=settings, **kwargs)

    # -- state ------------------------------------------------------------------------------

    @property
    def store(self) -> ChatStore | None:
        """The open store (opened on first use), or None when history is off."""
        if not self.enabled:
            return None
        if self._store is None:
            try:
                self._store = ChatStore(self._store_path)
            except StoreError as exc:
                self._disable(exc)
                return None
        return self._store

    def _disable(self, exc: StoreError) -> None:
        self.enabled = False
        if self._notice is None:
            # every message is committed when it is written (a reply about once a second): what came before stays
            kept = (f"conversation {self.conversation_id} is kept as far as it was recorded"
                    if self.conversation_id is not None else "the history recorded so far is kept")
            self._notice = f"history is off for this chat: {exc}; {kept}"
            if self._notify is not None:
                self._notice_taken = True
                self._notify(self._notice)

    @property
    def notice(self) -> str | None:
        """Why history was switched off, if it was."""
        return self._notice

    def take_notice(self) -> str | None:
        """The notice the first time it is asked for after history failed; None afterwards."""
        if self._notice is None or self._notice_taken:
            return None
        self._notice_taken = True
        return self._notice

    def _guard(self, action: Callable[[ChatStore], Any]) -> Any:
        store = self.store
        if store is None:
            return None
        try:
            return action(store)
        except StoreError as exc:
            self._disable(exc)
            return None

    # -- conversation -----------------------------------------------------------------------

    def start_new(self, **meta: Any) -> None:
        """The next message starts a new conversation (``meta`` updates model/template/system...)."""
        self.close_reply()
        self._meta.update(meta)
        self.conversation_id = None
        self.tip_id = None

    def resume(self, conv_id: int, tip_id: int | None | EllipsisType = ...) -> None:
        """Append further turns to a stored conversation, after message ``tip_id`` (by default
        the conversation's tip as stored now)."""
        self.close_reply()
        self.conversation_id = conv_id
        self.tip_id = self._guard(lambda s: s.tip_id(conv_id)) if isinstance(tip_id, EllipsisType) else tip_id

    def update(self, **meta: Any) -> None:
        """What the next turns are produced with changed (``/model``: model, model_name, template,
        sampling): kept for a conversation not stored yet, and written to the stored one."""
        self._meta.update(meta)
        if self.conversation_id is not None:
            conv_id = self.conversation_id
            columns = {k: v for k, v in meta.items()
                       if k in ("template", "sampling", "model", "model_name", "settings")}
            self._guard(lambda s: s.update_conversation(conv_id, **columns))

    def set_vocabulary(self, fingerprint: str) -> None:
        """The vocabulary a new conversation's ids belong to (:mod:`app.history.model_identity`), kept with
        its settings when it is stored."""
        from app.history.model_identity import SETTINGS_KEY

        self._meta["settings"] = {**(self._meta.get("settings") or {}), SETTINGS_KEY: fingerprint}

    def store_vocabulary(self) -> None:
        """Write this chat's settings, the fingerprint :meth:`set_vocabulary` kept among them, into the stored
        conversation this recorder goes on with (the TUI's ``/model``: its next ids are the new model's)."""
        settings, conv_id = self._meta.get("settings"), self.conversation_id
        if settings and conv_id is not None:
            self._guard(lambda s: s.update_conversation(conv_id, settings=settings))

    def set_system(self, text: str) -> None:
        self._meta["system"] = text
        conv_id = self.conversation_id
        if conv_id is not None:
            self._guard(lambda s: s.update_conversation(conv_id, system=text))

    def rewind(self, tip_id: int | None) -> None:
        """The next message follows ``tip_id`` (regenerate, edit: the replaced message becomes its sibling)."""
        self.close_reply()
        self.tip_id = tip_id
        if self.conversation_id is not None:
            conv_id = self.conversation_id
            self._guard(lambda s: s.show_branch(conv_id, tip_id))

    def truncate(self, keep: int) -> None:
        """Drop stored messages after the first ``keep`` (regenerate, edit the last message)."""
        self.close_reply()
        if self.conversation_id is not None:
            conv_id = self.conversation_id
            self._guard(lambda s: s.truncate(conv_id, keep))
            self.tip_id = self._guard(lambda s: s.tip_id(conv_id))

    def _conversation(self, store: ChatStore, first: ChatMessage | None = None) -> int:
        """The conversation's id, created now if needed (titled from ``first``, the user's message)."""
        if self.conversation_id is None:
            from app.conversation.attachments import title_words
            from app.history.types import make_title

            meta = self._meta
            content = first.content if first is not None and first.role == "user" else ""
            self.conversation_id = store.new_conversation(
                meta["model"], meta["template"], meta["system"], meta["sampling"],
                model_name=meta["model_name"], settings=meta["settings"],
                title=make_title(title_words(content)) if content else "")
            self.tip_id = None
        return self.conversation_id

    def _add(self, message: ChatMessage) -> int | None:
        """Commit ``message`` after this chat's tip; it becomes the tip.  Its row id, or None (not stored)."""
        msg_id = self._guard(lambda s: s.add_message(self._conversation(s, message), message,
                                                     parent_id=self.tip_id))
        if msg_id is not None:
            self.tip_id = msg_id
        return msg_id

    # -- a turn -----------------------------------------------------------------------------

    def on_user(self, message: ChatMessage) -> int | None:
        """Commit the user's message (call before generation starts); its row id (also ``last_user_id``)."""
        self.close_reply()
        self.last_user_id = self._add(message)
        return self.last_user_id

    def on_message(self, message: ChatMessage) -> int | None:
        """A message the tool loop added between steps (a reply that called a tool, a tool's result), in
        order: a reply is committed as one, anything else as a whole message.  Its row id."""
        return self.on_reply(message) if message.role == "assistant" else self.on_user(message)

    def on_summary(self, message: ChatMessage) -> int | None:
        """Commit a summary of the turns compacted out of the prompt (app.conversation.compaction), made while
        the user's message was being sent: stored after it, with its ids and stats.  Its row id."""
        return self._add(message)

    def on_summary_changed(self, message: ChatMessage) -> None:
        """A stored summary was edited or taken back (``/compact edit|undo``): its row is written again."""
        store_id = message.store_id
        if self.enabled and store_id is not None:
            self._guard(lambda s: s.finish_message(store_id, message))

    def show_branch(self, tip_id: int | None) -> None:
        """The user chose another sibling: the branch ending at ``tip_id`` is the one shown."""
        self.close_reply()
        conv_id = self.conversation_id
        if conv_id is not None and tip_id is not None:
            self.tip_id = tip_id
            self._guard(lambda s: s.show_branch(conv_id, tip_id))

    def on_reply_start(self) -> None:
        """Insert the reply as in progress (``on_event`` does this on the first event); a reply being
        continued is opened again in its own row instead, with the text it had."""
        if self._reply_id is not None:
            return
        self._last_progress = self._clock()
        continued, self._continuing = self._continuing, None
        if continued is not None:
            self._partial = {"content": continued.content, "reasoning": continued.reasoning}
            self._opening = continued.opening
            store_id = continued.store_id
            if store_id is not None:  # a reply never stored has no row to reopen
                self._guard(lambda s: s.reopen_reply(store_id, continued.opening))
            if self.enabled:
                self._reply_id = store_id
            return
        self._partial = {"content": "", "reasoning": ""}
        self._opening = ""
        self._reply_id = self._guard(lambda s: s.begin_reply(self._conversation(s), parent_id=self.tip_id))
        if self._reply_id is not None:
            self.tip_id = self._reply_id

    def on_event(self, event: ReplyEvent) -> None:
        """Follow a turn's event: reasoning/content text is kept and saved now and then; a summary made before
        the turn (``summary``) is stored in order."""
        if event.kind == "summary":
            self.on_summary(event.data)
            return
        if not self.enabled or event.kind not in ("reasoning", "content"):
            return
        self.on_reply_start()
        first_text = not any(part.strip() for part in self._partial.values())
        self._partial[event.kind] += event.text
        now = self._clock()
        # the first visible text is saved at once: an engine that stalls (a busy machine) sends no event to
        # save on, and a kill then must not lose every word already on the screen
        first_text = first_text and bool(event.text.strip())
        if self._reply_id is not None and (first_text or now - self._last_progress >= self._interval):
            self._last_progress = now
            reply_id = self._reply_id
            self._guard(lambda s: s.update_reply(reply_id, self._partial["content"], self._partial["reasoning"]))

    def on_reply(self, message: ChatMessage) -> int | None:
        """Commit the finished reply (``finish_reason`` "stop", "length", "cancelled", "error"); its row id
        (what choosing this reply again stores), or None when history is off."""
        if not self.enabled:
            return None
        continued, self._continuing = self._continuing, None
        reply_id: int | None
        if self._reply_id is None and continued is not None and continued is message:
            # a continuation that streamed no text (it ended at once): its row is updated, never added again
            reply_id = stored = continued.store_id
            if stored is not None:  # a reply never stored has no row to finish
                self._guard(lambda s: s.finish_message(stored, message))
        elif self._reply_id is None:
            reply_id = self._add(message)
        else:
            reply_id, self._reply_id = self._reply_id, None
            self._guard(lambda s: s.finish_message(reply_id, message))
        return reply_id

    def on_continue(self, message: ChatMessage) -> None:
        """A stored reply is being continued (/continue): its row is written again from the first event
        (:meth:`on_reply_start`: saved as it grows, like a new reply, so a kill keeps what was printed,
        marked interrupted), and :meth:`on_reply` then updates it (text, ids, stats with both parts) instead
        of adding a message.  A continuation the session refuses leaves the row as it was.  A reply not
        stored yet is added by :meth:`on_reply` as usual."""
        self.close_reply()
        store_id = message.store_id
        if not self.enabled or store_id is None or self.conversation_id is None:
            return
        self._continuing = message
        self.tip_id = store_id

    def fork(self, at_store_id: int | None) -> list[int] | None:
        """Make the stored branch up to ``at_store_id`` a new conversation linked to this one, and go on
        in it (its id is :attr:`conversation_id`); the new rows' ids, first to last, for the session's kept
        path.  None when not stored."""
        self.close_reply()
        if self.conversation_id is None:
            return None
        source = self.conversation_id
        new_id = self._guard(lambda s: s.fork(source, at_store_id))
        if new_id is None:
            return None
        self.conversation_id = new_id
        stored = self._guard(lambda s: s.load(new_id))
        if stored is None:
            return []
        self.tip_id = stored.messages[-1].id if stored.messages else None
        return [row.id for row in stored.messages]

    def close_reply(self, finish_reason: str = "interrupted") -> None:
        """Commit a reply still open with the text received so far (a continuation not yet written
        again is left as it was)."""
        self._continuing = None
        if self._reply_id is None:
            return
        from app.conversation.messages import ChatMessage

        partial = ChatMessage("assistant", self._partial["content"], self._partial["reasoning"],
                              opening=self._opening)
        reply_id, self._reply_id = self._reply_id, None
        self._guard(lambda s: s.finish_message(reply_id, partial, finish_reason))

    def close(self) -> None:
        """End the chat: an open reply is kept as interrupted, and the store is closed."""
        self.close_reply()
        if self._store is not None and self._owns_store:
            self._store.close()
            self._store = None
