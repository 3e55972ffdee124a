"""Steering the reply in the TUI: /continue (Ctrl+L), /reply TEXT, /fork [N], /think on|off|budget N.

A mixin of :class:`~app.tui.app.ChatApp` (``self`` is the app).  The work is
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

from app.tui.slash import SlashError, parse_on_off


class SteerMixin:
    """Continue, write the reply's start, fork, thinking; mixed into ChatApp."""

    # ---------------------------------------------------------------- continue
    async def cmd_continue(self, arg: str) -> None:
        session = self._need_session("continue")
        why = session.continue_refusal()
        if why is not None:
            raise SlashError(why)
        reply = session.messages[-1]
        widget = self.chat_view.last_assistant()
        if self.recorder is not None:
            self.recorder.on_continue(reply)
        await self.start_reply(session.continue_reply, None, into=widget)

    async def action_continue_reply(self) -> None:
        """Ctrl+L: continue the last reply (cut by max_tokens or stopped)."""
        if not self.ready_to_generate():
            return
        await self.run_slash_named("continue", "")

    async def run_slash_named(self, name: str, arg: str) -> None:
        from app.tui.slash import SlashCommand

        await self.run_slash(SlashCommand(name, arg))

    # ------------------------------------------------------------------- /reply
    async def cmd_reply(self, arg: str) -> None:
        """``/reply TEXT``: a new reply to the last prompt that starts with TEXT (the model goes on);
        ``/reply`` alone puts the last reply in the box to edit, then Enter continues from the edit."""
        session = self._need_session("reply")
        if not arg:
            last = session.messages[-1] if session.messages else None
            if last is None or last.role != "assistant":
                raise SlashError("/reply TEXT writes the start of the reply to the last prompt; there is no "
                                 "reply to edit yet")
            self.prompt_input.load_text(f"/reply {last.content}")
            self.prompt_input.move_cursor(self.prompt_input.document.end)
            self.notify("Edit the reply, then Enter: the model continues from your text "
                        "(the old reply stays as a sibling)")
            return
        if not any(m.role == "user" for m in session.messages):
            raise SlashError("nothing to reply to: send a message first")
        from app.tui.widgets.assistant_message import AssistantMessage

        if session.messages[-1].role == "assistant":
            self.record_user(None, replacing="reply")
            await self.chat_view.remove_from_last(AssistantMessage)
        await self.start_reply(lambda: session.reply_with(arg), None, opening=arg)

    # -------------------------------------------------------------------- /fork
    async def cmd_fork(self, arg: str) -> None:
        """``/fork [N]``: a new conversation holding the messages up to message N (default: the last)."""
        session = self._need_session("fork")
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
        session = self.session
        chosen = session.messages[index]
        source_title = self.sub_title or "this conversation"
        self.end_edit("conversation forked")
        kept = session.fork_at(index)
        new_id = None
        if self.recorder is not None:
            at = kept[-1].store_id if kept else None
            if all(m.store_id is not None for m in kept):
                new_id = self.recorder.fork(at, kept)
            else:  # not stored (yet): the fork starts a conversation of its own with the next message
                self.recorder.start_new(system=session.system_prompt)
        await self.chat_view.show_messages(kept)
        if chosen.role == "user":
            self.prompt_input.load_text(chosen.content)
            self.prompt_input.move_cursor(self.prompt_input.document.end)
        self.sub_title = f"fork of {source_title}"
        self.update_meter()
        self.refresh_history()
        self.notify(f"Forked at message {index + 1}: a new conversation"
                    + (f" (#{new_id}) linked to the old one" if new_id is not None else "")
                    + "; the old one is unchanged")

    async def on_history_sidebar_fork_requested(self, message) -> None:
        """``f`` in the history list: fork that stored conversation (its shown branch) and open the fork."""
        from app.history.store import StoreError

        store = self.store
        if store is None or self.generating:
            return
        try:
            tip = store.tip_id(message.conv_id)
            new_id = store.fork(message.conv_id, tip)
        except StoreError as exc:
            self.notify(str(exc), severity="error")
            return
        await self.resume_conversation(new_id)
        self.refresh_history()
        self.notify(f"Forked “{message.title}” into a new conversation (#{new_id})")

    # ------------------------------------------------------------------- /think
    async def cmd_think(self, arg: str) -> None:
        """``/think on|off`` (no argument toggles) and ``/think budget N|off``; remembered per model."""
        session = self._need_session("think")
        words = arg.split()
        if words and words[0] == "budget":
            if len(words) != 2:
                raise SlashError("/think budget takes a number of reasoning tokens, or off: /think budget 256")
            budget = self._budget(words[1])
            session.reasoning_budget = budget
            self._remember(reasoning_budget=budget)
            self.notify("No reasoning budget" if budget is None else
                        f"Reasoning budget {budget} tokens: then the think block is closed and the answer starts")
            return
        value = (not session.enable_thinking) if not arg else parse_on_off(arg, "think")
        if not session.template.supports_thinking:
            self.notify(f"Template {session.template.name} has no thinking switch; "
                        "reasoning in <think> tags is still shown", severity="warning")
        session.enable_thinking = value
        self._remember(thinking=value)
        self.notify(f"Thinking {'on' if value else 'off'}")

    @staticmethod
    def _budget(word: str) -> int | None:
        if word.lower() in ("off", "none", "-1"):
            return None
        try:
            budget = int(word)
        except ValueError:
            raise SlashError(f"/think budget takes a whole number of tokens or off, not {word!r}") from None
        if budget < 0:
            raise SlashError(f"/think budget must be 0 or more, not {budget}")
        return budget

    def _model_key(self) -> str:
        chat = self.chat
        return chat.info.model_name or chat.model_path.stem

    def _remember(self, **values) -> None:
        """Write the choice to config.toml under the model's name (a failure is one warning)."""
        from app.settings.config import ConfigError
        from app.settings.model_memory import remember

        try:
            path = remember(self._model_key(), **values)
        except (ConfigError, OSError) as exc:
            self.notify(f"Not remembered for this model: {exc}", severity="warning")
            return
        self.log(f"remembered {values} for {self._model_key()} in {path}")

    def apply_remembered(self) -> None:
        """On model load: thinking and budget as remembered for this model, and the configured budget."""
        from app.settings.config import ConfigError
        from app.settings.model_memory import apply_remembered

        session = self.session
        session.reasoning_budget = self.options.reasoning_budget
        try:
            applied = apply_remembered(self.options, session, self._model_key())
        except ConfigError as exc:
            self.notify(str(exc), severity="warning")
            return
        if applied:
            self.notify("Remembered for this model: " + ", ".join(applied))
