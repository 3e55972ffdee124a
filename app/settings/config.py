"""Config files and their schema: ``configs/default.toml``, the user's ``config.toml``, presets' values.

Every setting is declared once in :data:`SCHEMA` (type, allowed values) and
documented once, in ``configs/default.toml``, which also holds its default.
Each layer is a flat ``{"section.key": value}`` dict checked against the
schema, so an unknown key or a wrong type is a :class:`ConfigError` naming
the file, the line (:mod:`app.settings.toml_lines`), the key and what was expected.

This is the bottom of the settings: it reads and checks files and imports
nothing of the app (the template names come from :mod:`templates.names`, below
the app).  Merging the layers (default.toml < the model's preset < the user's
``config.toml`` < flags) is :mod:`app.settings.merge`; matching a model's
preset, which reads the model, is :mod:`app.models.preset_match`.
"""
from __future__ import annotations

import difflib
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.settings.toml_lines import located, parse_error_line
from backends.kv_types import NAMES as _KV_NAMES
from templates.names import NAMES as TEMPLATE_NAMES

#: --kv-type's values: one type for K and V, or K/V
KV_TYPE_CHOICES = tuple(_KV_NAMES) + tuple(f"{k}/{v}" for k in _KV_NAMES for v in _KV_NAMES if k != v)

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI
    import tomli as tomllib

CONFIG_NAME = "config.toml"
DEFAULTS_PATH = Path(__file__).resolve().parents[2] / "configs" / "default.toml"


class ConfigError(Exception):
    """A config file is unreadable, or holds an unknown key or a value of the wrong type."""


@dataclass(frozen=True)
class Setting:
    """One setting's type and range; ``choices`` limits a string to those values.

    Numbers are always finite (NaN and infinity are refused) and every number in :data:`SCHEMA`
    has a ``maximum`` (a test holds it to that); ``minimum`` and ``maximum`` include the bound,
    ``above`` excludes it.
    """

    kind: str  # "string" | "boolean" | "integer" | "number" | "strings" | "keys" (key names: key_problem)
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    above: float | None = None


_S, _B = Setting("string"), Setting("boolean")

# Upper bounds.  Every number has one, so that a typo or a hostile file is one line here, not an
# OverflowError deep in a timer (1e308 seconds is past time_t) nor a value C wraps silently (llama.cpp's
# n_ctx is 32 bits: 4294967808 became 512).
#: tokens in a context, a reply, a budget or a window: 16 Mi, past every released model's context
MAX_TOKENS = 1 << 24
#: more layers than any model has (llama.cpp's -ngl 999 means "all")
MAX_GPU_LAYERS = 999
#: llama.cpp's own limit on threads (GGML_MAX_N_THREADS in ggml.h)
MAX_THREADS = 512
#: seconds any wait may be set to: one day (a timer's deadline must stay a representable time)
MAX_TIMEOUT_S = 86400.0
#: a seed: TOML's own integer range (a reply uses it modulo 2**32, see backends.base.resolve_seed)
MAX_SEED = (1 << 63) - 1
#: counts of things (files, steps, lines): far past any real use
MAX_COUNT = 1_000_000


def _tokens(minimum: float) -> Setting:
    return Setting("integer", minimum=minimum, maximum=MAX_TOKENS)


def _timeout(minimum: float) -> Setting:
    return Setting("number", minimum=minimum, maximum=MAX_TIMEOUT_S)


def _count(minimum: float) -> Setting:
    return Setting("integer", minimum=minimum, maximum=MAX_COUNT)


#: the chat TUI's keys, by their [keys] names (app.tui.keys holds what each does and its default)
KEY_ACTIONS = ("send", "newline", "cancel", "regenerate", "edit_last", "continue_reply", "toggle_thinking",
               "copy_reply", "toggle_sidebar", "new_chat", "previous_reply", "next_reply", "token_inspector",
               "quit", "history_rename", "history_delete", "history_undo_delete", "history_fork")
#: what may come before the last "+" of a key name
KEY_MODIFIERS = ("ctrl", "alt", "shift", "meta", "super", "hyper")
#: Textual's names of keys that type nothing (a key name is one of these, a character, or F1..F24)
NAMED_KEYS = ("escape", "enter", "tab", "backspace", "delete", "insert", "home", "end", "pageup", "pagedown",
              "up", "down", "left", "right", "space")


def key_problem(value: str) -> str | None:
    """What a ``[keys]`` value must be instead, or None: Textual key names, comma-separated.

    A character alone (or with shift) is typed, never a key: it would never reach the chat from the
    prompt box, and in the history list a typed word must never act on a conversation."""
    keys = [k.strip() for k in value.split(",")]
    if not value.strip() or not all(keys):
        return f"one or more key names separated by commas (\"ctrl+y\", \"f5\", \"shift+enter,ctrl+j\"), not {value!r}"
    for key in keys:
        *modifiers, name = key.split("+")
        bad = [m for m in modifiers if m not in KEY_MODIFIERS]
        if bad or not name:
            return (f"key names whose modifiers are {', '.join(KEY_MODIFIERS)} joined by '+' (\"ctrl+y\"), "
                    f"not {key!r}")
        function_key = name[0] == "f" and name[1:].isdigit() and 1 <= int(name[1:]) <= 24
        if len(name) == 1:
            if not name.isprintable() or name != name.lower():
                return f"a lowercase character or a key name (\"ctrl+y\"), not {key!r}"
            if not set(modifiers) - {"shift"}:
                return f"a character with ctrl, alt, meta or super (\"ctrl+{name}\"): {key!r} alone is typed"
        elif name not in NAMED_KEYS and not function_key:
            return f"key names such as \"ctrl+y\", \"f5\" or one of {', '.join(NAMED_KEYS)}, not {key!r}"
    return None


#: "section.key" -> Setting; the order is the order of ``tokchat config show``
SCHEMA: dict[str, Setting] = {
    "model.default": _S,
    "model.dirs": Setting("strings"),
    "model.backend": Setting("string", ("auto", "cpu", "cuda", "rocm", "vulkan", "metal", "openvino", "mlx")),
    "model.device": Setting("string", ("", "CPU", "GPU", "NPU")),
    "model.context_size": _tokens(0),  # 0: the model's own
    "model.threads": Setting("integer", minimum=0, maximum=MAX_THREADS),  # 0: llama.cpp's default
    "model.gpu_layers": Setting("integer", minimum=-1, maximum=MAX_GPU_LAYERS),  # -1: all that fit
    "model.kv_type": Setting("string", KV_TYPE_CHOICES),
    "model.speculative": Setting("string", ("auto", "off", "ngram", "draft")),
    "model.draft_model": _S,
    "chat.template": Setting("string", TEMPLATE_NAMES),  # the one list (templates.names), as --template's
    "chat.template_file": _S,
    "chat.system_prompt": _S,
    "chat.format": _S,
    "chat.thinking": Setting("string", ("auto", "on", "off")),
    "chat.show_thinking": _B,
    "chat.reasoning_budget": _tokens(-1),
    "chat.compact": Setting("string", ("drop", "summarize", "refuse")),  # app.conversation.compaction.POLICIES
    "chat.stats": _B,
    "sampling.temperature": Setting("number", minimum=0, maximum=100),
    "sampling.top_p": Setting("number", minimum=0, maximum=1),
    "sampling.top_k": _tokens(0),  # past the largest vocabulary: the same as 0, off
    "sampling.min_p": Setting("number", minimum=0, maximum=1),
    # 0 divides every logit by zero: llama.cpp then samples nothing but its first id (an empty reply)
    "sampling.repeat_penalty": Setting("number", above=0, maximum=100),
    "sampling.repeat_last_n": _tokens(-1),
    "sampling.max_tokens": _tokens(1),
    "sampling.seed": Setting("integer", minimum=-1, maximum=MAX_SEED),
    "history.enabled": _B,
    "state.enabled": _B,
    "state.max_gib": Setting("number", minimum=0, maximum=1 << 20),  # GiB; 0 keeps nothing
    "state.dir": _S,
    "attach.max_bytes": Setting("integer", minimum=1, maximum=1 << 30),  # 1 GiB
    "attach.max_tokens": _tokens(1),
    "attach.max_files": _count(1),
    "paste.chip_tokens": _tokens(1),
    "paste.chip_lines": _count(1),
    "tools.enabled": _S,
    "tools.auto_approve": Setting("strings"),
    "tools.max_steps": _count(1),
    "tools.result_tokens": _tokens(16),
    "tools.call_timeout_s": _timeout(0.1),
    "tools.instructions": _S,
    "tools.constrain_arguments": _B,
    "ui.theme": _S,
    "server.url": _S,
    "server.kind": Setting("string", ("auto", "llamacpp", "vllm", "sglang")),
    "server.api_key": _S,
    "server.trust_vocab": _B,
    "server.connect_timeout": _timeout(0.1),
    "server.first_token_timeout": _timeout(0.1),
    "server.idle_timeout": _timeout(0.1),
    **{f"keys.{action}": Setting("keys") for action in KEY_ACTIONS},
}

_EXPECTED = {"string": "a string", "keys": "a string", "boolean": "true or false", "integer": "an integer",
             "number": "a number", "strings": "an array of strings"}
_TOML_TYPES = ((bool, "a boolean"), (int, "an integer"), (float, "a float"), (str, "a string"),
               (list, "an array"), (dict, "a table"))

#: sections whose table names are the user's own, checked by the module that reads them
#: ([mcp.servers.NAME]: app.settings.tools); public because app.settings.merge hands them on
OWN_TABLES = ("mcp", "models")  # [models.NAME]: app.settings.model_memory
#: ``[servers.NAME]``: remote-server presets, split off first and checked by app.settings.server
SERVER_PRESETS = "servers"


def known_sections(allowed: set[str] | None = None) -> list[str]:
    """Every top-level table a file may hold: the schema's sections (narrowed to ``allowed``, as a model
    preset's are) and, for the user's config.toml, the tables their owners check (OWN_TABLES, SERVER_PRESETS).
    The one list an "unknown section" message offers."""
    if allowed is not None:
        return sorted({k.split(".")[0] for k in allowed})
    return sorted({k.split(".")[0] for k in SCHEMA} | {*OWN_TABLES, SERVER_PRESETS})


def _toml_type(value: Any) -> str:
    return next(name for kind, name in _TOML_TYPES if isinstance(value, kind))


def _bound(number: float) -> str:
    """A bound as the user would write it: 16777216, 0.1, 86400 (``:g`` would say 1.67772e+07)."""
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


def check_value(source: str, key: str, value: Any, at: tuple[str, ...] | None = None) -> Any:
    """``value`` if it fits the schema for ``key``, else a ConfigError naming source, line and key.

    ``at``: where the value sits in the file when that is not ``key`` itself (``servers.NAME.kind``
    checked as ``server.kind``); the message names it as written there."""
    problem = _value_problem(SCHEMA[key], value)
    if problem is not None:
        at = at or tuple(key.split("."))
        raise ConfigError(f"{located(source, *at)}: {'.'.join(at)} must be {problem}")
    return float(value) if SCHEMA[key].kind == "number" else value


def _value_problem(setting: Setting, value: Any) -> str | None:
    """What ``value`` must be instead ("a number, not a string ('hot')"), or None when it fits."""
    ok = {"string": isinstance(value, str), "boolean": isinstance(value, bool),
          "integer": isinstance(value, int) and not isinstance(value, bool),
          "number": isinstance(value, (int, float)) and not isinstance(value, bool),
          "strings": isinstance(value, list) and all(isinstance(v, str) for v in value),
          "keys": isinstance(value, str)}[setting.kind]
    if not ok:
        return f"{_EXPECTED[setting.kind]}, not {_toml_type(value)} ({value!r})"
    if setting.kind == "keys":
        return key_problem(value)
    if setting.kind == "number" and not math.isfinite(value):
        return f"a finite number, not {value!r}"
    if setting.choices and value not in setting.choices:
        return f"one of {', '.join(repr(c) for c in setting.choices)}, not {value!r}"
    if setting.minimum is not None and value < setting.minimum:
        return f"at least {_bound(setting.minimum)}, not {value!r}"
    if setting.maximum is not None and value > setting.maximum:
        return f"at most {_bound(setting.maximum)}, not {value!r}"
    if setting.above is not None and value <= setting.above:
        return f"more than {_bound(setting.above)}, not {value!r}"
    return None


def flatten(source: str, table: dict, allowed: set[str] | None = None) -> dict[str, Any]:
    """A parsed TOML file as checked ``{"section.key": value}``; ``allowed`` narrows the schema."""
    sections = known_sections(allowed)
    own = () if allowed is not None else (*OWN_TABLES, SERVER_PRESETS)
    allowed = set(SCHEMA) if allowed is None else allowed
    flat: dict[str, Any] = {}
    for section, body in table.items():
        if section in own:
            continue  # free-form names inside; checked by their owner (see OWN_TABLES)
        if section not in sections:
            hint = difflib.get_close_matches(section, sections, n=1)
            raise ConfigError(f"{located(source, section)}: unknown section [{section}]"
                              + (f" (did you mean [{hint[0]}]?)" if hint else f" (known: {', '.join(sections)})"))
        if not isinstance(body, dict):
            raise ConfigError(f"{located(source, section)}: {section} must be a table ([{section}]), "
                              f"not {_toml_type(body)}")
        for name, value in body.items():
            key = f"{section}.{name}"
            if key not in allowed:
                known = sorted(k.split(".", 1)[1] for k in allowed if k.startswith(section + "."))
                hint = difflib.get_close_matches(name, known, n=1)
                raise ConfigError(f"{located(source, section, name)}: unknown key {key}"
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
        at = parse_error_line(str(exc))
        where, message = (f"{path}, line {at[0]}", at[1]) if at else (str(path), str(exc))
        raise ConfigError(f"{where}: invalid TOML: {message}") from exc
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
