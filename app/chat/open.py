"""The one way to open a chat: :class:`app.settings.options.ChatOptions` in, a ready chat out.

The TUI (:mod:`app.tui.loader`), the headless mode (:mod:`app.chat.headless`), the
benches and the tests all open a chat through :func:`open_chat`, so a fix to how a
chat starts (the header read once, the start-up overlap, a better load error, the
engine not left behind on failure) reaches every one of them.

A local chat: ``--model`` (or the bundled model) is resolved to a file, its header is
read once (:func:`app.models.header.take_header`: handed on from the preset match
when the settings already read it), the engine starts loading in its own process
(:func:`backends.start_backend`) and, while it loads, this process reads our
tokenizer from the same header and picks the chat template; start-up then costs the
longer of the two, not their sum.  Any failure or Ctrl-C before the engine is handed
over discards it (:meth:`backends.registry.PendingBackend.discard`), so an abandoned
load leaves no engine process behind.

A remote chat (``--server``): the parts are the local chat's (our tokenizer, our
template, :class:`app.conversation.session.ChatSession`); only the backend differs.
The tokenizer comes from ``--model`` (a GGUF, even a vocab-only one, a
``tokenizer.json`` directory or ``hf:``), else from what the server says it serves
(:func:`backends.remote_connect.server_tokenizer_source`), and the server must agree
with it id for id (:func:`backends.remote_connect.check_vocabulary`).

The command line starts the engine's load as soon as the options are known and hands
the one object that owns it (:class:`app.chat.early.EarlyEngine`) to ``open_chat`` as
``early``: the chat opened with those very options adopts that load instead of starting
another; a chat opened with any other options closes it.

A backend handed in (tests, benches: a scripted one, or one loaded with settings of
their own) is used as it is: nothing is started, and it is not closed on failure
since the caller owns it.

Tools are not opened here: the headless mode opens them after its attachments with
terminal approval and the history as listener, the TUI starts the servers once per
window in a worker and keeps them across ``/model``; both go through
:func:`app.tools.setup.open_tools` / :class:`app.tools.loop.ToolLoop` on the session
this returns.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from app.settings.options import ChatOptions

if TYPE_CHECKING:
    from tokenizer.protocol import Tokenizer
    from app.conversation.session import ChatSession
    from backends.base import Backend
    from templates.chat_template import ChatTemplate
    from app.chat.early import EarlyEngine

#: a step of the opening, in words, for a screen that shows what is happening while the weights load
Progress = Callable[[str], None]


@dataclass
class OpenedChat:
    """A ready chat: the session and the parts the TUI's header, its commands and the benches need."""

    session: ChatSession
    tokenizer: Tokenizer
    template: ChatTemplate
    backend: Backend
    #: the model file (local), or where the tokenizer came from (remote)
    model_path: Path
    #: what the session keeps the conversation within: --ctx, never more than the engine or server holds
    context_size: int
    #: why the template is not the one asked for (one line), or None
    template_notice: str | None = None
    #: one line each for the user: the template's notice, then the notes of the backend opened here
    #: (a backend handed in is the caller's: its notes are the caller's to show)
    notices: list[str] = field(default_factory=list)

    @property
    def info(self) -> Any:
        return self.backend.info


def open_chat(options: ChatOptions, *, backend: Any = None, progress: Progress | None = None,
              early: EarlyEngine | None = None) -> OpenedChat:
    """Open the chat ``options`` describe (see the module docstring); ``early``: the engine the command line
    started before the chat was opened, adopted if it was started for ``options``.

    Raises what the parts raise (``ModelNotFound``, ``BackendError``, a template's
    error...): the caller says it in its own way.  ``options.model_meta`` is taken
    (set to None): a header is used for one load only.
    """
    opened = backend is None
    if options.server is not None and backend is None:
        tokenizer, template, notice, backend, path = _connect(options, progress or _silent)
    else:
        tokenizer, template, notice, backend, path = _load(options, backend, progress, early)
    context_size = _context_size(options, backend)
    try:
        from app.conversation.session import ChatSession

        session = ChatSession.from_options(options, tokenizer, template, backend=backend,
                                           context_size=context_size)
    except BaseException:
        if opened:
            backend.close()  # its engine (or connection) must not outlive this error
        raise
    notices = ([notice] if notice else []) + (list(backend.info.notes) if opened else [])
    return OpenedChat(session, tokenizer, template, backend, path, context_size, notice, notices)


def _silent(_text: str) -> None:
    """No progress to show (headless, benches, tests)."""


def human_size(n_bytes: int) -> str:
    """``104857600`` -> ``"100.0 MiB"``: file sizes for the load progress (the TUI's format shows them too)."""
    size = float(n_bytes)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def _size(path: Path) -> str:
    return human_size(path.stat().st_size)


def _load(options: ChatOptions, backend: Any, progress: Progress | None,
          early: EarlyEngine | None) -> tuple[Any, Any, str | None, Any, Path]:
    """(tokenizer, template, notice, backend, path) of a local chat; starts the engine unless one is handed in
    or was started early for these options.

    The progress lines are built only when someone shows them (they stat the file)."""
    import app.models.header as model_header
    from app.models.resolution import resolve_model

    started = early.take(options) if early is not None and backend is None else None
    pending = None
    if started is not None:
        path, header, pending = started.path, started.header, started.pending
    else:
        if progress:
            progress(f"finding the model {options.model or '(bundled SmolLM2-135M-Instruct)'}")
        path = Path(resolve_model(options.model))
        header = model_header.take_header(path, options, for_engine=backend is None)
        if backend is None:
            # the engine loads in its own process while this one reads the tokenizer and the template
            from app.chat.early import start_engine

            pending = start_engine(options, path, header)
    try:
        if progress:
            progress(f"reading the tokenizer from {path.name} ({_size(path)})")
        tokenizer = model_header.load_chat_tokenizer(path, header)
        if pending is not None:
            tokenizer.encode("Hello")  # its merge table, built now (see _prepare), before Jinja is imported
        from templates import resolve_template  # Jinja: imported while the engine loads

        template, notice = resolve_template(options.template, tokenizer, options.template_file)
        if pending is not None:
            _prepare(template)
            if progress:
                progress(f"loading {path.name} ({_size(path)}) with backend "
                    f"{options.backend}{' ' + options.device if options.device else ''}")
            backend = _engine(pending, header, path, options)
    except BaseException:  # a tokenizer that fails, Ctrl-C while the engine loads: the engine goes too
        if pending is not None:
            pending.discard()
        raise
    return tokenizer, template, notice, backend, path


def _prepare(template: Any) -> None:
    """Build now, while the engine loads, what the first reply would otherwise wait for after it: the
    tokenizer's merge table (built at the first encode, which :func:`_load` makes before Jinja is imported:
    the table's build needs 4 to 7 MiB for a moment, and the chat's process peaked there) and the template's
    compiled form.  Measured on a one-shot ``--prompt``, both sat between "engine loaded" and the first
    request (docs/engine.md, "Figures behind the code's choices")."""
    from templates import TemplateError

    try:
        template.compiled
    except TemplateError:
        return  # it fails again at the first render, where the chat reports it in its one line


def _engine(pending: Any, header: Any, path: Path, options: ChatOptions) -> Any:
    """The started engine, or its load error with what the header says went wrong when it can tell."""
    from backends import BackendError

    try:
        return pending.result()
    except BackendError as exc:
        from backends.model_meta import explain_load_failure

        draft = _draft_problem(path, options)
        if draft is not None:  # the engine's line names the main model: "could not load smollm2.gguf: ..."
            raise BackendError(draft) from exc
        better = explain_load_failure(header, path, options.ctx)
        if better is None:
            raise
        raise BackendError(f"{better} (the engine said: {exc})") from exc


def _draft_problem(path: Path, options: ChatOptions) -> str | None:
    """Why ``--draft-model`` cannot draft for the model at ``path`` (one line naming the draft model first),
    or None when it can, or when no draft model was to be loaded."""
    draft = options.draft_model
    if draft is None or options.speculative not in ("draft", "auto"):
        return None
    from backends import BackendError
    from backends.draft_model import vocab_difference
    from tokenizer.errors import TokenizerError

    fix = "give a draft model with the same vocabulary, or --speculative off"
    try:
        differs = vocab_difference(path, Path(draft))
    except (BackendError, OSError, ValueError, TokenizerError) as exc:
        return (f"could not read the draft model {Path(draft).name}: {exc}; download it again, give another "
                "draft model, or --speculative off")
    return None if differs is None else f"the draft model {differs}: {fix}"


def _connect(options: ChatOptions, say: Progress) -> tuple[Any, Any, str | None, Any, Path]:
    """(tokenizer, template, notice, backend, tokenizer path) of a chat on ``options.server``."""
    from backends.remote_connect import finish_connect, open_client, server_tokenizer_source
    from templates import resolve_template
    from tokenizer import load_tokenizer

    settings = options.server
    assert settings is not None
    say(f"connecting to {settings.url}")
    from app.models.served import take_opened

    backend = take_opened(settings) or open_client(settings)  # the one the preset match opened, if any
    try:
        if options.model:
            from app.models.resolution import resolve_model

            path = Path(resolve_model(options.model))
        else:
            assert backend.server is not None
            path = server_tokenizer_source(backend.server)
        say(f"reading the tokenizer from {path.name}")
        tokenizer = load_tokenizer(path)
        template, notice = resolve_template(options.template, tokenizer, options.template_file)
    except BaseException:
        backend.close()
        raise
    say(f"checking that {settings.url} uses the same token ids")
    # closes the client when it fails; states on: llama-server's slots kept on its disk (backends.remote_slots)
    finish_connect(backend, tokenizer, str(path), options.ctx, options.state_dir)
    return tokenizer, template, notice, backend, path


def _context_size(options: ChatOptions, backend: Any) -> int:
    """``--ctx`` when given, never more than the backend holds (llama.cpp rounds its context up to
    a multiple of 256; a server may hold less, which :func:`backends.remote_connect.finish_connect`
    already noted); else what the backend holds."""
    held = backend.info.context_size
    if options.ctx and held:
        return min(options.ctx, held)
    return options.ctx or held
