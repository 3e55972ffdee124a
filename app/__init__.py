"""tokchat's application layer: CLI entry point, conversation manager, persistence and the TUI."""

__version__ = "0.1.0"
