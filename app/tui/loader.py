"""Load a chat off the event loop: what the window calls, in a worker thread, to get one.

:func:`load_chat` is the real path, :func:`app.chat.open.open_chat` (the one way
every part of tokchat opens a chat) with the window's progress line as its
``progress``: the steps show while the weights load.  :func:`scripted_loader`
builds the chain on a :class:`backends.scripted.ScriptedBackend` replaying fixed
replies: the snapshot tests and the UI benchmark use it where pixels or timings
must be stable; it still uses the real tokenizer and template.
"""
from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from app.chat.open import OpenedChat, Progress
from app.settings.options import ChatOptions

if TYPE_CHECKING:
    from app.chat.early import EarlyEngine

#: a ready chat, as the window holds it (the same as what :func:`app.chat.open.open_chat` returns)
LoadedChat = OpenedChat

#: what the app calls (in a worker thread) to get a chat
Loader = Callable[[ChatOptions, Progress], LoadedChat]


def load_chat(options: ChatOptions, progress: Progress, early: EarlyEngine | None = None) -> LoadedChat:
    """The real chain; raises the packages' own errors, which the app shows on screen.  ``early``: the engine
    the command line started before the window (adopted when it was started for ``options``)."""
    from app.chat.open import open_chat

    return open_chat(options, progress=progress, early=early)


def early_loader(early: EarlyEngine) -> Loader:
    """:func:`load_chat` handed ``early``: the window's first load adopts that engine; a later one (``/model``)
    finds nothing left to adopt and starts its own."""
    def load(options: ChatOptions, progress: Progress) -> LoadedChat:
        return load_chat(options, progress, early)

    return load


def options_for_model(options: ChatOptions, model: str) -> ChatOptions:
    """``options`` for another model (``/model``): what the old model's preset chose follows the new
    model's preset; what the flags or the config set apart from the preset stays.

    Reads the new model's header (the preset match): call it off the event loop.
    """
    import argparse
    from dataclasses import fields

    from app.models.preset_match import load_settings
    from app.settings.merge import options_from_settings

    def preset_only(name: str | None) -> ChatOptions:  # defaults, the model's preset, config.toml; no flags
        return options_from_settings(load_settings(argparse.Namespace(model=name)))

    old, new = preset_only(options.model), preset_only(model)
    sampling = replace(options.sampling, **{
        f.name: getattr(new.sampling, f.name) for f in fields(options.sampling)
        if getattr(options.sampling, f.name) == getattr(old.sampling, f.name)})
    chosen = {name: getattr(new, name) for name in ("template", "template_file", "ctx", "think")
              if getattr(options, name) == getattr(old, name)}
    return replace(options, model=model, sampling=sampling, preset=new.preset, model_path=new.model_path,
                   model_meta=new.model_meta, **chosen)


def draft_for_model(options: ChatOptions) -> tuple[ChatOptions, str | None]:
    """The options ``/model`` loads with, and a notice when the configured draft model was set aside.

    A draft model (``--draft-model``) drafts only for models of its own vocabulary.  After ``/model`` to a
    model of another one, the user asked for that model and the draft model is only an aid: the model loads
    without it (``speculative = "draft"`` becomes ``auto``, prompt lookup) and the notice says why.  The
    window keeps the draft model in its options, so a later ``/model`` back to a model it fits drafts again.
    A draft model that cannot be read (deleted, cut short) is set aside the same way.  At start-up either
    stays an error (the flags asked for both).  Reads both vocabularies: call it off the event loop.  (A model
    that cannot be read fails its load, which says so; this notice is then never shown.)
    """
    draft, model = options.draft_model, options.model_path
    if draft is None or model is None or options.speculative not in ("draft", "auto") or not model.is_file():
        return options, None
    from backends.draft_model import vocab_mismatch
    from tokenizer.errors import TokenizerError

    try:
        why = vocab_mismatch(model, draft)
    except (OSError, ValueError, TokenizerError) as exc:
        why = f"it cannot be read: {exc}"
    if why is None:
        return options, None
    speculative = "auto" if options.speculative == "draft" else options.speculative
    return (replace(options, draft_model=None, speculative=speculative),
            f"draft model {draft.name} set aside for {model.name}: {why}; speculation: prompt lookup only")


def scripted_loader(model_path: Path, replies: Sequence[str], *, delay_s: float = 0.0,
                    fail_after: int | None = None, context_size: int = 2048) -> Loader:
    """A loader whose backend replays ``replies`` (cycled, one per turn) as our tokenizer's ids.

    The tokenizer comes from ``options.model`` when set (so ``/model`` works), else ``model_path``.

    Each reply ends with the model's end-of-turn id, like a real model's.
    """
    from app.conversation.session import ChatSession
    from app.models.header import load_chat_tokenizer
    from app.tui.format import human_size
    from backends.scripted import ScriptedBackend
    from templates import resolve_template

    def load(options: ChatOptions, progress: Progress) -> LoadedChat:
        path = Path(options.model) if options.model else Path(model_path)  # /model switches it
        if not path.is_file():
            raise FileNotFoundError(f"model not found: {path}")
        progress(f"reading the tokenizer from {path.name} ({human_size(path.stat().st_size)})")
        tokenizer = load_chat_tokenizer(path, None)
        template, notice = resolve_template(options.template, tokenizer, options.template_file)
        scripted: list[list[int]] = []
        turns = itertools.cycle(range(len(replies)))
        backend = ScriptedBackend(lambda _prompt: scripted[next(turns)], delay_s=delay_s,
                                  fail_after=fail_after, context_size=context_size)
        backend.info.model_name = path.stem
        backend.info.quantization = "scripted"
        # built from parts, not through open_chat: its context is ``context_size`` whatever --ctx says,
        # so the snapshots do not move with the options
        session = ChatSession.from_options(options, tokenizer, template, backend=backend,
                                           context_size=context_size)
        stop = tokenizer.eos_id if tokenizer.eos_id in session.stop_ids else min(session.stop_ids)
        scripted.extend(tokenizer.encode(text) + [stop] for text in replies)
        return LoadedChat(session, tokenizer, template, backend, path, context_size, notice)

    return load
