"""Load what a chat needs (tokenizer, template, backend, session) off the event loop.

:func:`load_chat` is the real path: ``--model`` (or the bundled model) ->
``backends.start_backend`` (the engine loads in its own process) while this
one reads our tokenizer and the chat template -> a
:class:`app.conversation.session.ChatSession`.  It reports each step through
``progress`` so the window can show what is happening while the weights
load.  :func:`scripted_loader` builds the same chain on a
:class:`backends.scripted.ScriptedBackend` replaying fixed replies: the
snapshot tests and the UI benchmark use it where pixels or timings must be
stable; it still uses the real tokenizer and template.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from app.settings.options import ChatOptions
from app.tui.format import human_size

Progress = Callable[[str], None]


@dataclass
class LoadedChat:
    """A ready chat: the session and the parts the header and commands need."""

    session: Any  # app.conversation.session.ChatSession
    tokenizer: Any
    template: Any
    backend: Any
    model_path: Path
    context_size: int
    template_notice: str | None = None

    @property
    def info(self) -> Any:
        return self.backend.info


#: what the app calls (in a worker thread) to get a chat
Loader = Callable[[ChatOptions, Progress], LoadedChat]


def _session(tokenizer, template, backend, options: ChatOptions, context_size: int):
    from app.conversation.session import ChatSession

    return ChatSession(
        tokenizer, template, backend=backend, system_prompt=options.system,
        sampling=replace(options.sampling), context_size=context_size,
        enable_thinking=options.think,
    )


def _tokenizer_and_template(path: Path, options: ChatOptions, progress: Progress, header: Any = None):
    from app.models.header import load_chat_tokenizer
    from templates import resolve_template

    progress(f"reading the tokenizer from {path.name} ({human_size(path.stat().st_size)})")
    tokenizer = load_chat_tokenizer(path, header)
    template, notice = resolve_template(options.template, tokenizer, options.template_file)
    return tokenizer, template, notice


def load_chat(options: ChatOptions, progress: Progress) -> LoadedChat:
    """The real chain; raises the packages' own errors, which the app shows on screen."""
    from app.models.header import take_header
    from app.models.resolution import resolve_model
    from backends import LoadOptions, start_backend

    if options.server is not None:
        from app.chat.remote import open_remote

        tokenizer, template, notice, backend, path = open_remote(options, progress)
        session = _session(tokenizer, template, backend, options, backend.info.context_size)
        return LoadedChat(session, tokenizer, template, backend, path, backend.info.context_size, notice)
    progress(f"finding the model {options.model or '(bundled SmolLM2-135M-Instruct)'}")
    path = Path(resolve_model(options.model))
    header = take_header(path, options)
    # the engine loads in its own process while this one reads the tokenizer and the template
    pending = start_backend(path, LoadOptions(backend=options.backend, device=options.device,
                                              n_threads=options.threads, n_ctx=options.ctx, model_meta=header,
                                              speculative=options.speculative, draft_model=options.draft_model))
    try:
        tokenizer, template, notice = _tokenizer_and_template(path, options, progress, header)
        progress(f"loading {path.name} ({human_size(path.stat().st_size)}) with backend "
                 f"{options.backend}{' ' + options.device if options.device else ''}")
        backend = pending.result()
    except BaseException:
        pending.discard()
        raise
    context_size = backend.info.context_size
    session = _session(tokenizer, template, backend, options, context_size)
    return LoadedChat(session, tokenizer, template, backend, path, context_size, notice)


def options_for_model(options: ChatOptions, model: str) -> ChatOptions:
    """``options`` for another model (``/model``): what the old model's preset chose follows the new
    model's preset; what the flags or the config set apart from the preset stays.

    Reads the new model's header (the preset match): call it off the event loop.
    """
    import argparse
    from dataclasses import fields

    from app.settings.config import load_settings, options_from_settings

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


def scripted_loader(model_path: Path, replies: Sequence[str], *, delay_s: float = 0.0,
                    fail_after: int | None = None, context_size: int = 2048) -> Loader:
    """A loader whose backend replays ``replies`` (cycled, one per turn) as our tokenizer's ids.

    The tokenizer comes from ``options.model`` when set (so ``/model`` works), else ``model_path``.

    Each reply ends with the model's end-of-turn id, like a real model's.
    """
    from backends.scripted import ScriptedBackend

    def load(options: ChatOptions, progress: Progress) -> LoadedChat:
        path = Path(options.model) if options.model else Path(model_path)  # /model switches it
        if not path.is_file():
            raise FileNotFoundError(f"model not found: {path}")
        tokenizer, template, notice = _tokenizer_and_template(path, options, progress)
        scripted: list[list[int]] = []
        turns = itertools.cycle(range(len(replies)))
        backend = ScriptedBackend(lambda _prompt: scripted[next(turns)], delay_s=delay_s,
                                  fail_after=fail_after, context_size=context_size)
        backend.info.model_name = path.stem
        backend.info.quantization = "scripted"
        session = _session(tokenizer, template, backend, options, context_size)
        stop = tokenizer.eos_id if tokenizer.eos_id in session.stop_ids else min(session.stop_ids)
        scripted.extend(tokenizer.encode(text) + [stop] for text in replies)
        return LoadedChat(session, tokenizer, template, backend, path, context_size, notice)

    return load
