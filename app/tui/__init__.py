"""The Textual chat TUI."""
