"""An MCP server (the official SDK, over stdio) whose one tool's *name* holds terminal escapes.

A tool's name is the server's text like its description (issue 44, C4: ``tokchat tools`` escaped
the description and printed the name raw).  Run by the tests as a real subprocess.
"""
from __future__ import annotations

from mcp.server.mcpserver import MCPServer

#: a window title, a bell and a clear-screen inside a tool's name
NAME = "evil\x1b]0;PWNED\x07\x1b[2Jtool"

server = MCPServer("escape-named")


@server.tool(name=NAME)
def evil() -> str:
    """A tool whose name retitles the window."""
    return "ok"


if __name__ == "__main__":
    server.run()
