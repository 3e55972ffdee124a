"""Headless chat: one prompt in, the reply streamed to stdout (for scripts, tests and benchmarks).

* the reply goes to stdout as it is generated; with ``--show-thinking`` the
  reasoning goes to stderr (it is never mixed into stdout);
* notices (template fallback, dropped turns) and errors go to stderr, one line each;
* ``--stats`` writes one JSON line of :class:`app.session.TurnStats` to stderr at the end;
* Ctrl-C cancels the generation cleanly: the partial reply stays printed, the stats line
  (``finish_reason: "cancelled"``) is still written, and the exit status is 130.  A
  second Ctrl-C interrupts at once.

History: ``recorder`` (an :class:`app.recorder.HistoryRecorder` or anything with
``on_user``/``on_event``/``on_reply``/``close``) is told about the turn; None records nothing.
"""
from __future__ import annotations

import json
import signal
import sys
import threading
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any, Iterator, TextIO

from app.options import ChatOptions
from app.session import ChatMessage, ChatSession

EXIT_INTERRUPTED = 130


def open_chat(options: ChatOptions, backend: Any = None) -> tuple[ChatSession, list[str]]:
    """Load tokenizer, template and backend for ``options``; returns the session and its notices."""
    from app.model_header import load_chat_tokenizer, take_header
    from app.model_resolution import resolve_model
    from templates import resolve_template

    path = resolve_model(options.model)
    header = take_header(path, options)
    tokenizer = load_chat_tokenizer(path, header)
    template, notice = resolve_template(options.template, tokenizer, options.template_file)
    notices = [notice] if notice else []
    opened = backend is None
    if backend is None:
        from backends import LoadOptions, open_backend

        backend = open_backend(path, LoadOptions(backend=options.backend, device=options.device,
                                                 n_ctx=options.ctx, model_meta=header))
        notices.extend(backend.info.notes)
    try:
        session = ChatSession(tokenizer, template, backend=backend, system_prompt=options.system,
                              sampling=options.sampling, context_size=options.ctx or backend.info.context_size,
                              enable_thinking=options.think)
    except BaseException:
        if opened:
            backend.close()  # its engine thread must not outlive this error
        raise
    return session, notices


def run_headless(options: ChatOptions, *, backend: Any = None, recorder: Any = None,
                 out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Answer ``options.prompt``; 0 on a reply, 2 on an error, 130 when interrupted."""
    out = out or sys.stdout
    err = err or sys.stderr
    session, notices = open_chat(options, backend)
    for notice in notices:
        print(f"tokchat: {notice}", file=err)
    prompt = options.prompt or ""
    if options.attach:
        from app.attachments import AttachLimits, AttachmentError, compose, read_attachment

        limits = options.attach_limits or AttachLimits()
        try:
            files = [read_attachment(path, limits, session.draft_tokens) for path in options.attach]
        except AttachmentError as exc:
            print(f"tokchat: {exc}", file=err)
            return 2
        for file in files:
            print(f"tokchat: attached {file.summary()}", file=err)
        prompt = compose(prompt, files)
    if recorder is not None:
        # model name and template are known only now that the model is loaded
        recorder.start_new(model_name=session.backend.info.model_name, template=session.template.name)
        recorder.on_user(ChatMessage("user", prompt))
    status = 0
    wrote_content = False
    try:
        with _cancel_on_sigint(session):
            for event in session.send(prompt):
                if recorder is not None:
                    recorder.on_event(event)
                if event.kind == "content":
                    out.write(event.text)
                    out.flush()
                    wrote_content = wrote_content or bool(event.text)
                elif event.kind == "reasoning" and options.show_thinking:
                    err.write(event.text)
                    err.flush()
                elif event.kind in ("notice", "error"):
                    print(f"tokchat: {event.text}", file=err)
                    status = 2 if event.kind == "error" else status
                elif event.kind == "done" and event.stats is not None:
                    if event.stats.finish_reason == "cancelled":
                        status = EXIT_INTERRUPTED
                    if wrote_content:
                        out.write("\n")
                        out.flush()
                    if options.stats:
                        print(json.dumps(asdict(event.stats)), file=err, flush=True)
        reply = session.messages[-1] if session.messages and session.messages[-1].role == "assistant" else None
        if recorder is not None and reply is not None:
            recorder.on_reply(reply)
    finally:
        if recorder is not None:
            recorder.close()
        session.backend.close()
    return status


@contextmanager
def _cancel_on_sigint(session: ChatSession) -> Iterator[None]:
    """The first Ctrl-C cancels the reply (which then ends normally); the second interrupts."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pressed = []

    def on_sigint(signum: int, frame: Any) -> None:
        if pressed:
            raise KeyboardInterrupt
        pressed.append(signum)
        session.cancel()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
