"""Large pastes become attachment chips instead of flooding the prompt box.

:class:`PasteChips` is held by the chat window (``app.paste_chips``); the
held pastes themselves are :class:`~app.tui.attach.Attachments`' (the files
it is given), shown by the :class:`~app.tui.widgets.attachment_chips.AttachmentChips`
widget.  The prompt box asks :meth:`PasteChips.paste_is_chip` about every bracketed paste; one of at
least ``paste.chip_lines`` lines or ``paste.chip_tokens`` tokens (counted with
the model's tokenizer, as the attachment block it will be sent in) is held
as an attachment (``paste-N.txt``) with its exact token cost, shown as a chip
above the box and counted by the context meter.  Nothing is sent: Enter sends
it with the next message, like an ``/attach`` file.  A smaller paste is
inserted in the box as typed text, as before.

The chip's buttons: open (read it), edit (its text back into the box, where
it is typed text again), × (drop it).
"""
from __future__ import annotations

from pathlib import Path

from app.conversation.attachments import Attachment, file_block
from app.tui.attach import Attachments
from app.tui.host import ChatHost


class PasteChips:
    """Pastes held as chips: the rule, holding one, and the chips' buttons."""

    def __init__(self, host: ChatHost, attachments: Attachments) -> None:
        self.host = host
        self.attachments = attachments
        #: the number of the last paste held: names are never reused, so two chips never share one
        #: (a count of the chips held gave a second "paste-2.txt" after paste-1 was dropped)
        self._numbered = 0

    def paste_is_chip(self, text: str) -> bool:
        """Whether a paste of ``text`` (newlines normalized) becomes a chip rather than inline text."""
        options, session = self.host.options, self.host.session
        lines = text.count("\n") + (0 if text.endswith("\n") else 1)
        if lines >= options.paste_chip_lines:
            return True
        if session is None or len(text.encode("utf-8", "surrogatepass")) < options.paste_chip_tokens:
            return False  # an id is at least one byte: too few bytes for that many tokens
        return session.draft_tokens(text) >= options.paste_chip_tokens

    def pasted(self, text: str) -> None:
        """Hold the paste as an attachment, priced as the block it is sent in."""
        session = self.host.session
        held = {a.name for a in self.attachments.pending}
        self._numbered += 1
        while f"paste-{self._numbered}.txt" in held:  # an /attach file of that name
            self._numbered += 1
        name = f"paste-{self._numbered}.txt"
        size = len(text.encode("utf-8", "surrogatepass"))
        tokens = session.draft_tokens(file_block(name, size, text)) if session else 0
        lines = text.count("\n") + (0 if text.endswith("\n") else 1)
        item = Attachment(name, Path(name), size, text, tokens, f"pasted, {lines} lines")
        self.attachments.hold(item)
        self.host.notify(f"Pasted {lines} lines ({tokens} tokens) as {name}: sent with your next message; "
                         "open, edit or drop it on its chip")
        self.host.update_draft()

    def show(self, held: list[Attachment]) -> None:
        """One chip per held attachment (called whenever the held files change); Enter in an empty box
        sends what is held (a paste is often the whole message)."""
        from app.tui.widgets.attachment_chips import AttachmentChips

        boxes = self.host.query("PromptInput")
        if boxes:
            boxes.first().holding = bool(held)
        chips = self.host.query(AttachmentChips)
        if chips:
            chips.first().show(held)

    def chip_action(self, action: str, index: int) -> None:
        """A chip's button: open (read it), edit (its text back in the box) or × (drop it)."""
        from app.tui.widgets.attachment_chips import AttachmentView

        held = self.attachments.pending
        if not 0 <= index < len(held):
            return
        item = held[index]
        if action == "open":
            self.host.push_screen(AttachmentView(f"{item.summary()} · Esc closes", item.text))
            return
        self.attachments.drop(index)
        box = self.host.prompt_input
        if action == "edit":  # its text goes back in the box, as typed text
            from app.tui.inert import inert_text

            box.insert(inert_text(item.text))
        # the pressed button is gone with its chip: the box takes the focus back, so what is typed or
        # pasted next lands there (a paste with nothing focused was lost)
        box.focus()
        self.host.update_draft()
