"""Large pastes become attachment chips instead of flooding the prompt box.

A mixin of :class:`~app.tui.app.ChatApp`.  The prompt box asks
:meth:`PasteChipsMixin.paste_is_chip` about every bracketed paste; one of at
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


class PasteChipsMixin:
    """``self`` is the ChatApp."""

    def paste_is_chip(self, text: str) -> bool:
        """Whether a paste of ``text`` (newlines normalized) becomes a chip rather than inline text."""
        lines = text.count("\n") + (0 if text.endswith("\n") else 1)
        if lines >= self.options.paste_chip_lines:
            return True
        if self.session is None or len(text.encode("utf-8", "surrogatepass")) < self.options.paste_chip_tokens:
            return False  # an id is at least one byte: too few bytes for that many tokens
        return self.session.draft_tokens(text) >= self.options.paste_chip_tokens

    def on_prompt_input_chip_pasted(self, message) -> None:
        """Hold the paste as an attachment, priced as the block it is sent in."""
        count = sum(1 for a in self.pending_attachments if a.name.startswith("paste-")) + 1
        name = f"paste-{count}.txt"
        size = len(message.text.encode("utf-8", "surrogatepass"))
        tokens = self.session.draft_tokens(file_block(name, size, message.text)) if self.session else 0
        lines = message.text.count("\n") + (0 if message.text.endswith("\n") else 1)
        item = Attachment(name, Path(name), size, message.text, tokens, f"pasted, {lines} lines")
        self.pending_attachments.append(item)
        self.notify(f"Pasted {lines} lines ({tokens} tokens) as {name}: sent with your next message; "
                    "open, edit or drop it on its chip")
        self.update_draft()

    def refresh_chips(self) -> None:
        from app.tui.widgets.attachment_chips import AttachmentChips

        chips = self.query(AttachmentChips)
        if chips:
            chips.first().show(list(self.pending_attachments))

    def on_attachment_chips_chip_action(self, message) -> None:
        from app.tui.widgets.attachment_chips import AttachmentView

        held = self.pending_attachments
        if not 0 <= message.index < len(held):
            return
        item = held[message.index]
        if message.action == "open":
            self.push_screen(AttachmentView(f"{item.summary()} · Esc closes", item.text))
            return
        del held[message.index]
        if message.action == "edit":  # its text goes back in the box, as typed text
            box = self.prompt_input
            from app.tui.inert import inert_text

            box.insert(inert_text(item.text))
            box.focus()
        self.update_draft()
