"""A chat's model and its preset: resolve ``--model``, read its header once, match the preset, apply it.

This is where settings meet the model.  :mod:`app.settings.merge` merges the
config files and the flags without touching the model; matching a preset
needs the model resolved (maybe pulled) and its header read, which is the
models' work, so the settings a chat runs with are built here:
:func:`load_settings` lays the matched preset under the user's config and the
flags (:meth:`app.settings.merge.Settings.apply_preset`), and
:func:`chat_options` turns that into the chat's
:class:`app.settings.options.ChatOptions`.

The top of the models: it uses :mod:`app.models.resolution` and
:mod:`app.models.presets`, and nothing below it uses it.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from app.models.presets import Preset, load_presets, match_preset
from app.models.resolution import describe_model, match_names, resolve_model
from app.settings.merge import Settings, options_from_settings, read_settings
from app.settings.options import ChatOptions
from backends.base import BackendError
from backends.model_meta import ModelMeta, read_model_meta


@dataclass
class PresetMatch:
    """What :func:`match_model` found for ``--model``."""

    preset: Preset | None
    #: the resolved model path (None when it could not be resolved)
    path: Path | None
    #: why there is no preset, when there is none
    note: str | None
    #: the model's header, read here once and handed on to the tokenizer and the backend
    #: (a :class:`backends.model_meta.ModelMeta`; None when the model could not be read)
    meta: ModelMeta | None = field(default=None, repr=False)


def match_model(model: str | None) -> PresetMatch:
    """Resolve ``--model``, read its header once and find its preset."""
    try:
        path = resolve_model(model)
    except FileNotFoundError as exc:
        return PresetMatch(None, None, f"no model preset: {exc}")
    try:
        meta = read_model_meta(path)
        info = describe_model(path, meta=meta)
    except (BackendError, OSError) as exc:
        return PresetMatch(None, path, f"no model preset: cannot read {path}: {exc}")
    preset = match_preset(load_presets(), info.architecture, match_names(info))
    note = None if preset is not None else f"no model preset matches {info.architecture} {info.name!r}"
    return PresetMatch(preset, path, note, meta)


def find_preset(model: str | None) -> tuple[Preset | None, Path | None, str | None]:
    """(preset, resolved model path, note) for ``--model``; the note says why there is no preset."""
    found = match_model(model)
    return found.preset, found.path, found.note


def load_settings(args: argparse.Namespace | None = None, *, use_preset: bool = True) -> Settings:
    """Merge default.toml, the model's preset, the user's config.toml and the flags.

    ``use_preset=False`` leaves the preset out, and with it resolving and reading the model.
    """
    settings = read_settings(args)
    if use_preset and settings.wants_preset():
        found = match_model(settings.values["model.default"] or None)
        settings.apply_preset(found.preset, found.path, found.note, found.meta)
    elif use_preset:
        found = match_served(settings)
        settings.apply_preset(found.preset, None, found.note)
    return settings


def match_served(settings: Settings) -> PresetMatch:
    """The preset of what a ``--server`` without ``--model`` serves (:mod:`app.models.served`), or the
    preset of the server preset's ``model`` (its tokenizer source).  The path and header are not handed
    on: the chat reads its tokenizer from the server's model itself."""
    from app.models.served import served_model_path
    from app.settings.server import remote_settings, server_values

    server, preset_model = server_values(settings.values, settings.sources, settings.server_presets)
    remote = remote_settings(server, settings.sources.get("server.api_key", "").startswith("--"))
    if preset_model:
        return match_model(preset_model)
    if remote is None:
        return PresetMatch(None, None, None)
    try:
        path = served_model_path(remote)
    except BackendError as exc:
        return PresetMatch(None, None, f"no model preset: {exc}")
    found = match_model(str(path))
    return PresetMatch(found.preset, None, found.note)


def chat_options(args: argparse.Namespace, *, preset: bool = True) -> ChatOptions:
    """Config files and model preset, overridden by the flags given on the command line.

    ``preset=False`` leaves the model preset out, and with it the read of the
    model's header: the TUI paints with these and applies the preset in its
    load thread (:meth:`app.tui.app.ChatApp._load`).
    """
    return options_from_settings(load_settings(args, use_preset=preset), args)
