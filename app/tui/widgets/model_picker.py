"""The ``/model`` picker: every model on this machine, recently used first; Enter opens one.

The list is :func:`app.models.catalog.catalog` (bundled model, ``model.dirs``,
the Hugging Face cache), read in a thread worker because it opens every
model's header; the dialog shows at once and fills in.  It dismisses with
the chosen model's path (what ``/model PATH`` takes), or None on Esc.
Downloading is not done here: ``/model hf:ORG/REPO:QUANT`` does that.
"""
from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option


def _size(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _context(n: int | None) -> str:
    if not n:
        return "?"
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


class ModelPicker(ModalScreen[str | None]):
    """Choose a model; ``current`` (the loaded model's path) is marked."""

    DEFAULT_CSS = """
    ModelPicker { align: center middle; }
    ModelPicker > Vertical { width: 96; max-width: 100%; height: auto; max-height: 90%;
                             padding: 0 1; background: $panel; border: round $primary; }
    ModelPicker OptionList { height: auto; max-height: 20; border: none; }
    ModelPicker .hint { color: $text-muted; }
    """
    BINDINGS = [Binding("escape", "dismiss(None)", "Close")]

    def __init__(self, dirs: list[Path], current: Path | None = None) -> None:
        super().__init__()
        self.dirs = dirs
        self.current = current.resolve() if current else None
        #: the catalog entries, in the order of the options
        self.entries: list = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Open a model  (Enter opens · Esc closes)")
            yield OptionList(id="models")
            yield Label("reading model headers …", id="status", classes="hint")
            yield Label("Not here? /model hf:ORG/REPO:Q4_K_M or a preset name (qwen2.5) downloads one.",
                        classes="hint", markup=False)

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()
        self._read_catalog()

    @work(thread=True, exclusive=True)
    def _read_catalog(self) -> None:
        from app.models.catalog import catalog

        entries, problems = catalog(self.dirs)
        self.app.call_from_thread(self._show, entries, problems)

    def _row(self, entry) -> Text:
        """Two lines: the facts in columns, then where the model comes from (what /model takes)."""
        from app.models.catalog import human_age

        info = entry.info
        here = self.current is not None and info.path.resolve() == self.current
        row = Text("● " if here else "  ", style="bold" if here else "")
        row.append(f"{(info.name or info.path.stem)[:32]:<32} ", style="bold")
        row.append(f"{info.architecture[:9]:<9} {info.quantization[:8]:<8} {_size(info.size_bytes):>8} "
                   f"{_context(info.context_length):>5}  {human_age(entry.last_used)}")
        source = entry.model_arg if entry.model_arg != "(default)" else "the bundled model"
        row.append(f"\n  {source}", style="dim")
        return row

    def _show(self, entries: list, problems: list[str]) -> None:
        # a vocabulary-only GGUF (a tokenizer test file) has no weights to chat with: not offered, but counted
        offered = [e for e in entries if not e.info.vocabulary_only]
        vocabularies = len(entries) - len(offered)
        self.entries = entries = offered
        options = self.query_one(OptionList)
        options.clear_options()
        options.add_options([Option(self._row(e), id=str(i)) for i, e in enumerate(entries)])
        if entries:
            options.highlighted = 0
        status = f"{len(entries)} model{'s' if len(entries) != 1 else ''}"
        if vocabularies:
            status += f" · {vocabularies} vocabulary-only file(s) not offered (no weights)"
        if problems:
            status += f" · {len(problems)} unreadable file(s) skipped (`tokchat models` lists them)"
        self.query_one("#status", Label).update(status if entries else "no models found")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        assert event.option.id is not None  # every option's id is its entry's index
        entry = self.entries[int(event.option.id)]
        self.dismiss(str(entry.info.path))
