"""Moving between siblings in the chat: Alt+Left / Alt+Right, ``/branch``, and the "2/3" labels.

A mixin of :class:`~app.tui.app.ChatApp`.  The keys move through the
siblings at the deepest fork of the branch on screen (the last regenerated
reply or edited prompt); ``/branch N`` picks one, ``/branch`` says where
you are.  A switch redraws the chat from the session's path, and stores
the choice so that a resumed chat shows the same branch.
"""
from __future__ import annotations

from app.tui.slash import SlashError
from app.tui.widgets.branch_label import BranchLabel
from app.tui.widgets.user_message import UserMessage


class BranchesMixin:
    """Sibling navigation; ``self`` is the ChatApp."""

    async def action_branch(self, step: int) -> None:
        await self._move_branch(step=step)

    async def cmd_branch(self, arg: str) -> None:
        session = self._need_session("branch")
        at = session.branches.last_fork()
        if at is None:
            raise SlashError("no siblings here yet: Ctrl+R regenerates a reply, Ctrl+G edits the last prompt")
        shown, count = session.branches.position(at)
        if not arg:
            self.notify(f"Showing {shown} of {count} at message {at + 1}")
            return
        words = {"next": 1, "prev": -1, "previous": -1}
        if arg in words:
            await self._move_branch(step=words[arg])
            return
        try:
            index = int(arg)
        except ValueError:
            raise SlashError(f"/branch takes a number from 1 to {count}, next or prev; not {arg!r}") from None
        if not 1 <= index <= count:
            raise SlashError(f"/branch takes a number from 1 to {count}, not {index}")
        await self._move_branch(index=index - 1)

    async def _move_branch(self, *, step: int = 0, index: int | None = None) -> None:
        session = self.session
        if session is None or self.generating:
            return
        at = session.branches.last_fork()
        if at is None:
            self.notify("No other reply to show: Ctrl+R regenerates one and keeps this one", severity="warning")
            return
        shown, count = session.branches.position(at)
        target = index if index is not None else shown - 1 + step
        if not 0 <= target < count:
            return
        session.switch_branch(at, target)
        await self.chat_view.show_messages(session.messages)
        await self.show_branch_labels()
        self.update_meter()
        if self.recorder is not None and session.messages:
            self.recorder.show_branch(session.messages[-1].store_id)

    async def show_branch_labels(self) -> None:
        """Put a "‹ n/m ›" label above each shown message that heads a fork."""
        view = self.chat_view
        for old in list(view.query(BranchLabel)):
            await old.remove()
        session = self.session
        if session is None or not session.branches.forks:
            return
        from app.tui.widgets.assistant_message import AssistantMessage  # Markdown: not for the first frame

        widgets = [w for w in view.children if isinstance(w, (UserMessage, AssistantMessage))]
        shown = [i for i, m in enumerate(session.messages) if m.role in ("user", "assistant")]
        offset = len(shown) - len(widgets)  # older messages may not be mounted (paged history)
        for at in sorted(session.branches.forks):
            position = session.branches.position(at)
            if at not in shown:
                continue
            k = shown.index(at) - offset
            if 0 <= k < len(widgets):
                await view.mount(BranchLabel(at, *position), before=widgets[k])
            elif k == len(widgets):  # the path ends at the fork (a reply being replaced): label at the end
                await view.mount(BranchLabel(at, *position))
