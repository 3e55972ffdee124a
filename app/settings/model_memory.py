"""Per-model choices remembered in config.toml: ``[models."NAME"]`` (thinking, reasoning budget).

When the user changes thinking in the TUI (``/think on|off``, ``/think budget N``),
the choice is written to the user's config.toml under the model's name, and
applied the next time that model loads, unless the chat was started with its
own setting (``--think``/``--no-think``, ``--reasoning-budget``, or the
``[chat]`` defaults set to something else than auto / -1).

The file is edited with tomlkit, so the user's comments and layout stay as
they were; only the one table changes.  Keys:

* ``thinking``: ``"on"`` | ``"off"`` (``"auto"`` removes it)
* ``reasoning_budget``: an integer >= 0, or -1 for no limit

Not handled: the ``[chat]`` defaults themselves (:mod:`app.settings.config`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.settings.config import MAX_TOKENS, ConfigError, read_toml, user_config_path
from app.settings.toml_lines import located


@dataclass(frozen=True)
class Remembered:
    """What the config says for one model (None: nothing remembered)."""

    thinking: bool | None = None
    reasoning_budget: int | None = None  # -1: no limit (remembered as such)


def remembered(model_name: str, path: Path | None = None) -> Remembered:
    """The choices stored for ``model_name``; a bad value is a ConfigError naming the key."""
    path = path or user_config_path()
    if not model_name or not path.is_file():
        return Remembered()
    table = read_toml(path).get("models", {})
    body = table.get(model_name, {}) if isinstance(table, dict) else {}
    if not isinstance(body, dict):
        raise ConfigError(f"{located(path, 'models', model_name)}: models.{model_name} must be a table")
    thinking = body.get("thinking")
    if thinking not in (None, "on", "off", "auto"):
        raise ConfigError(f'{located(path, "models", model_name, "thinking")}: models."{model_name}".thinking must '
                          f'be "on", "off" or "auto", not {thinking!r}')
    budget = body.get("reasoning_budget")
    if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool)
                               or not -1 <= budget <= MAX_TOKENS):
        raise ConfigError(f'{located(path, "models", model_name, "reasoning_budget")}: '
                          f'models."{model_name}".reasoning_budget must be an integer from -1 to '
                          f'{MAX_TOKENS}, not {budget!r}')
    return Remembered({"on": True, "off": False}.get(thinking) if thinking else None, budget)


def remember(model_name: str, *, path: Path | None = None, **values: Any) -> Path:
    """Write ``thinking`` (True/False/None) and/or ``reasoning_budget`` (int, None = no limit) for
    ``model_name`` into config.toml, keeping everything else in the file; returns the file."""
    import tomlkit

    path = path or user_config_path()
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    try:
        doc = tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:
        raise ConfigError(f"{path}, line {exc.line}: invalid TOML: {exc}") from exc
    models = doc.get("models")
    if models is None:
        models = tomlkit.table(is_super_table=True)
        doc["models"] = models
    body = models.get(model_name)
    if body is None:
        body = tomlkit.table()
        models[model_name] = body
    if "thinking" in values:
        value = values["thinking"]
        body["thinking"] = "auto" if value is None else ("on" if value else "off")
    if "reasoning_budget" in values:
        budget = values["reasoning_budget"]
        body["reasoning_budget"] = -1 if budget is None else int(budget)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomlkit.dumps(doc), encoding="utf-8")
    return path


def remembered_tables(path: Path | None = None) -> dict[str, dict[str, Any]]:
    """Every ``[models."NAME"]`` table in config.toml, NAME -> its keys (``tokchat config show`` lists them)."""
    path = path or user_config_path()
    if not path.is_file():
        return {}
    table = read_toml(path).get("models", {})
    return {name: dict(body) for name, body in table.items() if isinstance(body, dict)} if isinstance(table, dict) else {}


def remembered_settings(values: dict[str, Any], model_name: str,
                        path: Path | None = None) -> dict[str, tuple[Any, str]]:
    """The ``[chat]`` settings a chat with ``model_name`` gets from its remembered choices instead of
    ``values`` (merged settings): key -> (value, source).  The rule of :func:`apply_remembered`: a
    remembered choice applies only where the chat's own setting is auto (thinking) or -1 (budget), so
    ``config show`` says what the chat will use, not what default.toml says."""
    path = path or user_config_path()
    found = remembered(model_name, path)
    source = f'{path} [models."{model_name}"]'
    out: dict[str, tuple[Any, str]] = {}
    if found.thinking is not None and values.get("chat.thinking") == "auto":
        out["chat.thinking"] = ("on" if found.thinking else "off", source)
    if found.reasoning_budget is not None and values.get("chat.reasoning_budget", -1) < 0:
        out["chat.reasoning_budget"] = (found.reasoning_budget, source)
    return out


def apply_remembered(options: Any, session: Any, model_name: str) -> list[str]:
    """Set ``session``'s thinking and budget from the model's remembered choices where the chat
    was not started with its own; returns what was applied, for a notice."""
    found = remembered(model_name)
    applied = []
    if found.thinking is not None and options.think is None:
        session.enable_thinking = found.thinking
        applied.append(f"thinking {'on' if found.thinking else 'off'}")
    if found.reasoning_budget is not None and options.reasoning_budget is None:
        session.reasoning_budget = None if found.reasoning_budget < 0 else found.reasoning_budget
        applied.append("no reasoning budget" if found.reasoning_budget < 0
                       else f"reasoning budget {found.reasoning_budget}")
    return applied
