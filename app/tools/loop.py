"""One turn with tools: generate, find the calls, ask, run, send the results back, repeat.

    loop = ToolLoop(session, toolbox, approve=ask_the_user, settings=tool_settings)
    for event in loop.send("What time is it in Tokyo?"):
        ...   # content / reasoning / tool_call_delta / tool_call / tool_result / notice / error, then done

Every model step is an ordinary :class:`app.conversation.session.ChatSession` turn: the
first after the user's message (``send``), the next after the tool results
(``continue_turn``), so prompt building, overflow and accounting are the
session's.  Between steps:

* the reply's calls are parsed from its ids (:func:`app.tools.calls.parse_reply`)
  and the reply is rewritten the HF way: ``content`` without the call markup,
  ``tool_calls`` with the parsed calls (so the template re-renders them);
* a malformed call, an unknown tool, a denied call and a failed call all go
  back to the model as an error result; only an approved, well-formed call
  to an offered tool is run;
* a result longer than ``result_tokens``, or than the room the context has
  left for it (after the conversation, the results before it and the reply's
  own room), is cut to fit, with a notice to the model (in the result) and to
  the user (an event); only its first ``budget * MAX_CHARS_PER_TOKEN``
  characters are ever tokenized (a 5 MiB result was tokenized whole, 655,360
  ids in 75 s and 1.5 GB, before being cut to 2,048).

The turn's ``done`` carries stats for the whole turn: completion and
evaluated prompt tokens summed over the steps, ``tool_call_tokens``,
``tool_result_tokens`` and ``model_steps`` added.  The last reply's stats
are replaced by these, so history and /stats count every tool token.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Iterator, Protocol, Sequence

from app.conversation.session import ChatMessage, ChatSession, ReplyEvent, TurnStats
from app.tools.calls import CallStreamSplitter, CallSyntax, ToolCall, hold_arguments, parse_reply, syntax_for
from app.tools.display import call_line
from app.tools.mcp_client import ToolInfo, ToolResult
from app.settings.tools import ToolSettings
from backends.base import FinishReason

if TYPE_CHECKING:
    from tokenizer.protocol import Tokenizer

#: approval answers
ONCE, ALWAYS, DENY = "once", "always", "deny"
#: a token is rarely longer than this many characters: a result is tokenized no further than its budget
#: times this (long runs of one character, the tokenizer's slowest input, cost the budget's time, not the result's)
MAX_CHARS_PER_TOKEN = 16
#: a tool result's template markup, and the generation prompt after the results, at most (Mistral's
#: ``[TOOL_RESULTS]{"content": ..., "call_id": ...}[/TOOL_RESULTS]`` is about 20)
MARKUP_TOKENS = 32


class Toolbox(Protocol):
    """What the loop runs calls on (:class:`app.tools.mcp_client.McpHub`)."""

    def call(self, server: str, tool: str, arguments: dict, timeout_s: float | None = None) -> ToolResult: ...


#: (call, server) -> ONCE | ALWAYS | DENY; may block (the TUI waits for its dialog)
Approver = Callable[[ToolCall, str], str]


@dataclass
class ToolOutcome:
    """What became of one call: ``status`` ok | error | denied | malformed | unknown | repeat | skipped."""

    call: ToolCall
    server: str
    status: str
    text: str  # the result as sent to the model (truncated if it was too long)
    tokens: int = 0
    #: the result's full length in characters when it was cut (0: sent whole)
    truncated_from_chars: int = 0
    #: the tokens it was cut to fit: tools.result_tokens, or less when the context had less room left
    budget: int = 0


class ToolLoop:
    """Drives a :class:`ChatSession` through a turn with tool calls."""

    def __init__(self, session: ChatSession, toolbox: Toolbox, tools: Sequence[ToolInfo], *,
                 approve: Approver, settings: ToolSettings | None = None,
                 syntax: CallSyntax | None = None,
                 on_message: Callable[[ChatMessage], object] | None = None) -> None:
        """``on_message`` is told about every message the loop adds or finishes between steps
        (intermediate replies and tool results), in order, for the history."""
        self.session = session
        self.toolbox = toolbox
        self.settings = settings or ToolSettings()
        self.approve = approve
        self.on_message = on_message
        self.syntax = syntax if syntax is not None else syntax_for(session.template.source)
        #: tool name -> the tool (the first server offering a name wins)
        self.tools: dict[str, ToolInfo] = {}
        for tool in tools:
            self.tools.setdefault(tool.name, tool)
        self.always: set[str] = set()
        #: (name, arguments as JSON) of the calls run this turn: a repeat is answered, not run again
        self._answered: dict[tuple[str, str], str] = {}
        self._cancel = threading.Event()
        session.tools = [t.schema() for t in self.tools.values()] if self.tools else None
        session.tool_instructions = self.settings.instructions
        #: why the calls' arguments stay free though [tools] constrain_arguments asks (said once), or ""
        self.unheld = (hold_arguments(session, self.syntax, list(self.tools.values()))
                       if self.settings.constrain_arguments and self.active else "")

    @property
    def active(self) -> bool:
        """Tools are given to the model (there are some, and the template has a call syntax)."""
        return bool(self.tools) and self.syntax is not None

    def cancel(self) -> None:
        """Stop the turn: the step being generated is cancelled and no further call is run."""
        self._cancel.set()
        self.session.cancel()

    # -- the turn --------------------------------------------------------------------------------
    def send(self, text: str) -> Iterator[ReplyEvent]:
        """Send a user message and run the turn to its end."""
        yield from self.run(self.session.send(text))

    def run(self, first_step: Iterator[ReplyEvent]) -> Iterator[ReplyEvent]:
        """Run a turn whose first step is ``first_step`` (``send``, ``regenerate``, ``edit_last_user``)."""
        self._cancel.clear()
        self._answered = {}
        if self.unheld:
            yield ReplyEvent("notice", self.unheld)
            self.unheld = ""
        started = time.monotonic()
        steps: list[TurnStats] = []
        call_tokens = result_tokens = 0
        events = first_step
        while True:
            stats, bare_text = yield from self._step(events)
            if stats is None:  # refused before generating (an error event said why)
                yield ReplyEvent("done", stats=self._total(steps, call_tokens, result_tokens, started))
                return
            steps.append(stats)
            reply = self.session.messages[-1] if self.session.messages else None
            parsed = None
            if reply is not None and reply.role == "assistant" and self.active and stats.finish_reason == "stop":
                reply_ids = reply.record.reply_ids if reply.record is not None else ()
                parsed = parse_reply(self.session.tokenizer, self.syntax, reply_ids, reply.content, self.tools)
            if parsed is None or not parsed.calls:
                if bare_text:  # it opened like a bare JSON call but is an answer: show it as one
                    yield ReplyEvent("content", bare_text)
                break
            call_tokens += parsed.call_tokens
            if len(steps) >= self.settings.max_steps or self._cancel.is_set():
                if not self._cancel.is_set():
                    yield ReplyEvent("notice", f"the turn reached its limit of {self.settings.max_steps} model "
                                     f"steps (tools.max_steps): {len(parsed.calls)} call(s) not run")
                break
            assert reply is not None  # the calls were parsed from it
            malformed_raw = "".join("\n" + c.raw for c in parsed.calls if c.error is not None)
            self.session.replace_reply(reply, (parsed.content + malformed_raw).strip(),
                                       [c.message_form() for c in parsed.valid_calls] or None)
            if self.on_message is not None:
                self.on_message(reply)
            results: list[ChatMessage] = []
            step_results = 0  # tokens of this step's results so far: they share the room left
            for call in parsed.calls:
                outcome = yield from self._run_call(call, self._room(step_results, len(results) + 1))
                result_tokens += outcome.tokens
                step_results += outcome.tokens
                message = ChatMessage("tool", outcome.text, tool_call_id=call.id, name=call.name or "invalid")
                results.append(message)
                if self.on_message is not None:
                    self.on_message(message)
            if self._cancel.is_set():
                # the results are kept (the model sees them next turn); no further step
                self.session.add_tool_results(results)
                break
            events = self.session.continue_turn(results)
        total = self._total(steps, call_tokens, result_tokens, started)
        last = self.session.messages[-1] if self.session.messages else None
        if last is not None and last.role == "assistant":
            self.session.set_reply_stats(last, total)
        yield ReplyEvent("done", stats=total)

    def _step(self, events: Iterator[ReplyEvent]):
        """Pass one step's events on (call text split out); returns its stats (None if refused)."""
        splitter = CallStreamSplitter(self.syntax if self.active else None)
        stats: TurnStats | None = None
        generated = False
        bare: list[str] = []
        for event in events:
            if event.kind in ("content", "done"):
                generated = generated or event.kind == "content"
                pieces = splitter.feed(event.text) if event.kind == "content" else splitter.finish()
                for kind, text in pieces:
                    if splitter.bare:
                        bare.append(text)
                    yield ReplyEvent("content" if kind == "content" else "tool_call_delta", text)
                if event.kind == "done":
                    stats = event.stats
            else:
                generated = generated or event.kind == "reasoning"
                yield event
        if stats is None or (not generated and stats.completion_tokens == 0 and stats.prompt_tokens == 0):
            return None, ""
        return stats, "".join(bare)

    def _room(self, before: int, results: int) -> int:
        """Tokens the next result may take: ``tools.result_tokens``, or less if the context has less left
        after the conversation so far, ``before`` tokens of this step's earlier results, the markup of
        ``results`` results and the generation prompt, and the reply's room: ``max_tokens`` (what
        :func:`app.conversation.fit.fit` keeps; more would make it leave earlier messages out), but at
        most half the context (a ``max_tokens`` as large as the context would leave a result nothing)."""
        s = self.session
        reply = min(s.sampling.max_tokens, s.context_size // 2)
        left = s.context_size - s.context_used - before - MARKUP_TOKENS * (results + 1) - reply
        return max(0, min(self.settings.result_tokens, left))

    def _run_call(self, call: ToolCall, budget: int):
        """Decide on one call and run it if allowed; yields the call and its outcome (cut to ``budget``)."""
        tool = self.tools.get(call.name)
        server = tool.server if tool is not None else ""
        yield ReplyEvent("tool_call", call_line(server, call.name, call.arguments), data=(call, server))
        if call.error is not None:
            outcome = self._outcome(call, server, "malformed", f"error: {call.error}; the call was not run", budget)
        elif tool is None:
            offered = ", ".join(sorted(self.tools)) or "none"
            outcome = self._outcome(call, server, "unknown",
                                    f"error: there is no tool named {call.name!r} (tools: {offered})", budget)
        elif self._cancel.is_set():
            outcome = self._outcome(call, server, "skipped", "error: the user stopped the turn; not run", budget)
        elif _key(call) in self._answered:
            # small models repeat a call they have the answer to; running it again loops the turn
            outcome = self._outcome(call, server, "repeat", "This exact call was already made in this turn; its "
                                    f"result was: {self._answered[_key(call)]}\nAnswer the user with it now.",
                                    budget)
        else:
            decision = self._decide(call, server)
            if decision == DENY:
                outcome = self._outcome(call, server, "denied", "error: the user denied this tool call", budget)
            else:
                result = self.toolbox.call(server, call.name, call.arguments, self.settings.call_timeout_s)
                outcome = self._outcome(call, server, "error" if result.is_error else "ok", result.text, budget)
                if not result.is_error:
                    self._answered[_key(call)] = outcome.text
        if outcome.truncated_from_chars:
            why = ("tools.result_tokens" if outcome.budget >= self.settings.result_tokens
                   else f"the room left in the context of {self.session.context_size}")
            yield ReplyEvent("notice", f"the result of {call.name} was {outcome.truncated_from_chars:,} characters; "
                             f"kept {outcome.tokens} tokens of it ({why})")
        yield ReplyEvent("tool_result", outcome.text, data=outcome)
        return outcome

    def _decide(self, call: ToolCall, server: str) -> str:
        names = {call.name, f"{server}.{call.name}"}
        if self.settings.approve_all or names & set(self.settings.auto_approve) or call.name in self.always:
            return ONCE
        decision = self.approve(call, server)
        if decision == ALWAYS:
            self.always.add(call.name)
        return decision

    def _outcome(self, call: ToolCall, server: str, status: str, text: str, budget: int) -> ToolOutcome:
        kept, tokens = fit_result(self.session.tokenizer, text, budget)
        return ToolOutcome(call, server, status, kept, tokens, len(text) if kept != text else 0, budget)

    def _total(self, steps: list[TurnStats], call_tokens: int, result_tokens: int, started: float) -> TurnStats:
        if not steps:
            return TurnStats(finish_reason=FinishReason.ERROR, model_steps=0, context_limit=self.session.context_size)
        last, first = steps[-1], steps[0]
        completion = sum(s.completion_tokens for s in steps)
        timed = [s for s in steps if s.tokens_per_s > 0]
        generating = sum((s.completion_tokens - 1) / s.tokens_per_s for s in timed)
        speed = sum(s.completion_tokens - 1 for s in timed) / generating if generating > 0 else last.tokens_per_s
        return replace(
            last, new_prompt_tokens=turn_new_prompt_tokens(steps), prompt_tokens_per_s=turn_prompt_speed(steps),
            completion_tokens=completion,
            reasoning_tokens=sum(s.reasoning_tokens for s in steps), ttft_s=first.ttft_s, tokens_per_s=speed,
            forced_close_tokens=sum(s.forced_close_tokens for s in steps),
            reasoning_cut=any(s.reasoning_cut for s in steps),
            drafted_tokens=sum(s.drafted_tokens for s in steps), accepted_tokens=sum(s.accepted_tokens for s in steps),
            tool_call_tokens=call_tokens, tool_result_tokens=result_tokens, model_steps=len(steps),
            verified=all(s.verified for s in steps))


def turn_new_prompt_tokens(steps: Sequence[TurnStats]) -> int:
    """Of the last step's prompt (the turn's ``prompt_tokens``), the ids that were not in the cache when the turn
    began: what "new" means for a one-step turn, so never more than the total.  The ids the steps evaluated add
    up to more whenever a step could not reuse the one before it (a server that lost its cache, turns dropped
    to fit the context: issue 44 showed "460 new / 266 total"); that work is in the speed, not in this count."""
    first, last = steps[0], steps[-1]
    cached_before = first.prompt_tokens - first.new_prompt_tokens  # the first step's prompt the cache held
    cached_last = last.prompt_tokens - last.new_prompt_tokens
    return last.prompt_tokens - max(0, min(cached_last, cached_before))


def turn_prompt_speed(steps: Sequence[TurnStats]) -> float:
    """Prompt ids evaluated per second over the whole turn: every step's evaluated ids over every step's
    evaluation time (each step's ids over its own speed), not the last step's speed beside the turn's count."""
    timed = [s for s in steps if s.new_prompt_tokens > 0 and s.prompt_tokens_per_s > 0]
    seconds = sum(s.new_prompt_tokens / s.prompt_tokens_per_s for s in timed)
    return sum(s.new_prompt_tokens for s in timed) / seconds if seconds > 0 else 0.0


def _key(call: ToolCall) -> tuple[str, str]:
    return call.name, json.dumps(call.arguments, sort_keys=True)


def fit_result(tokenizer: Tokenizer, text: str, budget: int) -> tuple[str, int]:
    """``(text to send, its tokens)``: ``text`` whole if it fits ``budget`` tokens, else its start with a
    notice, at most ``budget`` tokens in all (only the notice, or nothing, when ``budget`` is that small).

    Only the first ``budget * MAX_CHARS_PER_TOKEN`` characters are tokenized, so the time and memory
    are the budget's, not the result's: a longer result is cut there even when those characters make
    fewer than ``budget`` tokens (long runs of one character or of spaces).
    """
    head = text[: budget * MAX_CHARS_PER_TOKEN]
    ids = tokenizer.encode(head) if head else []
    if len(ids) <= budget and len(head) == len(text):
        return text, len(ids)
    keep = budget - len(tokenizer.encode(_cut_notice(len(head), len(text))))
    while keep > 0:
        kept = (head if len(ids) <= keep else tokenizer.decode(ids[:keep])).rstrip("\ufffd")
        sent = kept + _cut_notice(len(kept), len(text))
        tokens = len(tokenizer.encode(sent))
        if tokens <= budget:
            return sent, tokens
        keep -= tokens - budget  # the start tokenized with the notice took a little more: cut again
    notice = _cut_notice(0, len(text)).lstrip()
    tokens = len(tokenizer.encode(notice))
    return (notice, tokens) if tokens <= budget else ("", 0)


def _cut_notice(kept: int, full: int) -> str:
    """What the model reads after a cut result (how much of it it got)."""
    return f"\n[tokchat: result cut to fit the context: its first {kept:,} of {full:,} characters]"
