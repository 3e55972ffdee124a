"""A message's text placed in a Markdown document so that it cannot reach outside its own turn.

The Markdown export (:mod:`app.history.export`) writes each turn under its own
``## Role`` heading, and the message text between them is Markdown as the model
or the user wrote it.  Written as it is, a message can change the document around
it: a ``## Assistant`` line in a user message reads as a turn nobody wrote, an
open code fence (a reply cut by ``max_tokens`` inside a code block) swallows every
later turn, an HTML comment or ``<details>`` does the same in a browser.

:func:`contained` keeps the text as Markdown where that is safe and checks it
with a real parser (markdown-it, CommonMark, the parser behind Textual's
Markdown widget):

* headings are moved down so the shallowest is ``###`` (the document's own
  are ``#`` for the title and ``##`` for turns);
* a code fence still open at the end is closed;
* raw HTML, a heading inside a list or quote, or anything else the check does
  not accept afterwards: the text is shown verbatim in a fenced block instead
  (a fence longer than any run of backticks in it).

:func:`one_line` is for the short fields written inside a line (a title, a
model or tool name): line breaks become spaces and ``<`` is an entity.

Not handled: link reference definitions (``[x]: url``) still apply to the
whole document, as Markdown defines them; they change how a ``[x]`` elsewhere
is shown, not which turns there are.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

#: what follows a message in the export, at worst: a heading at the start of a line after a blank line
_SENTINEL = "## tokchat end of message"
_ATX = re.compile(r"^( {0,3})(#{1,6})(?=[ \t]|$)")
_NEWLINES = re.compile(r"\r\n?")
#: the shallowest heading a message may hold (the title is h1, each turn h2)
_TOP_LEVEL = 3


@lru_cache(maxsize=1)
def _parser() -> Any:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark")


def contained(text: str) -> str:
    """``text`` as Markdown blocks that end where it ends: no heading above ``###``, no open fence, no HTML.

    Leading and trailing blank lines are dropped; ``""`` for a text with nothing in it.
    """
    source = _trimmed(text)
    if not source:
        return ""
    demoted = _demoted(source)
    if demoted is not None:
        closed = _closed(demoted)
        if _stays_inside(closed):
            return closed
    return fenced(source, "text")


def fenced(text: str, language: str = "") -> str:
    """``text`` verbatim in a fenced code block whose fence no line of it can close."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text}\n{fence}"


def one_line(text: str) -> str:
    """A short field for a line of the export: whitespace runs (line breaks too) as one space, ``<`` inert."""
    return " ".join(str(text).split()).replace("<", "&lt;")


def _trimmed(text: str) -> str:
    """Line ends as the parser reads them (``\\r\\n`` and ``\\r`` are ``\\n``); blank lines at either end gone."""
    lines = _NEWLINES.sub("\n", text).split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines)


def _demoted(source: str) -> str | None:
    """``source`` with its headings moved down so the shallowest is ``###``; None where one cannot be moved
    by rewriting its line (raw HTML anywhere, or a shallow heading inside a list or a quote)."""
    tokens = _parser().parse(source)
    if _has_html(tokens):
        return None
    headings = [t for t in tokens if t.type == "heading_open"]
    shallowest = min((int(t.tag[1]) for t in headings), default=_TOP_LEVEL)
    shift = max(0, _TOP_LEVEL - shallowest)
    if not shift:
        return source
    lines: list[str | None] = list(source.split("\n"))  # None: a line folded into the heading above it
    for at, token in enumerate(tokens):
        if token.type != "heading_open":
            continue
        if token.level != 0 or token.map is None:
            return None
        level = min(6, int(token.tag[1]) + shift)
        first, end = token.map
        if token.markup.startswith("#"):
            lines[first] = _ATX.sub(lambda m: m.group(1) + "#" * level, lines[first], count=1)
        else:  # setext (a line of = or - under the text): one ATX line holding the same text
            words = " ".join(tokens[at + 1].content.split("\n")).strip()
            if words.endswith("#"):  # an ATX heading drops a closing run of #: keep this one as text
                words = words[:-1] + "\\#"
            lines[first:end] = [f"{'#' * level} {words}", *[None] * (end - first - 1)]
    return "\n".join(line for line in lines if line is not None)


def _closed(source: str) -> str:
    """``source`` with a code fence that is still open at its end closed (a reply cut inside a code block)."""
    tokens = _parser().parse(f"{source}\n\n{_SENTINEL}")
    last = tokens[-1] if tokens else None
    if last is not None and last.type == "fence" and last.level == 0 and last.content.rstrip("\n").endswith(_SENTINEL):
        return f"{source}\n{last.markup}"
    return source


def _stays_inside(source: str) -> bool:
    """Whether a heading after ``source`` is still the document's own, and ``source`` holds none above h3."""
    tokens = _parser().parse(f"{source}\n\n{_SENTINEL}")
    if _has_html(tokens):
        return False
    shallow = [at for at, t in enumerate(tokens) if t.type == "heading_open" and int(t.tag[1]) < _TOP_LEVEL]
    return (shallow == [len(tokens) - 3] and tokens[-3].level == 0
            and tokens[-2].content == _SENTINEL.lstrip("# "))


def _has_html(tokens: list) -> bool:
    return any(t.type == "html_block" or any(c.type == "html_inline" for c in t.children or ())
               for t in tokens)
