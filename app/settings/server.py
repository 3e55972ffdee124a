"""Remote-server settings: ``[server]``, named ``[servers.NAME]`` presets, the flags, the API key.

``[server]`` in ``configs/default.toml`` documents every key (checked by
:mod:`app.settings.config`'s schema like any other setting).  A user's ``config.toml`` may also
hold presets, one table per server::

    [servers.gpu-box]
    url = "https://gpu-box:8000"
    kind = "vllm"
    model = "hf:Qwen/Qwen2.5-7B-Instruct-GGUF/qwen2.5-7b-instruct-q4_k_m.gguf"   # our tokenizer

and ``--server gpu-box`` (or ``/server gpu-box``) picks one.  A preset holds the
``[server]`` keys plus ``model`` (where our tokenizer and template come from); flags
still win over it.  The API key: ``--api-key``, else ``TOKCHAT_API_KEY``, else the
config or preset (a key in a file is the user's choice; the environment is preferred).
"""
from __future__ import annotations

import os
from typing import Any

from app.settings.config import (SCHEMA, SERVER_PRESETS, ConfigError, check_value, flatten, read_toml,
                                 user_config_path)
from app.settings.toml_lines import located
from backends.remote import RemoteSettings
from backends.timeouts import REMOTE_CONNECT_S, REMOTE_FIRST_TOKEN_S, REMOTE_IDLE_S

API_KEY_ENV = "TOKCHAT_API_KEY"
#: a preset's keys: the [server] settings plus the tokenizer source
PRESET_KEYS = ("url", "kind", "api_key", "trust_vocab", "connect_timeout", "first_token_timeout",
               "idle_timeout", "model")


def split_server_presets(table: dict, source: str) -> tuple[dict, dict[str, dict[str, Any]]]:
    """``table`` without its ``[servers.*]`` tables, and those presets checked."""
    rest = {k: v for k, v in table.items() if k != SERVER_PRESETS}
    raw = table.get(SERVER_PRESETS, {})
    if not isinstance(raw, dict):
        raise ConfigError(f"{located(source, SERVER_PRESETS)}: servers must be tables ([servers.NAME]), "
                          f"not {type(raw).__name__}")
    presets: dict[str, dict[str, Any]] = {}
    for name, body in raw.items():
        if not isinstance(body, dict):
            raise ConfigError(f"{located(source, SERVER_PRESETS, name)}: servers.{name} must be a table "
                              f"([servers.{name}])")
        preset: dict[str, Any] = {}
        for key, value in body.items():
            if key not in PRESET_KEYS:
                raise ConfigError(f"{located(source, SERVER_PRESETS, name, key)}: unknown key servers.{name}.{key} "
                                  f"(known: {', '.join(PRESET_KEYS)})")
            schema_key = "model.default" if key == "model" else f"server.{key}"
            preset[key] = check_value(source, schema_key, value, at=(SERVER_PRESETS, name, key)) \
                if schema_key in SCHEMA else value
        if "url" not in preset:
            raise ConfigError(f"{located(source, SERVER_PRESETS, name)}: servers.{name} needs a url")
        # an empty or schemeless url would leave no server, and the chat would quietly answer from the
        # local engine: the user named a server, so that is an error
        if not preset["url"].strip().startswith(("http://", "https://")):
            what = "is empty" if not preset["url"].strip() else f"is {preset['url']!r}, not an http(s):// URL"
            raise ConfigError(f"{located(source, SERVER_PRESETS, name, 'url')}: servers.{name}.url {what}: "
                              "give http://HOST:PORT or https://HOST:PORT")
        presets[name] = preset
    return rest, presets


def server_values(values: dict[str, Any], sources: dict[str, str],
                  presets: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], str | None]:
    """The ``server.*`` values after applying a named preset, and the preset's ``model`` (if any).

    A preset's values replace the config's, but not values given as flags.
    """
    merged = {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("server.")}
    name = merged.get("url", "")
    if not name.strip() and sources.get("server.url", "").startswith("--"):
        # config's url = "" means "no server"; a --server given empty names none: not a request for local
        raise ConfigError("--server is empty: give an http(s):// URL or a [servers.NAME] preset "
                          "(leave --server out to chat with the local engine)")
    preset = presets.get(name) if name and not name.startswith(("http://", "https://")) else None
    if name and preset is None and not name.startswith(("http://", "https://")):
        known = ", ".join(sorted(presets)) or "none defined"
        raise ConfigError(f"--server {name}: not an http(s):// URL and not a [servers.NAME] preset "
                          f"(presets: {known})")
    model = None
    if preset is not None:
        for key, value in preset.items():
            if key == "model":
                model = value
            elif key == "url" or not sources.get(f"server.{key}", "").startswith("--"):
                merged[key] = value
    return merged, model


def masked_key(key: str) -> str:
    """An API key as ``tokchat config show`` prints it: ``sk-…abcd`` (a short key: ``********``; none: "")."""
    if not key:
        return ""
    return f"{key[:3]}…{key[-4:]}" if len(key) >= 12 else "********"


def remote_settings(server: dict[str, Any], api_key_from_flag: bool) -> RemoteSettings | None:
    """:class:`RemoteSettings` for the merged ``server.*`` values; None when no server is set."""
    url = server.get("url") or ""
    if not url:
        return None
    key = server.get("api_key") or None
    if not api_key_from_flag and os.environ.get(API_KEY_ENV):
        key = os.environ[API_KEY_ENV]
    return RemoteSettings(
        url=url, kind=server.get("kind") or "auto", api_key=key,
        trust_server_vocab=bool(server.get("trust_vocab")),
        connect_timeout_s=float(server.get("connect_timeout") or REMOTE_CONNECT_S),
        first_token_timeout_s=float(server.get("first_token_timeout") or REMOTE_FIRST_TOKEN_S),
        idle_timeout_s=float(server.get("idle_timeout") or REMOTE_IDLE_S),
    )


def user_server_presets() -> dict[str, dict[str, Any]]:
    """The ``[servers.NAME]`` presets of the user's ``config.toml`` as it is now.

    The rest of the file is checked too, as :func:`app.settings.merge.read_settings`
    checks it, so a file broken since the chat started is the same ConfigError here.
    """
    path = user_config_path()
    if not path.exists():  # a directory or unreadable file of that name is an error (read_toml)
        return {}
    table, presets = split_server_presets(read_toml(path), str(path))
    flatten(str(path), table)
    return presets


def server_for_command(arg: str, current: RemoteSettings | None) -> tuple[RemoteSettings | None, str | None]:
    """What ``/server ARG`` switches to: (settings or None for local, a preset's model or None).

    ``ARG`` is an http(s):// URL (keeping the current key, kind ``auto``), a
    ``[servers.NAME]`` preset, or ``off`` for the local engine.  Raises ValueError
    with the line to show.
    """
    arg = arg.strip()
    if not arg:
        raise ValueError("/server needs a URL (http://HOST:PORT), a [servers.NAME] preset, or off")
    if arg.lower() in ("off", "local", "none"):
        return None, None
    if arg.startswith(("http://", "https://")):
        key = current.api_key if current is not None else os.environ.get(API_KEY_ENV)
        return RemoteSettings(url=arg, api_key=key or None), None
    presets = user_server_presets()
    if arg not in presets:
        raise ValueError(f"/server {arg}: not an http(s):// URL and not a [servers.NAME] preset "
                         f"(presets: {', '.join(sorted(presets)) or 'none defined'})")
    values, model = server_values({"server.url": arg}, {}, presets)
    return remote_settings(values, api_key_from_flag=False), model
