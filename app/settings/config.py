"""Settings: ``configs/default.toml`` < the model's preset < the user's ``config.toml`` < flags.

Every setting is declared once in :data:`SCHEMA` (type, allowed values) and
documented once, in ``configs/default.toml``, which also holds its default.
Each layer is a flat ``{"section.key": value}`` dict checked against the
schema, so an unknown key or a wrong type is a :class:`ConfigError` naming
the file, the key and what was expected.  :func:`load_settings` keeps the
source of every value for ``tokchat config show``; :func:`chat_options` turns
the merge into the :class:`app.settings.options.ChatOptions` a chat runs with.

Not handled here: reading model headers (:mod:`app.models.resolution`) and
choosing a preset (:mod:`app.models.presets`).
"""
from __future__ import annotations

import argparse
import difflib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.settings.options import ChatOptions

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, from PyPI
    import tomli as tomllib  # type: ignore[no-redef]
from backends.base import SamplingParams

CONFIG_NAME = "config.toml"
DEFAULTS_PATH = Path(__file__).resolve().parents[2] / "configs" / "default.toml"


class ConfigError(Exception):
    """A config file is unreadable, or holds an unknown key or a value of the wrong type."""


@dataclass(frozen=True)
class Setting:
    """One setting's type and range; ``choices`` limits a string to those values.

    Numbers are always finite (NaN and infinity are refused); ``minimum`` and
    ``maximum`` include the bound, ``above`` excludes it.
    """

    kind: str  # "string" | "boolean" | "integer" | "number" | "strings"
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    above: float | None = None


_S, _B, _I, _N = Setting("string"), Setting("boolean"), Setting("integer", minimum=0), Setting("number", minimum=0)
KEY_ACTIONS = ("send", "newline", "cancel", "new_chat", "toggle_sidebar", "toggle_thinking",
               "regenerate", "edit_last", "quit")

#: "section.key" -> Setting; the order is the order of ``tokchat config show``
SCHEMA: dict[str, Setting] = {
    "model.default": _S,
    "model.dirs": Setting("strings"),
    "model.backend": Setting("string", ("auto", "cpu", "cuda", "rocm", "vulkan", "metal", "openvino", "mlx")),
    "model.device": Setting("string", ("", "CPU", "GPU", "NPU")),
    "model.context_size": _I,
    "model.threads": _I,
    "model.speculative": Setting("string", ("auto", "off", "ngram", "draft")),
    "model.draft_model": _S,
    "chat.template": Setting("string", ("auto", "model", "chatml", "llama3", "gemma")),
    "chat.template_file": _S,
    "chat.system_prompt": _S,
    "chat.thinking": Setting("string", ("auto", "on", "off")),
    "chat.show_thinking": _B,
    "chat.reasoning_budget": Setting("integer", minimum=-1),
    "chat.stats": _B,
    "sampling.temperature": _N,
    "sampling.top_p": Setting("number", minimum=0, maximum=1),
    "sampling.top_k": _I,
    "sampling.min_p": Setting("number", minimum=0, maximum=1),
    # 0 divides every logit by zero: llama.cpp then samples nothing but its first id (an empty reply)
    "sampling.repeat_penalty": Setting("number", above=0),
    "sampling.repeat_last_n": Setting("integer", minimum=-1),
    "sampling.max_tokens": Setting("integer", minimum=1),
    "sampling.seed": Setting("integer", minimum=-1),
    "history.enabled": _B,
    "attach.max_bytes": Setting("integer", minimum=1),
    "attach.max_tokens": Setting("integer", minimum=1),
    "attach.max_files": Setting("integer", minimum=1),
    "paste.chip_tokens": Setting("integer", minimum=1),
    "paste.chip_lines": Setting("integer", minimum=1),
    "tools.enabled": _S,
    "tools.auto_approve": Setting("strings"),
    "tools.max_steps": Setting("integer", minimum=1),
    "tools.result_tokens": Setting("integer", minimum=16),
    "tools.call_timeout_s": Setting("number", minimum=0.1),
    "tools.instructions": _S,
    "ui.theme": _S,
    "server.url": _S,
    "server.kind": Setting("string", ("auto", "llamacpp", "vllm", "sglang")),
    "server.api_key": _S,
    "server.trust_vocab": _B,
    "server.connect_timeout": Setting("number", minimum=0.1),
    "server.first_token_timeout": Setting("number", minimum=0.1),
    "server.idle_timeout": Setting("number", minimum=0.1),
    **{f"keys.{action}": _S for action in KEY_ACTIONS},
}

_EXPECTED = {"string": "a string", "boolean": "true or false", "integer": "an integer",
             "number": "a number", "strings": "an array of strings"}
_TOML_TYPES = ((bool, "a boolean"), (int, "an integer"), (float, "a float"), (str, "a string"),
               (list, "an array"), (dict, "a table"))

#: CLI flag (argparse dest) -> setting; a flag left out is None and does not count
FLAG_SETTINGS: dict[str, str] = {
    "model": "model.default", "backend": "model.backend", "device": "model.device",
    "ctx": "model.context_size", "threads": "model.threads",
    "speculative": "model.speculative", "draft_model": "model.draft_model", "template": "chat.template", "template_file": "chat.template_file",
    "system": "chat.system_prompt", "think": "chat.thinking", "show_thinking": "chat.show_thinking",
    "stats": "chat.stats", "temperature": "sampling.temperature", "top_p": "sampling.top_p",
    "top_k": "sampling.top_k", "min_p": "sampling.min_p", "repeat_penalty": "sampling.repeat_penalty",
    "repeat_last_n": "sampling.repeat_last_n", "max_tokens": "sampling.max_tokens", "seed": "sampling.seed", "history": "history.enabled",
    "tools": "tools.enabled",
    "theme": "ui.theme",
    "server": "server.url", "server_kind": "server.kind", "api_key": "server.api_key",
    "trust_server_vocab": "server.trust_vocab", "reasoning_budget": "chat.reasoning_budget",
}


#: sections whose table names are the user's own, checked by the module that reads them
#: ([mcp.servers.NAME]: app.settings.tools)
_OWN_TABLES = ("mcp", "models")  # [models.NAME]: app.settings.model_memory


def _toml_type(value: Any) -> str:
    return next(name for kind, name in _TOML_TYPES if isinstance(value, kind))


def check_value(source: str, key: str, value: Any) -> Any:
    """``value`` if it fits the schema for ``key``, else a ConfigError naming source and key."""
    setting = SCHEMA[key]
    expected = _EXPECTED[setting.kind]
    ok = {"string": isinstance(value, str), "boolean": isinstance(value, bool),
          "integer": isinstance(value, int) and not isinstance(value, bool),
          "number": isinstance(value, (int, float)) and not isinstance(value, bool),
          "strings": isinstance(value, list) and all(isinstance(v, str) for v in value)}[setting.kind]
    if not ok:
        raise ConfigError(f"{source}: {key} must be {expected}, not {_toml_type(value)} ({value!r})")
    if setting.kind == "number" and not math.isfinite(value):
        raise ConfigError(f"{source}: {key} must be a finite number, not {value!r}")
    if setting.choices and value not in setting.choices:
        raise ConfigError(f"{source}: {key} must be one of {', '.join(repr(c) for c in setting.choices)}, "
                          f"not {value!r}")
    if setting.minimum is not None and value < setting.minimum:
        raise ConfigError(f"{source}: {key} must be at least {setting.minimum:g}, not {value!r}")
    if setting.maximum is not None and value > setting.maximum:
        raise ConfigError(f"{source}: {key} must be at most {setting.maximum:g}, not {value!r}")
    if setting.above is not None and value <= setting.above:
        raise ConfigError(f"{source}: {key} must be more than {setting.above:g}, not {value!r}")
    return float(value) if setting.kind == "number" else value


def flatten(source: str, table: dict, allowed: set[str] | None = None) -> dict[str, Any]:
    """A parsed TOML file as checked ``{"section.key": value}``; ``allowed`` narrows the schema."""
    allowed = set(SCHEMA) if allowed is None else allowed
    sections = sorted({k.split(".")[0] for k in allowed})
    flat: dict[str, Any] = {}
    for section, body in table.items():
        if section in _OWN_TABLES:
            continue  # free-form names inside; checked by their owner (see _OWN_TABLES)
        if section not in sections:
            hint = difflib.get_close_matches(section, sections, n=1)
            raise ConfigError(f"{source}: unknown section [{section}]"
                              + (f" (did you mean [{hint[0]}]?)" if hint else f" (known: {', '.join(sections)})"))
        if not isinstance(body, dict):
            raise ConfigError(f"{source}: {section} must be a table ([{section}]), not {_toml_type(body)}")
        for name, value in body.items():
            key = f"{section}.{name}"
            if key not in allowed:
                known = sorted(k.split(".", 1)[1] for k in allowed if k.startswith(section + "."))
                hint = difflib.get_close_matches(name, known, n=1)
                raise ConfigError(f"{source}: unknown key {key}"
                                  + (f" (did you mean {section}.{hint[0]}?)" if hint else
                                     f" (known in [{section}]: {', '.join(known)})"))
            flat[key] = check_value(source, key, value)
    return flat


def read_toml(path: Path) -> dict:
    """A TOML file parsed, or a one-line ConfigError naming it."""
    if path.is_dir():
        raise ConfigError(f"{path} is a directory, not a config file: move it away "
                          "(`tokchat config init` then writes a commented config.toml)")
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
                          "a config file is TOML, which is UTF-8: fix or remove it") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def config_dir() -> Path:
    """``$TOKCHAT_CONFIG_DIR``, else the platform's user config directory."""
    override = os.environ.get("TOKCHAT_CONFIG_DIR")
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_config_dir("tokchat", appauthor=False))


def user_config_path() -> Path:
    return config_dir() / CONFIG_NAME


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
    preset: Any = None
    model_path: Path | None = None
    #: why no preset applies, when that is worth saying (the model is missing, unreadable...)
    preset_note: str | None = None
    #: the model's header, read once while matching the preset (see app.models.presets.PresetMatch)
    model_meta: Any = field(default=None, repr=False)
    files: list[Path] = field(default_factory=list)
    #: the user's free-form tables (see _OWN_TABLES) as parsed, with the file they came from
    own_tables: dict[str, tuple[str, Any]] = field(default_factory=dict)
    #: ``[servers.NAME]`` presets from the user's config.toml (see :mod:`app.settings.server`)
    server_presets: dict[str, dict[str, Any]] = field(default_factory=dict)


def load_settings(args: argparse.Namespace | None = None, *, use_preset: bool = True) -> Settings:
    """Merge default.toml, the model's preset, the user's config.toml and the flags."""
    from app.models.presets import match_model

    values = flatten(str(DEFAULTS_PATH), read_toml(DEFAULTS_PATH))
    missing = set(SCHEMA) - set(values)
    assert not missing, f"configs/default.toml lacks {sorted(missing)}"
    sources = dict.fromkeys(values, "default.toml")
    files = [DEFAULTS_PATH]
    user: dict[str, Any] = {}
    own: dict[str, tuple[str, Any]] = {}
    server_presets: dict[str, dict[str, Any]] = {}
    user_path = user_config_path()
    if user_path.exists():  # a directory or unreadable file of that name is an error (read_toml)
        from app.settings.server import split_server_presets

        table, server_presets = split_server_presets(read_toml(user_path), str(user_path))
        user = flatten(str(user_path), table)
        own = {name: (str(user_path), table[name]) for name in _OWN_TABLES if name in table}
        files.append(user_path)
    flags = flag_values(args)
    model = flags.get("model.default", (None, user.get("model.default", values["model.default"])))[1]
    server = flags.get("server.url", (None, user.get("server.url", values["server.url"])))[1]

    settings = Settings(values, sources, files=files, own_tables=own, server_presets=server_presets)
    # a server with no --model: the tokenizer comes from the server, so no local preset applies
    if use_preset and not (server and not model):
        found = match_model(model or None)
        settings.preset, settings.model_path, settings.preset_note = found.preset, found.path, found.note
        settings.model_meta = found.meta
        if settings.preset is not None:
            for key, value in settings.preset.values.items():
                values[key], sources[key] = value, f"preset {settings.preset.name}"
    for key, value in user.items():
        values[key], sources[key] = value, str(user_path)
    for key, (flag, value) in flags.items():
        values[key], sources[key] = value, flag
    return settings


def options_from_settings(settings: Settings, args: argparse.Namespace | None = None) -> ChatOptions:
    """The :class:`ChatOptions` for merged settings (plus ``--prompt``, which is not a setting)."""
    from app.conversation.attachments import AttachLimits

    v = settings.values
    sampling = SamplingParams(
        temperature=v["sampling.temperature"], top_p=v["sampling.top_p"], top_k=v["sampling.top_k"],
        min_p=v["sampling.min_p"], repeat_penalty=v["sampling.repeat_penalty"],
        repeat_last_n=v["sampling.repeat_last_n"],
        max_tokens=v["sampling.max_tokens"], seed=None if v["sampling.seed"] < 0 else v["sampling.seed"])
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
        speculative=v["model.speculative"],
        draft_model=Path(v["model.draft_model"]).expanduser() if v["model.draft_model"] else None,
        think={"auto": None, "on": True, "off": False}[v["chat.thinking"]],
        show_thinking=v["chat.show_thinking"],
        reasoning_budget=None if v["chat.reasoning_budget"] < 0 else v["chat.reasoning_budget"],
        paste_chip_tokens=v["paste.chip_tokens"], paste_chip_lines=v["paste.chip_lines"],
        resume=getattr(args, "resume", None), continue_reply=bool(getattr(args, "continue_reply", False)),
        stats=v["chat.stats"],
        history=v["history.enabled"],
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


def _tool_settings(settings: Settings, args: argparse.Namespace | None) -> Any:
    from app.settings.tools import tool_settings

    return tool_settings(settings, approve_all=bool(getattr(args, "approve_tools", False)))


def _server_options(settings: Settings) -> dict[str, Any]:
    """ChatOptions' ``server`` (and a preset's ``model``), see :mod:`app.settings.server`."""
    from app.settings.server import remote_settings, server_values

    server, preset_model = server_values(settings.values, settings.sources, settings.server_presets)
    remote = remote_settings(server, settings.sources.get("server.api_key", "").startswith("--"))
    extra: dict[str, Any] = {"server": remote}
    if remote is not None and preset_model and not settings.values["model.default"]:
        extra["model"] = preset_model
    return extra


def chat_options(args: argparse.Namespace, *, preset: bool = True) -> ChatOptions:
    """Config files and model preset, overridden by the flags given on the command line.

    ``preset=False`` leaves the model preset out, and with it the read of the
    model's header: the TUI paints with these and applies the preset in its
    load thread (:meth:`app.tui.app.ChatApp._load`).
    """
    return options_from_settings(load_settings(args, use_preset=preset), args)
