"""The merged settings: ``configs/default.toml`` < the model's preset < the user's ``config.toml`` < flags.

:func:`read_settings` merges the files and the flags and keeps the source of
every value for ``tokchat config show``; :func:`options_from_settings` turns
the merge into the :class:`app.settings.options.ChatOptions` a chat runs with.
The model's preset is not matched here: that reads the model's header, which
is the models' work (:func:`app.models.preset_match.load_settings` matches it
and lays it in with :meth:`Settings.apply_preset`).

The top of the settings: it uses :mod:`app.settings.config` (files, schema),
:mod:`app.settings.server` and :mod:`app.settings.tools`, none of which use it.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from app.conversation.attachments import AttachLimits
from app.settings.config import (DEFAULTS_PATH, OWN_TABLES, SCHEMA, check_value, flatten, read_toml,
                                 user_config_path)
from app.settings.options import ChatOptions
from app.settings.reply_format import format_setting
from app.settings.server import remote_settings, server_values, split_server_presets
from app.settings.tools import tool_settings
from backends.base import SamplingParams

if TYPE_CHECKING:
    from backends.model_meta import ModelMeta


class MatchedPreset(Protocol):
    """What the settings read of a model preset (``app.models.presets.Preset``, a room above: named here by what
    is read, not imported)."""

    name: str
    path: Path
    values: dict[str, Any]

#: the source shown for a value nobody changed (``tokchat config show``)
DEFAULTS_SOURCE = "default.toml"

#: CLI flag (argparse dest) -> setting; a flag left out is None and does not count
FLAG_SETTINGS: dict[str, str] = {
    "model": "model.default", "backend": "model.backend", "device": "model.device",
    "ctx": "model.context_size", "threads": "model.threads", "gpu_layers": "model.gpu_layers", "kv_type": "model.kv_type",
    "speculative": "model.speculative", "draft_model": "model.draft_model", "template": "chat.template", "template_file": "chat.template_file",
    "system": "chat.system_prompt", "think": "chat.thinking", "show_thinking": "chat.show_thinking",
    "stats": "chat.stats", "temperature": "sampling.temperature", "top_p": "sampling.top_p",
    "top_k": "sampling.top_k", "min_p": "sampling.min_p", "repeat_penalty": "sampling.repeat_penalty",
    "repeat_last_n": "sampling.repeat_last_n", "max_tokens": "sampling.max_tokens", "seed": "sampling.seed", "history": "history.enabled",
    "tools": "tools.enabled", "state": "state.enabled",
    "theme": "ui.theme",
    "server": "server.url", "server_kind": "server.kind", "api_key": "server.api_key",
    "trust_server_vocab": "server.trust_vocab", "reasoning_budget": "chat.reasoning_budget",
    "compact": "chat.compact",
}


def flag_values(args: argparse.Namespace | None) -> dict[str, tuple[str, Any]]:
    """Settings given as flags: key -> (the flag as typed, value in config terms)."""
    out: dict[str, tuple[str, Any]] = {}
    for dest, key in FLAG_SETTINGS.items():
        value = getattr(args, dest, None) if args is not None else None
        if value is None:
            continue
        if dest == "think":
            value = "on" if value else "off"
        flag = "--no-history" if dest == "history" else "--" + dest.replace("_", "-")
        if dest == "state":
            flag = "--no-state"
        if dest == "think" and value == "off":
            flag = "--no-think"
        out[key] = (flag, check_value(flag, key, value))
    return out


@dataclass
class Settings:
    """The merged settings, with where each value came from."""

    values: dict[str, Any]
    sources: dict[str, str]
    #: the preset applied (None when no model preset matched or the model could not be read)
    preset: MatchedPreset | None = None
    model_path: Path | None = None
    #: why no preset applies, when that is worth saying (the model is missing, unreadable...)
    preset_note: str | None = None
    #: the model's header, read once while matching the preset (see app.models.preset_match.PresetMatch)
    model_meta: ModelMeta | None = field(default=None, repr=False)
    files: list[Path] = field(default_factory=list)
    #: the user's free-form tables (see config.OWN_TABLES) as parsed, with the file they came from
    own_tables: dict[str, tuple[str, Any]] = field(default_factory=dict)
    #: ``[servers.NAME]`` presets from the user's config.toml (see :mod:`app.settings.server`)
    server_presets: dict[str, dict[str, Any]] = field(default_factory=dict)

    def wants_preset(self) -> bool:
        """Whether the preset is matched from ``--model``: not for a server with no ``--model`` (the
        tokenizer then comes from the server, and so does the preset:
        :func:`app.models.preset_match.match_served`)."""
        return not (self.values["server.url"] and not self.values["model.default"])

    def apply_preset(self, preset: MatchedPreset | None, model_path: Path | None, note: str | None,
                     meta: ModelMeta | None = None) -> None:
        """Lay a matched model preset under the user's config and the flags.

        The preset is matched by the caller (:func:`app.models.preset_match.load_settings`),
        because matching reads the model and settings sit below the models.  Its values
        replace only those still from default.toml: the layering is default.toml < preset
        < config.toml < flags, as if the preset had been merged in its place.
        """
        self.preset, self.model_path, self.preset_note, self.model_meta = preset, model_path, note, meta
        if preset is None:
            return
        for key, value in preset.values.items():
            if self.sources[key] == DEFAULTS_SOURCE:
                self.values[key], self.sources[key] = value, f"preset {preset.name}"


def read_settings(args: argparse.Namespace | None = None) -> Settings:
    """Merge default.toml, the user's config.toml and the flags; no model preset yet.

    A model preset needs the model read, which is the models' work: callers that want
    one use :func:`app.models.preset_match.load_settings`, which applies it with
    :meth:`Settings.apply_preset`.
    """
    values = flatten(str(DEFAULTS_PATH), read_toml(DEFAULTS_PATH))
    missing = set(SCHEMA) - set(values)
    assert not missing, f"configs/default.toml lacks {sorted(missing)}"
    sources = dict.fromkeys(values, DEFAULTS_SOURCE)
    files = [DEFAULTS_PATH]
    own: dict[str, tuple[str, Any]] = {}
    server_presets: dict[str, dict[str, Any]] = {}
    user_path = user_config_path()
    if user_path.exists():  # a directory or unreadable file of that name is an error (read_toml)
        table, server_presets = split_server_presets(read_toml(user_path), str(user_path))
        for key, value in flatten(str(user_path), table).items():
            values[key], sources[key] = value, str(user_path)
        own = {name: (str(user_path), table[name]) for name in OWN_TABLES if name in table}
        files.append(user_path)
    for key, (flag, value) in flag_values(args).items():
        values[key], sources[key] = value, flag
    return Settings(values, sources, files=files, own_tables=own, server_presets=server_presets)


def options_from_settings(settings: Settings, args: argparse.Namespace | None = None) -> ChatOptions:
    """The :class:`ChatOptions` for merged settings (plus ``--prompt``, which is not a setting)."""
    v = settings.values
    sampling = SamplingParams(
        temperature=v["sampling.temperature"], top_p=v["sampling.top_p"], top_k=v["sampling.top_k"],
        min_p=v["sampling.min_p"], repeat_penalty=v["sampling.repeat_penalty"],
        repeat_last_n=v["sampling.repeat_last_n"],
        max_tokens=v["sampling.max_tokens"], seed=None if v["sampling.seed"] < 0 else v["sampling.seed"])
    if v["chat.format"]:  # a preset's or the user's reply format, checked here: a bad one is a ConfigError
        sampling.constraint = format_setting(v["chat.format"], settings.sources.get("chat.format", ""))
    server = _server_options(settings)
    ctx = v["model.context_size"] or None
    if server.get("server") is not None and settings.sources.get("model.context_size", "").startswith("preset "):
        ctx = None  # a preset's context size is for loading the model here; a server has its own
    return ChatOptions(
        model=server.pop("model", None) or v["model.default"] or None,
        prompt=getattr(args, "prompt", None),
        system=v["chat.system_prompt"],
        template=v["chat.template"],
        template_file=Path(v["chat.template_file"]).expanduser() if v["chat.template_file"] else None,
        backend=v["model.backend"],
        device=v["model.device"] or None,
        sampling=sampling,
        ctx=ctx,
        threads=v["model.threads"] or None,
        gpu_layers=None if v["model.gpu_layers"] < 0 else v["model.gpu_layers"],
        kv_type=v["model.kv_type"],
        speculative=v["model.speculative"],
        draft_model=Path(v["model.draft_model"]).expanduser() if v["model.draft_model"] else None,
        think={"auto": None, "on": True, "off": False}[v["chat.thinking"]],
        show_thinking=v["chat.show_thinking"],
        reasoning_budget=None if v["chat.reasoning_budget"] < 0 else v["chat.reasoning_budget"],
        compact=v["chat.compact"],
        paste_chip_tokens=v["paste.chip_tokens"], paste_chip_lines=v["paste.chip_lines"],
        resume=getattr(args, "resume", None), continue_reply=bool(getattr(args, "continue_reply", False)),
        switch_model=bool(getattr(args, "switch_model", False)),
        stats=v["chat.stats"],
        history=v["history.enabled"],
        state_dir=state_root(v) if v["state.enabled"] else None,
        state_max_gib=v["state.max_gib"],
        theme=v["ui.theme"],
        model_dirs=[Path(d).expanduser() for d in v["model.dirs"]],
        keys={k.split(".", 1)[1]: v[k] for k in SCHEMA if k.startswith("keys.")},
        preset=settings.preset.name if settings.preset is not None else None,
        model_path=settings.model_path,
        model_meta=settings.model_meta,
        attach=[Path(p) for p in (getattr(args, "attach", None) or [])],
        attach_limits=AttachLimits(v["attach.max_bytes"], v["attach.max_tokens"], v["attach.max_files"]),
        tools=_tool_settings(settings, args),
        **server,
    )


def state_root(v: dict[str, Any]) -> Path:
    """Where the engine keeps its KV states (``[state] dir``, else the user's cache dir), on or off."""
    if v["state.dir"]:
        return Path(v["state.dir"]).expanduser()
    from backends.state_cache import default_root

    return default_root()


def _tool_settings(settings: Settings, args: argparse.Namespace | None) -> Any:
    return tool_settings(settings, approve_all=bool(getattr(args, "approve_tools", False)))


def _server_options(settings: Settings) -> dict[str, Any]:
    """ChatOptions' ``server`` (and a preset's ``model``), see :mod:`app.settings.server`."""
    server, preset_model = server_values(settings.values, settings.sources, settings.server_presets)
    remote = remote_settings(server, settings.sources.get("server.api_key", "").startswith("--"))
    extra: dict[str, Any] = {"server": remote}
    if remote is not None and preset_model and not settings.values["model.default"]:
        extra["model"] = preset_model
    return extra
