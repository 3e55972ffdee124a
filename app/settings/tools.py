"""Tool settings: ``[tools]`` and the user's ``[mcp.servers.NAME]`` tables, checked.

``[mcp.servers.NAME]`` is written as other MCP clients write it: ``command``,
``args``, ``env`` (and ``cwd``) for a stdio server, or ``url`` and
``headers`` for a streamable-HTTP one.  Anything else is a ConfigError
naming the file and the key, like every other setting.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.settings.config import ConfigError
from app.settings.toml_lines import located

_SERVER_KEYS = {"command": str, "args": list, "env": dict, "cwd": str, "url": str, "headers": dict}


@dataclass(frozen=True)
class ServerConfig:
    """One ``[mcp.servers.NAME]`` table: a command to run (stdio) or a URL (streamable HTTP).

    A setting, so it is defined here and :mod:`app.tools.mcp_client` (which
    starts the servers) imports it: settings never import the client.
    """

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ""
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def transport(self) -> str:
        return "http" if self.url else "stdio"


@dataclass
class ToolSettings:
    """What a chat's tool calling runs with."""

    #: "" (no tools), "all", or a comma-separated list of server names
    enabled: str = ""
    servers: dict[str, ServerConfig] = field(default_factory=dict)
    auto_approve: tuple[str, ...] = ()
    approve_all: bool = False
    max_steps: int = 8
    result_tokens: int = 2048
    call_timeout_s: float = 60.0
    #: joined to the system prompt while tools are given ("" = nothing)
    instructions: str = ""
    #: hold every call's arguments to its tool's input schema while the model writes them (issue 46)
    constrain_arguments: bool = False

    def selected(self) -> list[str]:
        """The server names whose tools the model gets (``SERVER.TOOL`` entries name their server)."""
        value = self.enabled.strip()
        if not value:
            return []
        if value == "all":
            return list(self.servers)
        names = [n.strip().split(".", 1)[0] for n in value.split(",") if n.strip()]
        return list(dict.fromkeys(names))

    def allows(self, server: str, tool: str) -> bool:
        """Whether ``tool`` of ``server`` is given to the model (``SERVER`` gives all its tools)."""
        entries = [n.strip() for n in self.enabled.split(",") if n.strip()]
        return self.enabled.strip() == "all" or server in entries or f"{server}.{tool}" in entries

    def chosen(self, tools: list) -> list:
        """``tools`` (ToolInfo) narrowed to the ones enabled."""
        return [t for t in tools if self.allows(t.server, t.name)]

    def unknown(self) -> list[str]:
        return [n for n in self.selected() if n not in self.servers]


def tool_settings(settings: Any, approve_all: bool = False) -> ToolSettings:
    """ToolSettings from merged :class:`app.settings.merge.Settings`."""
    v = settings.values
    source, table = settings.own_tables.get("mcp", ("", {}))
    return ToolSettings(
        enabled=v["tools.enabled"], servers=parse_servers(source, table),
        auto_approve=tuple(v["tools.auto_approve"]), approve_all=approve_all,
        max_steps=v["tools.max_steps"], result_tokens=v["tools.result_tokens"],
        call_timeout_s=float(v["tools.call_timeout_s"]), instructions=v["tools.instructions"],
        constrain_arguments=v["tools.constrain_arguments"])


def parse_servers(source: str, table: Any) -> dict[str, ServerConfig]:
    """The ``[mcp]`` table's servers, checked; one ConfigError line per problem."""
    if not table:
        return {}
    if not isinstance(table, dict) or set(table) - {"servers"}:
        extra = sorted(set(table) - {"servers"}) if isinstance(table, dict) else []
        raise ConfigError(f"{located(source, 'mcp', *extra[:1])}: [mcp] holds only [mcp.servers.NAME] tables")
    servers = table.get("servers", {})
    if not isinstance(servers, dict):
        raise ConfigError(f"{located(source, 'mcp', 'servers')}: mcp.servers must be tables ([mcp.servers.NAME])")
    out: dict[str, ServerConfig] = {}
    for name, body in servers.items():
        where = f"{located(source, 'mcp', 'servers', name)}: mcp.servers.{name}"
        if not isinstance(body, dict):
            raise ConfigError(f"{where} must be a table")
        for key, value in body.items():
            at = f"{located(source, 'mcp', 'servers', name, key)}: mcp.servers.{name}"
            if key not in _SERVER_KEYS:
                raise ConfigError(f"{at}: unknown key {key} (known: {', '.join(_SERVER_KEYS)})")
            if not isinstance(value, _SERVER_KEYS[key]):
                raise ConfigError(f"{at}.{key} must be a {_SERVER_KEYS[key].__name__}")
        if bool(body.get("command")) == bool(body.get("url")):
            raise ConfigError(f"{where} needs either command (a stdio server) or url (streamable HTTP)")
        args, env, headers = body.get("args", []), body.get("env", {}), body.get("headers", {})
        if not all(isinstance(a, str) for a in args) or not all(isinstance(x, str) for x in
                                                                   [*env.values(), *headers.values()]):
            raise ConfigError(f"{where}: args, env and headers hold strings")
        out[name] = ServerConfig(name=name, command=body.get("command", ""), args=tuple(args), env=dict(env),
                                 cwd=body.get("cwd", ""), url=body.get("url", ""), headers=dict(headers))
    return out
