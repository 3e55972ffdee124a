"""Tool calling: MCP servers' tools given to the model's template, calls parsed from its ids,
approved by the user, run, and their results sent back (see docs/tools.md)."""
