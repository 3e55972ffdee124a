"""Files attached to a message: read, checked, priced in tokens, and put in a delimited block.

An attachment becomes part of the next user message's text, as a block
the model can tell apart from the question::

    <file name="notes.txt" size="1234">
    ...the file's text...
    </file>

The block is message text like any other, so the template's message spans
cover it and a ``<|im_end|>`` written inside a file stays plain text (see
:mod:`templates.ids`).  History and exports keep the message as sent, so a
stored attachment is exactly its name, size and the text the model got.

What is refused, with one line and nothing sent: a path that does not
exist or cannot be read, a file larger than ``max_bytes`` (checked before
reading, so a 50 MB file is never loaded), a binary file (a NUL byte, or
mostly control bytes, in its first 8 KiB), a file over ``max_tokens``.
Invalid UTF-8 is not dropped: each bad byte becomes U+FFFD and the
attachment carries a notice saying how many.  A directory is listed (text
files only, hidden ones skipped, at most ``max_files``) for the user to
confirm; nothing in it is read until then.

Not handled: images and PDFs (binary, refused), recursion into hidden
directories, following the user's ``.gitignore``.
"""
from __future__ import annotations

import html
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

#: bytes looked at to decide whether a file is binary
SNIFF_BYTES = 8192


class AttachmentError(ValueError):
    """A file that cannot be attached; the message is one line saying why and what to do."""


@dataclass(frozen=True)
class AttachLimits:
    """Budgets for one attachment (``[attach]`` in the config)."""

    #: largest file read, in bytes
    max_bytes: int = 1_000_000
    #: most tokens one file may add to a message
    max_tokens: int = 16_384
    #: most files a directory may bring in at once
    max_files: int = 50


@dataclass(frozen=True)
class Attachment:
    """One file as it will be sent: its name, size on disk, the text sent, and its token cost."""

    name: str
    path: Path
    size: int
    text: str
    tokens: int = 0
    #: e.g. how many invalid UTF-8 bytes were replaced; "" when the file was clean
    notice: str = ""

    def block(self) -> str:
        return file_block(self.name, self.size, self.text)

    def summary(self) -> str:
        """One line for the user: name, size, tokens, and the notice if any."""
        line = f"{self.name} ({human_bytes(self.size)}, {self.tokens} tokens)"
        return f"{line}: {self.notice}" if self.notice else line


def human_bytes(size: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size} B"


def file_block(name: str, size: int, text: str) -> str:
    """The delimited block a file's text travels in (the name quoted so it cannot close the tag)."""
    safe_name = name.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")
    body = text if text.endswith("\n") or not text else text + "\n"
    return f'<file name="{safe_name}" size="{size}">\n{body}</file>'


def compose(text: str, attachments: Sequence[Attachment]) -> str:
    """The message sent: every attachment's block, then the user's text after a blank line."""
    if not attachments:
        return text
    blocks = "\n\n".join(a.block() for a in attachments)
    return f"{blocks}\n\n{text}" if text.strip() else blocks


#: a block as :func:`file_block` writes it (for display; the text sent is never parsed back)
_BLOCK = re.compile(r'<file name="([^"\n]*)" size="(\d+)">\n.*?</file>', re.DOTALL)


def summarize_blocks(text: str) -> str:
    """``text`` with each attached file's block shown as one line ``📎 name (size)`` (the chat view)."""
    if "<file name=" not in text:
        return text
    return _BLOCK.sub(lambda m: f"📎 {html.unescape(m.group(1))} ({human_bytes(int(m.group(2)))})", text)


def title_words(text: str) -> str:
    """The user's own words in a message (attached files' blocks left out), for its title;
    a message of attachments only gives their one-line summaries."""
    if "<file name=" not in text:
        return text
    words = _BLOCK.sub("", text).strip()
    return words or summarize_blocks(text).strip()


def is_binary(head: bytes) -> bool:
    """A NUL byte, or more than 30% control bytes other than whitespace, in the first bytes."""
    if b"\x00" in head:
        return True
    if not head:
        return False
    control = sum(1 for b in head if b < 32 and b not in (9, 10, 12, 13, 27))
    return control / len(head) > 0.3


def read_attachment(path: str | Path, limits: AttachLimits, count: Callable[[str], int],
                    *, base: Path | None = None, tui: bool = True) -> Attachment:
    """The file at ``path`` checked and priced (``count`` is the session's token count).

    ``tui=False`` (``--attach``): the errors' hints name the command line, not the chat's keys.
    """
    path = Path(path).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    shown = str(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        hint = " (Tab completes after @)" if tui else ""
        raise AttachmentError(f"{shown}: no such file; check the path{hint}") from None
    except OSError as exc:
        raise AttachmentError(f"{shown}: cannot read it ({exc.strerror or exc})") from None
    if path.is_dir():
        if not tui:
            raise AttachmentError(f"{shown} is a directory: --attach takes files (repeat it for several)")
        raise AttachmentError(f"{shown} is a directory: /attach it to see what it would include")
    if not path.is_file():
        raise AttachmentError(f"{shown} is not a regular file (a device or a pipe): nothing attached")
    if info.st_size > limits.max_bytes:
        raise AttachmentError(f"{shown} is {human_bytes(info.st_size)}, over the {human_bytes(limits.max_bytes)} "
                              "limit: attach a smaller part, or raise attach.max_bytes in config.toml")
    try:
        with path.open("rb") as handle:
            data = handle.read(limits.max_bytes + 1)
    except OSError as exc:
        raise AttachmentError(f"{shown}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > limits.max_bytes:  # it grew since stat
        raise AttachmentError(f"{shown} is over the {human_bytes(limits.max_bytes)} limit: nothing attached")
    if is_binary(data[:SNIFF_BYTES]):
        raise AttachmentError(f"{shown} looks binary (not text): nothing attached")
    text = data.decode("utf-8", "replace")
    notice = ""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        bad = text.count("\ufffd") - data.decode("utf-8", "ignore").count("\ufffd")
        notice = f"not valid UTF-8: {bad} invalid sequence{'s' if bad != 1 else ''} shown as \ufffd"
    tokens = count(file_block(path.name, len(data), text))
    if tokens > limits.max_tokens:
        raise AttachmentError(f"{shown} is {tokens} tokens, over the {limits.max_tokens}-token limit: "
                              "attach a smaller part, or raise attach.max_tokens in config.toml")
    return Attachment(path.name, path, len(data), text, tokens, notice)


def directory_files(path: str | Path, limits: AttachLimits) -> list[Path]:
    """The text files a directory would bring in (sorted, hidden ones skipped); nothing is kept open.

    Raises AttachmentError when there are none, or more than ``max_files``.
    """
    root = Path(path).expanduser()
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            file = Path(dirpath) / name
            try:
                if not file.is_file() or file.stat().st_size > limits.max_bytes:
                    continue
                with file.open("rb") as handle:
                    if is_binary(handle.read(SNIFF_BYTES)):
                        continue
            except OSError:
                continue
            found.append(file)
            if len(found) > limits.max_files:
                raise AttachmentError(f"{root} holds more than {limits.max_files} text files: attach a "
                                      "smaller directory, or raise attach.max_files in config.toml")
    if not found:
        raise AttachmentError(f"{root} holds no text file under the size limit: nothing attached")
    return found


def complete_path(prefix: str, base: Path | None = None) -> str | None:
    """Tab completion for ``@prefix``: the longest common continuation of matching paths, or None.

    A single directory match ends with ``/`` so Tab can go on into it.
    """
    base = base or Path.cwd()
    folder_text, sep, stem = prefix.rpartition("/")
    if sep:
        folder = Path(folder_text or "/").expanduser()
        folder = folder if folder.is_absolute() else base / folder
        lead = folder_text + "/"
    else:
        folder, lead = base, ""
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith(stem) and (stem.startswith(".") or
                                                                                not n.startswith(".")))
    except OSError:
        return None
    if not names:
        return None
    common = os.path.commonprefix(names)
    done = lead + common
    if len(names) == 1 and (folder / names[0]).is_dir():
        done += "/"
    return done if done != prefix else None


def at_references(text: str) -> list[str]:
    """``@path`` words in a draft (an ``@`` at the start or after whitespace)."""
    refs = []
    for word in text.split():
        if word.startswith("@") and len(word) > 1:
            refs.append(word[1:])
    return refs
