"""Ask before a tool runs: once, always for this tool, or deny."""
from __future__ import annotations

import json

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static

from app.tools.display import printable


class ToolApprovalScreen(ModalScreen[str]):
    """Shows server, tool and arguments; dismisses with ``once``, ``always`` or ``deny``."""

    DEFAULT_CSS = """
    ToolApprovalScreen { align: center middle; }
    ToolApprovalScreen > Vertical { width: 80; height: auto; max-height: 80%; padding: 1 2;
                                    background: $panel; border: round $warning; }
    ToolApprovalScreen #arguments { height: auto; max-height: 20; overflow-y: auto; margin: 1 0;
                                    color: $text-muted; }
    ToolApprovalScreen Horizontal { height: auto; align-horizontal: right; }
    ToolApprovalScreen Button { margin-left: 1; }
    """
    BINDINGS = [Binding("y", "dismiss('once')", "Run once"), Binding("a", "dismiss('always')", "Always"),
                Binding("n", "dismiss('deny')", "Deny"), Binding("escape", "dismiss('deny')", "Deny")]

    def __init__(self, server: str, tool: str, arguments: dict) -> None:
        super().__init__()
        self.server, self.tool, self.arguments = server, tool, arguments

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(printable(f"The model wants to run {self.tool} from the MCP server {self.server}:"),
                        markup=False)
            yield Static(printable(json.dumps(self.arguments, ensure_ascii=False, indent=2)), id="arguments",
                         markup=False)
            with Horizontal():
                yield Button("Deny (n)", id="deny", variant="error")
                yield Button("Always for this tool (a)", id="always")
                yield Button("Run once (y)", id="once", variant="success")

    def on_mount(self) -> None:
        self.query_one("#deny", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id)
