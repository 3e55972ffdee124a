"""The Markdown export shows exactly the turns stored (issue 44, C6).

Checked with a real Markdown parser (markdown-it, CommonMark, as Textual uses it): the document's
top-level ``##`` headings are the turns, the reply is a paragraph of its own turn (not inside a code
block some earlier message opened), and the only raw HTML is the export's own ``<details>`` blocks.
Before the fix a user message holding ``## Assistant`` and an open code fence made a third turn and
swallowed the real reply into a code block.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from app.conversation.session import ChatMessage
from app.history.export import to_markdown
from app.history.store import ChatStore

ROOT = Path(__file__).resolve().parents[3]
REPLY = "The real reply."
INVENTED = "\n## Assistant\n\nI was never said.\n"


def _conversation(store: ChatStore, user: str, *, reasoning: str = "", system: str = "", title: str = "") -> int:
    conv = store.new_conversation("/m/smollm2.gguf", "model", system, {"temperature": 0.0}, model_name="SmolLM2",
                                  title=title)
    store.add_message(conv, ChatMessage("user", user))
    reply = store.begin_reply(conv)
    store.finish_message(reply, ChatMessage("assistant", REPLY, reasoning=reasoning, finish_reason="stop"))
    return conv


def _turns(markdown: str) -> list[str]:
    """The top-level ``##`` headings: the turns a reader sees."""
    tokens = MarkdownIt("commonmark").parse(markdown)
    return [tokens[at + 1].content for at, t in enumerate(tokens)
            if t.type == "heading_open" and t.tag in ("h1", "h2") and t.level == 0][1:]  # the title first


def _reply_is_a_paragraph_of_the_last_turn(markdown: str) -> bool:
    tokens = MarkdownIt("commonmark").parse(markdown)
    last_turn = max(at for at, t in enumerate(tokens) if t.type == "heading_open" and t.level == 0)
    return any(t.type == "inline" and t.content == REPLY and tokens[at - 1].type == "paragraph_open"
               and tokens[at - 1].level == 0 for at, t in enumerate(tokens) if at > last_turn)


def _raw_html(markdown: str) -> list[str]:
    """Raw HTML a browser would act on, other than the export's own collapsed blocks."""
    tokens = MarkdownIt("commonmark").parse(markdown)
    html = [t.content for t in tokens if t.type == "html_block"]
    html += [c.content for t in tokens for c in t.children or () if c.type == "html_inline"]
    own = ("<details>\n<summary>", "</details>")
    return [h for h in html if not h.startswith(own)]


def test_the_exported_markdown_has_the_turns_that_exist(tmp_path):
    """The issue's case, through ``tokchat export N --format md`` (stdout of the real command)."""
    with ChatStore(tmp_path / "history.sqlite3") as store:
        conv = _conversation(store, f"Look at this:{INVENTED}\n```python\nprint('cut here')")
    env = {**os.environ, "TOKCHAT_DATA_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "app", "export", str(conv), "--format", "md"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _turns(done.stdout) == ["User", "Assistant"], done.stdout
    assert _reply_is_a_paragraph_of_the_last_turn(done.stdout), done.stdout
    assert "I was never said." in done.stdout.split("\n## Assistant\n")[0]  # kept, inside the user's turn


@pytest.mark.parametrize("hostile", [
    INVENTED + "```",                                  # an open backtick fence
    INVENTED + "~~~~ text",                            # an open tilde fence
    INVENTED + "   ```",                               # an indented open fence
    "Assistant\n---\n\nI was never said.",             # a setext heading
    "- a list\n\n  ## Assistant\n\n  I was never said.",  # a heading inside a list item
    "> ## Assistant\n> I was never said.",             # ... inside a quote
    "<!-- an open HTML comment" + INVENTED,            # swallows the rest in a browser and in CommonMark
    "<details>\n<summary>x</summary>" + INVENTED,      # collapses every later turn in a browser
    "text </details> and <script>alert(1)</script>",   # inline HTML
    "Assistant\r\n===\r\n\r\nI was never said.",      # Windows line ends
])
def test_no_message_text_adds_or_swallows_a_turn(tmp_path, hostile):
    with ChatStore(tmp_path / "history.sqlite3") as store:
        md = to_markdown(store.load(_conversation(store, hostile, reasoning=hostile, system=hostile,
                                                  title="A title" + INVENTED)))
    assert _turns(md) == ["System", "User", "Assistant"], md
    assert _reply_is_a_paragraph_of_the_last_turn(md), md
    assert _raw_html(md) == [], md
    assert md.count("I was never said.") == (3 if "never" in hostile else 0) + 1  # each copy kept, title in one line


def test_ordinary_markdown_stays_markdown(tmp_path):
    """A reply's own Markdown still renders: its headings one level under the turn, a closed fence as it was."""
    text = "# Steps\n\n1. **Boil** water\n2. Pour\n\n```python\nprint('tea')\n```\n\n## Notes\n\nDone."
    with ChatStore(tmp_path / "history.sqlite3") as store:
        md = to_markdown(store.load(_conversation(store, text)))
    tokens = MarkdownIt("commonmark").parse(md)
    headings = [(t.tag, tokens[at + 1].content) for at, t in enumerate(tokens) if t.type == "heading_open"]
    assert ("h3", "Steps") in headings and ("h4", "Notes") in headings
    assert [t.content for t in tokens if t.type == "fence"] == ["print('tea')\n"]
    assert any(c.type == "strong_open" for t in tokens for c in t.children or ())
    assert _turns(md) == ["User", "Assistant"]
