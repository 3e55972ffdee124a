"""Where a headless run writes: the reply on stdout, everything else on stderr, often one terminal for both.

* **Inert on a terminal, exact to a pipe.**  A reply is the model's text, and a server's
  error, a tool's output or the reasoning is someone else's: any of them may hold escape
  sequences (``ESC ] 0 ;`` retitles the window, ``ESC [ 2 J`` clears it).  Written to a
  terminal, their controls are shown as text (``\\x1b``, :func:`app.tools.display.printable`),
  as ``ls``, ``git`` and the TUI do; written to a pipe or a file they stay exact, since a
  script reading them wants the bytes the model produced.
* **One line each on a shared terminal.**  When stdout and stderr are the same terminal, a
  line on stderr (an error, a notice, a tool call) must not be glued to an unfinished reply
  (``Hellotokchat: ...``), nor the reply to unfinished reasoning: the open line is ended first.
  A pipe gets no such newline: its bytes stay the reply's.
* **A closed stdout** (``| head -c 10``) cancels the reply instead of losing it (:class:`ReplyOut`).
"""
from __future__ import annotations

import os
from typing import Any, Callable, TextIO

from app.tools.display import printable


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal (a closed or file-less stream is not), as :mod:`app.cli.terminal` asks."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def shared_terminal(out: TextIO, err: TextIO) -> bool:
    """True when ``out`` and ``err`` are one terminal (what a user running tokchat by hand has)."""
    if not (is_terminal(out) and is_terminal(err)):
        return False
    try:
        return os.ttyname(out.fileno()) == os.ttyname(err.fileno())
    except (OSError, ValueError, AttributeError):
        return True  # both terminals, names unknown: treat them as one screen (a newline is the only cost)


class Stderr:
    """stderr for a headless run: the reasoning as it streams (``--show-thinking``) and whole lines
    (notices, tool calls, the ``--stats`` JSON).  Reasoning need not end in a newline, and the
    next line must not be glued to it (a script reads the stats as the last line, whole): a line
    written after unfinished reasoning starts on a line of its own.  ``before_line``: called before
    anything is written at the start of a line (the reply's open line is ended there, on a shared
    terminal)."""

    def __init__(self, err: TextIO) -> None:
        self._err = self.stream = err
        self._terminal = is_terminal(err)
        self._mid_line = False  # reasoning was written that did not end its line
        self._line_start = True  # the next write starts a line
        self.before_line: Callable[[], None] | None = None

    def reasoning(self, text: str) -> None:
        if not text:
            return
        self._start()
        self._err.write(printable(text) if self._terminal else text)
        self._err.flush()
        self._mid_line = not text.endswith("\n")
        self._line_start = not self._mid_line

    def write(self, text: str) -> int:
        """What ``print(..., file=err)`` calls: the line starts after any unfinished reasoning."""
        if not text:
            return 0
        if self._mid_line:
            self._err.write("\n")
            self._mid_line = False
            self._line_start = True
        self._start()
        self._line_start = text.endswith("\n")
        return self._err.write(printable(text) if self._terminal else text)

    def end_reasoning_line(self) -> None:
        """End unfinished reasoning's line (the reply is about to start on the same terminal)."""
        if self._mid_line:
            self._err.write("\n")
            self._err.flush()
            self._mid_line = False
            self._line_start = True

    def _start(self) -> None:
        if self._line_start and self.before_line is not None:
            self.before_line()

    def flush(self) -> None:
        self._err.flush()


class ReplyOut:
    """stdout for the reply; once it is closed under us the reply is cancelled, not lost.

    ``broken`` says why writing stopped (None while it works).  The rest of the reply's
    events still run through the loop, so the session ends the turn as cancelled and the
    history stores it; stdout is pointed at /dev/null so that Python's own flush at exit
    does not fail again.  ``before_write``: called before reply text is written (the
    reasoning's open line is ended there, on a shared terminal).
    """

    def __init__(self, out: TextIO, err: Stderr, stoppable: Any) -> None:
        self._out = self.stream = out
        self._err = err
        self._stoppable = stoppable
        self._terminal = is_terminal(out)
        self._unended = False  # reply text was written and the line that closes it was not
        self._column0 = True  # the last character written was a newline (or nothing was written)
        self.before_write: Callable[[], None] | None = None
        self.broken: str | None = None

    def write(self, text: str) -> None:
        """Reply text, as it streams."""
        if not text:
            return
        if self.before_write is not None:
            self.before_write()
        self._put(printable(text) if self._terminal else text)
        self._unended = True

    def end(self) -> None:
        """The reply's closing newline, unless an interjection already ended its line."""
        if self._unended:
            self._put("\n")
            self._unended = False

    def interject(self) -> None:
        """Another stream writes a line on this terminal: end the reply's open line first."""
        if self._unended and not self._column0:
            self._put("\n")
            self._unended = False

    def _put(self, text: str) -> None:
        if self.broken is not None:
            return
        try:
            self._out.write(text)
            self._out.flush()
            self._column0 = text.endswith("\n")
        except OSError as exc:  # BrokenPipeError, or EIO from a terminal that went away
            self.broken = "broken pipe" if isinstance(exc, BrokenPipeError) else (exc.strerror or str(exc))
            self._stoppable.cancel()
            self._silence()
            print(f"tokchat: stdout was closed ({self.broken}): the reply stopped there; what was generated "
                  "is kept in the history", file=self._err, flush=True)

    def _silence(self) -> None:
        try:
            fd = self._out.fileno()
        except (OSError, ValueError, AttributeError):
            return  # not a real file (a test's StringIO): nothing flushes it at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)


def share_terminal(reply: ReplyOut, err: Stderr) -> None:
    """Tell ``reply`` and ``err`` about each other when they are one terminal (see the module docstring)."""
    if shared_terminal(reply.stream, err.stream):
        err.before_line = reply.interject
        reply.before_write = err.end_reasoning_line
