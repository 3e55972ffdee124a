"""Headless chat: one prompt in, the reply streamed to stdout (for scripts, tests and benchmarks).

* the reply goes to stdout as it is generated; with ``--show-thinking`` the
  reasoning goes to stderr (it is never mixed into stdout); on a terminal both are made inert
  (escape sequences shown as ``\\x1b``), to a pipe or a file they are exact
  (:mod:`app.chat.headless_out`);
* notices (template fallback, dropped turns) and errors go to stderr, one line each;
* ``--stats`` writes one JSON line of :class:`app.conversation.session.TurnStats` to stderr at the end,
  always a line of its own (reasoning shown without a final newline is ended first, see :class:`app.chat.headless_out.Stderr`);
* Ctrl-C cancels the generation cleanly: the partial reply stays printed, one line on stderr says
  so and how to go on with it (``--resume N --continue``), the stats line
  (``finish_reason: "cancelled"``) is still written, last, and the exit status is 130.  A
  second Ctrl-C interrupts at once.  SIGTERM (``timeout``, systemd, docker) and SIGHUP
  (the terminal closed) do the same, exiting 143 and 129: the history keeps everything
  that was printed.  A closed stdout (``| head -c 10``) stops the reply the same way:
  one line on stderr, the stats, exit 141 (128 + SIGPIPE).

Tools: with ``--tools`` the turn runs through :class:`app.tools.loop.ToolLoop`; each call
and its result are one line on stderr (text made printable), and a call runs only with
``--approve-tools``, a ``tools.auto_approve`` entry, or a yes typed on the terminal.

History: ``recorder`` (the :class:`app.history.recorder.HistoryRecorder` the TUI saves through too) is
told about the turn: every event, then the reply; None records nothing.
"""
from __future__ import annotations

import json
import signal
import sys
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator, TextIO

from app.chat.headless_out import ReplyOut, Stderr, share_terminal
from app.settings.options import ChatOptions

if TYPE_CHECKING:  # imported once the engine is loading (open_chat): the session pulls in Jinja
    from app.conversation.session import ChatMessage, ChatSession, TurnOutcome
    from app.history.recorder import HistoryRecorder

EXIT_INTERRUPTED = 130
#: the exit status when stdout was closed under the reply (a shell's 128 + SIGPIPE)
EXIT_BROKEN_PIPE = 141
#: signals that stop the reply as Ctrl-C does; the exit status is 128 + the signal's number
STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


def run_headless(options: ChatOptions, *, backend: Any = None, recorder: HistoryRecorder | None = None,
                 out: TextIO | None = None, err: TextIO | None = None, early: Any = None) -> int:
    """Answer ``options.prompt``; 0 on a reply, 2 on an error, 130 when interrupted.  ``early``: the engine
    the command line started for these options (:class:`app.chat.early.EarlyEngine`), adopted."""
    out = out or sys.stdout
    stderr = Stderr(err or sys.stderr)
    from app.chat.open import open_chat

    chat = open_chat(options, backend=backend, early=early)
    from app.conversation.session import ChatMessage
    from app.conversation.turn import watch_outcome

    session = chat.session
    for notice in chat.notices:
        print(f"tokchat: {notice}", file=stderr)
    prompt = options.prompt or ""
    if options.attach:
        from app.conversation.attachments import AttachLimits, AttachmentError, compose, read_attachment

        limits = options.attach_limits or AttachLimits()
        try:
            files = [read_attachment(path, limits, session.draft_tokens, tui=False) for path in options.attach]
        except AttachmentError as exc:
            print(f"tokchat: {exc}", file=stderr)
            return 2
        for file in files:
            print(f"tokchat: attached {file.summary()}", file=stderr)
        prompt = compose(prompt, files)
    tools = _open_tools(options, session, recorder, stderr)
    steer = _steer(options, session, recorder, stderr)  # --resume / --continue (app.history.resume)
    if steer == "refused":
        session.backend.close()
        return 2
    # a message the session will refuse (too long for the context, a template that cannot render it) is
    # not stored: the session says why in its own error event, and the history stays as it was
    if recorder is not None and steer == "send" and session.refusal(prompt) is None:
        # model name and template are known only now that the model is loaded
        if options.resume is None:
            from app.history.model_identity import vocabulary_fingerprint

            recorder.start_new(model_name=session.backend.info.model_name, template=session.template.name)
            recorder.set_vocabulary(vocabulary_fingerprint(session.tokenizer))
        recorder.on_user(ChatMessage("user", prompt))
    status = 0
    stoppable = tools.loop if tools is not None else session
    reply_out = ReplyOut(out, stderr, stoppable)
    share_terminal(reply_out, stderr)
    try:
        # the handlers stay until the reply is stored: a signal then still finds it whole
        with _stop_on_signals(stoppable) as caught:
            outcomes: list[Any] = []  # the session's step of the turn says whether it took the turn
            first = session.continue_reply() if steer == "continue" else session.send(prompt)
            events = watch_outcome(first, outcomes.append)
            if tools is not None and steer != "continue":
                events = tools.loop.run(events)
            for event in events:
                # the reply's text is printed before it is stored: a SIGKILL between the two leaves the history a
                # prefix of what the user saw, never text they did not see
                if event.kind == "content":
                    reply_out.write(event.text)
                elif event.kind == "reasoning" and options.show_thinking:
                    stderr.reasoning(event.text)
                if recorder is not None:
                    recorder.on_event(event)
                if event.kind in ("notice", "error"):
                    print(f"tokchat: {event.text}", file=stderr)
                    status = 2 if event.kind == "error" else status
                elif event.kind in ("tool_call", "tool_result"):
                    _print_tool_event(event, stderr)
                elif event.kind == "summary":  # the turns that left the prompt, summarized (--compact summarize)
                    print(f"tokchat: {_summary_line(event.data)}", file=stderr)
                elif event.kind == "done" and event.stats is not None:
                    if event.stats.finish_reason == "cancelled":
                        status = EXIT_INTERRUPTED
                    reply_out.end()
                    verdict = _format_verdict(session, event.stats.finish_reason)
                    if verdict:
                        print(f"tokchat: {verdict}", file=stderr)
                    if caught:  # before the stats, which stay the last line
                        stored = recorder.conversation_id if recorder is not None and recorder.enabled else None
                        print(_stopped_line(caught[0], stored), file=stderr)
                    if options.stats:
                        from app.conversation.messages import stats_dict
                        from app.history.export import finite

                        print(json.dumps(finite(stats_dict(event.stats))), file=stderr, flush=True)
            reply = _this_turns_reply(session, outcomes[0] if outcomes else None)
            if recorder is not None and reply is not None:
                recorder.on_reply(reply)
        if reply_out.broken is not None:
            status = EXIT_BROKEN_PIPE
        elif caught:
            status = 128 + caught[0]
    finally:
        if recorder is not None:
            recorder.close()
        if tools is not None:
            tools.close()
        session.backend.close()
    return status


def _format_verdict(session: ChatSession, finish_reason: str) -> str | None:
    """One line when the reply was held to a format (``--json-schema`` ...) and is incomplete or does not
    conform (checked again here, with the ``jsonschema`` package for a schema); None otherwise."""
    constraint = session.sampling.constraint
    if constraint is None or not session.messages or session.messages[-1].role != "assistant":
        return None
    from backends.constraint import reply_verdict

    info = session.backend.info
    where = info.device if info.backend == "remote" else ""
    return reply_verdict(constraint, session.messages[-1].content, finish_reason, where)


def _stopped_line(signum: int, conversation: int | None) -> str:
    """What a signal did to the reply, and how to go on with it: one line."""
    name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    where = (f"; it is stored: tokchat --resume {conversation} --continue goes on with it" if conversation is not None
             else "")
    return f"tokchat: stopped by {name}: the reply so far is kept{where}"


def _this_turns_reply(session: ChatSession, outcome: TurnOutcome | None) -> ChatMessage | None:
    """The reply this run produced (a continued one, ``--continue``, grown in place), or None when
    the session refused the turn: it is then as it was, and storing its last message again would
    invent an answer.  ``outcome``: the session's own step's (None: it never ended)."""
    if outcome is None or outcome.refused or not session.messages or session.messages[-1].role != "assistant":
        return None
    return session.messages[-1]


def _steer(options: ChatOptions, session: ChatSession, recorder: HistoryRecorder | None, err: Stderr) -> str:
    """``--resume ID`` loads a stored conversation; ``--continue`` then continues its last reply.
    Returns "continue", "send", or "refused" (one line said why on ``err``).
    Thinking and the reasoning budget remembered for the model (``[models.NAME]``, app.settings.model_memory)
    apply unless given for this run."""
    from app.settings.config import ConfigError
    from app.settings.model_memory import apply_remembered

    session.reasoning_budget = options.reasoning_budget
    try:
        apply_remembered(options, session, session.backend.info.model_name)
    except ConfigError as exc:
        print(f"tokchat: {exc}", file=err)
    if options.resume is not None:
        from app.history.resume import ResumeError, resume_into, settled_length

        try:
            stored = resume_into(session, options.resume, recorder)
        except ResumeError as exc:
            print(f"tokchat: {exc}", file=err)
            return "refused"
        if not _same_vocabulary(options, session, stored, recorder, err):
            return "refused"
        left = len(stored.messages) - settled_length(stored.messages)
        if left:
            print(f"tokchat: --resume {options.resume}: the last {left} message{'s' if left != 1 else ''} "
                  f"{'have' if left != 1 else 'has'} no finished reply (another tokchat may be writing it): "
                  "left out, and this turn becomes its sibling", file=err)
    if not options.continue_reply:
        return "send"
    why = session.continue_refusal()
    if why is not None:
        print(f"tokchat: --continue: {why}", file=err)
        return "refused"
    if recorder is not None:
        recorder.on_continue(session.messages[-1])
    return "continue"


def _same_vocabulary(options: ChatOptions, session: ChatSession, stored: Any, recorder: HistoryRecorder | None,
                     err: Stderr) -> bool:
    """False (one line said why) when ``stored`` was written with another vocabulary than this run's model
    (a server restarted with another model: issue 34, item 3), unless ``--switch-model`` asked to go on:
    then the switch is recorded as the TUI's ``/model`` records one, and the stored reply ids, which mean
    nothing in this vocabulary, are dropped (the replies are encoded again from their text).  The rule is
    :func:`app.history.model_identity.vocabulary_switch`, the TUI's sidebar's too."""
    from app.history.model_identity import switch_record, vocabulary_switch

    switch = vocabulary_switch(stored.info, session.tokenizer)
    if switch is None:
        return True
    info = session.backend.info
    now = info.model_name or "this run's model"
    where = f" ({info.device})" if info.backend == "remote" else ""
    if not options.switch_model:
        print(f"tokchat: --resume {options.resume} was written by {switch.was}; {now}{where} has another "
              "vocabulary, so its ids would mean other text: serve or pass that model, or add --switch-model to go "
              "on with this one (the switch is recorded)", file=err)
        return False
    session.forget_reply_ids()
    if recorder is not None:
        model = str(options.model_path or options.model or info.model_name)
        recorder.update(**switch_record(stored.info, switch, model=model, model_name=info.model_name,
                                        template=session.template.name))
    print(f"tokchat: --resume {options.resume}: switched from {switch.was} to {now}{where} (another vocabulary; "
          "recorded in the conversation)", file=err)
    return True


def _open_tools(options: ChatOptions, session: ChatSession, recorder: HistoryRecorder | None, err: Stderr) -> Any:
    """The chat's tools (None without ``--tools``); intermediate messages go to the history."""
    if options.tools is None or not options.tools.selected():
        return None  # no tools: the MCP client (and asyncio with it) is never imported
    from app.tools.setup import open_tools

    return open_tools(options.tools, session, approve=_ask_on_terminal(err),
                      notify=lambda line: print(f"tokchat: {line}", file=err),
                      on_message=recorder.on_message if recorder is not None else None)


def _ask_on_terminal(err: Stderr) -> Any:
    """Approval for a headless run: asked on the terminal when there is one, else denied."""
    from app.tools.display import call_line
    from app.tools.loop import ALWAYS, DENY, ONCE

    def approve(call: Any, server: str) -> str:
        try:
            if not sys.stdin.isatty():
                raise OSError("no terminal")
            with open("/dev/tty", "r+", encoding="utf-8") as tty:
                tty.write(f"tokchat: run {call_line(server, call.name, call.arguments)}? "
                          "[y]es once / [a]lways / [N]o: ")
                tty.flush()
                answer = tty.readline().strip().lower()
        except OSError:
            print(f"tokchat: tool call {call.name} denied: no terminal to ask on; run with --approve-tools or "
                  "list the tool in tools.auto_approve", file=err)
            return DENY
        return {"y": ONCE, "yes": ONCE, "a": ALWAYS, "always": ALWAYS}.get(answer, DENY)

    return approve


def _summary_line(summary: ChatMessage) -> str:
    """One line for a summary made before this turn: what it stands for, its cost, and its text."""
    stats = summary.stats
    assert stats is not None, "a summary is made with its stats"
    text = " ".join(summary.content.split())
    return (f"summary of the first {stats.compacted_turns} turn{'s' if stats.compacted_turns != 1 else ''} "
            f"({stats.completion_tokens} tokens, from a prompt of {stats.prompt_tokens}; stored): {text}")


def _print_tool_event(event: Any, err: Stderr) -> None:
    from app.tools.display import preview

    if event.kind == "tool_call":
        call, _server = event.data
        state = f" (not run: {call.error})" if call.error else ""
        print(f"tokchat: tool call {event.text}{state}", file=err)
    else:
        outcome = event.data
        print(f"tokchat: tool result {outcome.call.name} [{outcome.status}, {outcome.tokens} tokens]: "
              f"{preview(outcome.text)}", file=err)


@contextmanager
def _stop_on_signals(session: Any) -> Iterator[list[int]]:
    """The first SIGINT, SIGTERM or SIGHUP cancels the reply (which then ends normally and
    is stored); a second one interrupts.  Yields the signals caught, first one first."""
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return

    def on_signal(signum: int, frame: Any) -> None:
        if caught:
            raise KeyboardInterrupt
        caught.append(signum)
        session.cancel()

    previous = {}
    for name in STOP_SIGNALS:
        number = getattr(signal, name, None)
        if number is not None:  # Windows has no SIGHUP
            previous[number] = signal.signal(number, on_signal)
    try:
        yield caught
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
