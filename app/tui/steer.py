"""Steering the reply in the TUI: /continue (Ctrl+L), /reply TEXT, /fork [N], /think on|off|budget N.

:class:`Steering` is held by the chat window (``app.steer``).  The work is
the session's (:meth:`ChatSession.continue_reply`, :meth:`~ChatSession.reply_with`,
:meth:`~ChatSession.fork_at`); here the screen and the history follow it:

* a continued reply streams into the same reply widget, and its stored row is
  updated in place (:meth:`HistoryRecorder.on_continue`);
* a reply with a user-written opening shows that part marked as the user's;
* a fork becomes a new stored conversation linked to where it came from;
* a thinking choice is written to config.toml under the model's name
  (:mod:`app.settings.model_memory`) and applied when that model loads again.
"""
from __future__ import annotations

from typing import Any

from app.tui.history import ChatHistory
from app.tui.host import ChatHost
from app.tui.slash import SlashError, parse_on_off


class Steering:
    """Continue, write the reply's start, fork, thinking; the history follows through ``history``."""

    def __init__(self, host: ChatHost, history: ChatHistory) -> None:
        self.host = host
        self.history = history

    # ---------------------------------------------------------------- continue
    async def cmd_continue(self, arg: str) -> None:
        """``/continue`` (Ctrl+L): continue the last reply (cut by max_tokens or stopped)."""
        host = self.host
        session = host.need_session("continue")
        why = self.history.tail_refusal("Nothing continued") or session.continue_refusal()
        if why is not None:
            raise SlashError(why)
        reply = session.messages[-1]
        widget = host.chat_view.last_assistant()
        self.history.record_continue(reply)
        await host.start_reply(session.continue_reply, None, into=widget)

    # ------------------------------------------------------------------- /reply
    async def cmd_reply(self, arg: str) -> None:
        """``/reply TEXT``: a new reply to the last prompt that starts with TEXT (the model goes on);
        ``/reply`` alone puts the last reply in the box to edit, then Enter continues from the edit."""
        host = self.host
        session = host.need_session("reply")
        tail = self.history.tail_refusal("/reply")
        if tail:
            raise SlashError(tail)
        if not arg:
            last = session.messages[-1] if session.messages else None
            if last is None or last.role != "assistant":
                raise SlashError("/reply TEXT writes the start of the reply to the last prompt; there is no "
                                 "reply to edit yet")
            host.prompt_input.begin_reply_edit(last.content)  # its mode ends when the conversation changes
            host.notify("Edit the reply, then Enter: the model continues from your text "
                        "(the old reply stays as a sibling)")
            return
        if not any(m.role == "user" for m in session.messages):
            raise SlashError("nothing to reply to: send a message first")
        from app.tui.widgets.assistant_message import AssistantMessage

        if session.messages[-1].role == "assistant":
            self.history.record_user(None, replacing="reply")
            await host.chat_view.remove_from_last(AssistantMessage)
        await host.start_reply(lambda: session.reply_with(arg), None, opening=arg)

    # -------------------------------------------------------------------- /fork
    async def cmd_fork(self, arg: str) -> None:
        """``/fork [N]``: a new conversation holding the messages up to message N (default: the last)."""
        session = self.host.need_session("fork")
        count = len(session.messages)
        if not count:
            raise SlashError("nothing to fork yet: the conversation is empty")
        try:
            number = int(arg) if arg else count
        except ValueError:
            raise SlashError(f"/fork takes a message number from 1 to {count}, not {arg!r}") from None
        if not 1 <= number <= count:
            raise SlashError(f"/fork takes a message number from 1 to {count}, not {number}")
        await self.fork_conversation(number - 1)

    async def fork_conversation(self, index: int) -> None:
        """Fork at ``session.messages[index]``; a user message there goes back into the box."""
        host = self.host
        session = host.session
        chosen = session.messages[index]
        source_title = host.sub_title or "this conversation"
        host.end_edit("conversation forked")
        kept = session.fork_at(index)
        new_id = self.history.fork(kept)
        await host.chat_view.show_messages(kept)
        if chosen.role == "user":
            host.prompt_input.load_text(chosen.content)
            host.prompt_input.move_cursor(host.prompt_input.document.end)
        host.sub_title = f"fork of {source_title}"
        host.update_meter()
        self.history.refresh()
        host.notify(f"Forked at message {index + 1}: a new conversation"
                    + (f" (#{new_id}) linked to the old one" if new_id is not None else "")
                    + "; the old one is unchanged")

    async def fork_stored(self, conv_id: int, title: str) -> None:
        """``f`` in the history list: fork that stored conversation (its shown branch) and open the fork."""
        from app.history.store import StoreError

        store = self.history.store
        if store is None or self.host.generating:
            return
        try:
            tip = store.tip_id(conv_id)
            new_id = store.fork(conv_id, tip)
        except StoreError as exc:
            self.host.notify(str(exc), severity="error")
            return
        await self.history.resume_conversation(new_id)
        self.history.refresh()
        self.host.notify(f"Forked “{title}” into a new conversation (#{new_id})")

    # ------------------------------------------------------------------- /think
    async def cmd_think(self, arg: str) -> None:
        """``/think on|off`` (no argument toggles) and ``/think budget N|off``; remembered per model."""
        host = self.host
        session = host.need_session("think")
        words = arg.split()
        if words and words[0] == "budget":
            if len(words) != 2:
                raise SlashError("/think budget takes a number of reasoning tokens, or off: /think budget 256")
            budget = self._budget(words[1])
            session.reasoning_budget = budget
            self._remember(reasoning_budget=budget)
            host.notify("No reasoning budget" if budget is None else
                        f"Reasoning budget {budget} tokens: then the think block is closed and the answer starts")
            return
        value = (not session.enable_thinking) if not arg else parse_on_off(arg, "think")
        session.enable_thinking = value
        if not session.template.supports_thinking:
            # the prompt does not change; remembering it would apply a choice that does nothing at this model's
            # next load (and hide a later template's own default)
            host.notify(f"Template {session.template.name} has no thinking switch: the prompt does not change, and "
                        "it is not remembered for this model (reasoning in <think> tags is still shown)",
                        severity="warning")
            return
        self._remember(thinking=value)
        host.notify(f"Thinking {'on' if value else 'off'}")

    @staticmethod
    def _budget(word: str) -> int | None:
        if word.lower() in ("off", "none", "-1"):
            return None
        try:
            budget = int(word)
        except ValueError:
            raise SlashError(f"/think budget takes a whole number of tokens or off, not {word!r}") from None
        if budget < 0:
            raise SlashError(f"/think budget must be 0 or more, not {budget} (-1 or off: no limit)")
        return budget

    def _model_key(self) -> str:
        chat = self.host.chat
        assert chat is not None  # a command needs the loaded chat (need_session)
        return chat.info.model_name or chat.model_path.stem

    def _remember(self, **values: Any) -> None:
        """Write the choice to config.toml under the model's name (a failure is one warning)."""
        from app.settings.config import ConfigError
        from app.settings.model_memory import remember

        try:
            path = remember(self._model_key(), **values)
        except (ConfigError, OSError) as exc:
            self.host.notify(f"Not remembered for this model: {exc}", severity="warning")
            return
        self.host.log(f"remembered {values} for {self._model_key()} in {path}")

    def apply_remembered(self) -> None:
        """On model load: thinking and budget as remembered for this model, and the configured budget."""
        from app.settings.config import ConfigError
        from app.settings.model_memory import apply_remembered

        host = self.host
        session = host.session
        session.reasoning_budget = host.options.reasoning_budget
        try:
            applied = apply_remembered(host.options, session, self._model_key())
        except ConfigError as exc:
            host.notify(str(exc), severity="warning")
            return
        if applied:
            host.notify("Remembered for this model: " + ", ".join(applied))
