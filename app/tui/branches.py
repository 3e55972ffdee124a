"""Moving between siblings in the chat: Alt+Left / Alt+Right, ``/branch``, and the "2/3" labels.

:class:`Branches` is held by the chat window (``app.branches``).  The keys move through the
siblings at the deepest fork of the branch on screen (the last regenerated
reply or edited prompt); ``/branch N`` picks one, ``/branch`` says where
you are.  A switch redraws the chat from the session's path, and stores
the choice so that a resumed chat shows the same branch: the switch is told
with a :class:`Branches.Switched` message, which the window hands to the history.
"""
from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from app.tui.host import ChatHost
from app.tui.slash import SlashError
from app.tui.widgets.branch_label import BranchLabel
from app.tui.widgets.user_message import UserMessage


class Branches:
    """Sibling navigation at the deepest fork, and the "n/m" labels."""

    @dataclass
    class Switched(Message):
        """Another sibling is shown; ``tip_id``: the stored id of the path's last message (None: not stored)."""

        tip_id: int | None

    def __init__(self, host: ChatHost) -> None:
        self.host = host

    async def command(self, arg: str) -> None:
        """``/branch [N|next|prev]``."""
        session = self.host.need_session("branch")
        at = session.branches.last_fork()
        if at is None:
            raise SlashError("no siblings here yet: Ctrl+R regenerates a reply, Ctrl+G edits the last prompt")
        position = session.branches.position(at)
        assert position is not None  # ``at`` is a fork: last_fork found it
        shown, count = position
        if not arg:
            self.host.notify(f"Showing {shown} of {count} at message {at + 1}")
            return
        words = {"next": 1, "prev": -1, "previous": -1}
        if arg in words:
            await self.move(step=words[arg])
            return
        try:
            index = int(arg)
        except ValueError:
            raise SlashError(f"/branch takes a number from 1 to {count}, next or prev; not {arg!r}") from None
        if not 1 <= index <= count:
            raise SlashError(f"/branch takes a number from 1 to {count}, not {index}")
        await self.move(index=index - 1)

    async def move(self, *, step: int = 0, index: int | None = None) -> None:
        """Show the sibling ``step`` away (Alt+Left/Right) or number ``index`` at the deepest fork."""
        host = self.host
        session = host.session
        if session is None:
            return
        if host.generating:  # said, as /continue and /new say it: a key that does nothing silently looks broken
            host.notify("A reply is still streaming: switch replies when it has finished (Esc stops it)",
                        severity="warning")
            return
        at = session.branches.last_fork()
        if at is None:
            host.notify("No other reply to show: Ctrl+R regenerates one and keeps this one", severity="warning")
            return
        shown, count = session.branches.position(at)
        target = index if index is not None else shown - 1 + step
        if not 0 <= target < count:
            return
        session.switch_branch(at, target)
        await host.chat_view.show_messages(session.messages)
        await self.show_labels()
        host.update_meter()
        if session.messages:
            host.post_message(self.Switched(session.messages[-1].store_id))

    async def show_labels(self) -> None:
        """Put a "‹ n/m ›" label above each shown message that heads a fork."""
        view = self.host.chat_view
        for old in list(view.query(BranchLabel)):
            await old.remove()
        session = self.host.session
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
