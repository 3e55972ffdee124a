"""Attachments in the chat: ``/attach PATH``, ``@path`` in the prompt box, and their cost before sending.

:class:`Attachments` is held by the chat window (``app.attachments``) and owns
the files held for the next message.  ``/attach FILE`` reads and
prices a file now (one line if it is refused) and holds it for the next
message; ``/attach DIR`` lists the text files it would bring in and asks
first; ``/attach`` lists what is held, ``/attach clear`` drops it.  An
``@path`` word in the draft naming a file is attached when the message is
sent; Tab after ``@`` completes the path.  What is held and what the
``@`` words would add is shown on the prompt box's border, in tokens, as
the draft changes, so the cost is seen before Enter.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from app.conversation.attachments import (AttachLimits, Attachment, AttachmentError, at_references, compose,
                             directory_files, read_attachment)
from app.tui.host import ChatHost
from app.tui.slash import SlashError


class Attachments:
    """The files held for the next message (``pending``), their prices, and ``/attach``.

    ``changed``: called with the held files whenever they change, so that what shows them
    (the chips above the prompt box) follows.
    """

    def __init__(self, host: ChatHost, changed: Callable[[list[Attachment]], None]) -> None:
        self.host = host
        self.changed = changed
        #: held for the next message: ``/attach`` files and pasted chips, in order
        self.pending: list[Attachment] = []
        #: read_attachment results of the current draft's files, by (path, size, mtime, session)
        self._cache: dict[tuple, Attachment] = {}

    @property
    def limits(self) -> AttachLimits:
        return self.host.options.attach_limits or AttachLimits()

    def _count(self, text: str) -> int:
        return self.host.session.draft_tokens(text)

    def _priced(self, path: Path) -> Attachment:
        """``read_attachment`` cached by (path, size, mtime): the draft is re-priced as it is typed."""
        cache = self._cache
        info = path.stat()
        key = (str(path.resolve()), info.st_size, info.st_mtime_ns, id(self.host.session))
        if key not in cache:
            cache.clear()  # only the files of the current draft are kept
            cache[key] = read_attachment(path, self.limits, self._count)
        return cache[key]

    async def command(self, arg: str) -> None:
        """``/attach [PATH|clear]``."""
        host = self.host
        if host.session is None:
            raise SlashError("/attach needs a loaded model to count the file's tokens: wait for it")
        if not arg:
            held = self.pending
            host.notify("\n".join(a.summary() for a in held) if held else
                        "Nothing attached: /attach PATH (a file or a directory), or @path in a message")
            return
        if arg == "clear":
            self.pending.clear()
            self.show_cost()
            host.notify("Attachments dropped")
            return
        path = Path(arg).expanduser()
        if path.is_dir():
            try:
                files = directory_files(path, self.limits)
            except AttachmentError as exc:
                raise SlashError(str(exc)) from None
            from app.tui.widgets.dialogs import ConfirmScreen

            listing = "\n".join(f"  {f.relative_to(path)}" for f in files[:20])
            more = f"\n  … and {len(files) - 20} more" if len(files) > 20 else ""
            question = f"Attach these {len(files)} files from {path}?\n{listing}{more}"

            def chosen(yes: bool | None) -> None:
                if yes:
                    host.call_later(self._attach_files, files)

            host.push_screen(ConfirmScreen(question, yes="Attach"), chosen)
            return
        await self._attach_files([path])

    async def _attach_files(self, paths: list[Path]) -> None:
        """Read and price every file first: one refused file refuses them all (one line)."""
        try:
            files = [read_attachment(p, self.limits, self._count) for p in paths]
        except AttachmentError as exc:
            self.host.notify(str(exc), title="Not attached", severity="error", timeout=8)
            return
        self.pending.extend(files)
        for file in files:
            await self.host.chat_view.add_notice(f"📎 {file.summary()}: sent with your next message "
                                                 "(/attach clear drops it)", "warning" if file.notice else "info")
        self.show_cost()

    def message_with_attachments(self, text: str) -> str | None:
        """The message to send for ``text``: held files and ``@file`` words in blocks; None if refused.

        The held files are taken (the list is emptied); :meth:`restore` puts them back when the
        session refuses the message."""
        files = list(self.pending)
        for ref in at_references(text):
            path = Path(ref).expanduser()
            if not path.is_file():
                continue  # not a file: an @mention stays plain text
            try:
                files.append(self._priced(path))
            except (AttachmentError, OSError) as exc:
                self.host.notify(str(exc), title="Not sent", severity="error", timeout=8)
                return None
        self.pending.clear()
        self.show_cost()
        return compose(text, files)

    def refusal(self, message: str, held: list[Attachment]) -> str | None:
        """Why the session refuses ``message`` (the text with ``held`` in blocks), or None.

        With files or pastes held, the session's advice (save the text to a file and /attach it) would
        point at what is already one, and is not cut: the line names the largest held one instead."""
        why = self.host.session.refusal(message)
        if why is None or not held:
            return why
        largest = max(held, key=lambda a: a.tokens)
        kind = "the pasted" if largest.notice.startswith("pasted") else "the attached"
        context = self.host.chat.context_size if self.host.chat else 0
        return (f"message too long for the context ({context:,} tokens): {kind} {largest.name} alone is "
                f"{largest.tokens:,} tokens; drop it (× on its chip) and send a part of it, or raise --ctx")

    def restore(self, held: list[Attachment], draft: str) -> None:
        """A message refused before it was sent: its held files are held again."""
        self.pending[:] = held
        self.show_cost(draft)

    def hold(self, item: Attachment) -> None:
        """Hold ``item`` (a pasted chip) for the next message."""
        self.pending.append(item)

    def model_changed(self) -> None:
        """Another model is loaded (``/model``): the held files are priced again with its tokenizer, and
        the chips and the box's border follow (a price from the old tokenizer was kept before)."""
        if self.host.session is None or not self.pending:
            return
        self.pending[:] = [replace(item, tokens=self._count(item.block())) for item in self.pending]
        self._cache.clear()
        self.changed(self.pending)
        self.show_cost(self.host.prompt_input.text)

    def drop(self, index: int) -> Attachment:
        """Stop holding the file at ``index`` (its chip's × or edit); returns it."""
        return self.pending.pop(index)

    def show_cost(self, draft: str = "") -> int:
        """Put the files' token costs on the prompt box's border; returns the whole message's tokens.

        The total is the composed message encoded as it will be sent (blocks
        and text together), so it equals the ids the message gets; the
        per-file numbers are each block alone.
        """
        boxes = self.host.query("#prompt")
        if not boxes or self.host.session is None:
            return 0
        files = list(self.pending)
        parts = [f"{f.name} {f.tokens}" for f in files]
        for ref in at_references(draft):
            path = Path(ref).expanduser()
            if not path.is_file():
                continue
            try:
                file = self._priced(path)
            except (AttachmentError, OSError) as exc:
                parts.append(f"{path.name}: not attached, {str(exc).split(': ', 1)[-1][:40]}")
                continue
            parts.append(f"@{file.name} {file.tokens}")
            files.append(file)
        message = self._count(compose(draft, files)) if files or draft.strip() else 0
        boxes.first().border_subtitle = (f"📎 {' · '.join(parts)} · message {message} tokens" if parts else "")
        self.changed(list(self.pending))  # one chip per held attachment
        return message
