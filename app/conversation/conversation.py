"""The conversation: the path of messages, its branches, the system prompt, and what the
backend's cache holds of it.

:class:`Conversation` is the state a chat keeps between turns and every change made
outside a turn: editing (the trailing reply taken back, once, in :meth:`Conversation.take_replies`),
forking, switching branches, a new system prompt, a stored chat loaded.  Each of those primes
the prompt builder with the reply the path now ends with, so the next prompt extends what the
engine holds and only the new part is evaluated.

It is the only writer of its state: a turn commits its reply through :meth:`Conversation.commit_reply`,
fitting moves the window through :meth:`Conversation.move_window`, the tool loop rewrites a committed
reply through :meth:`Conversation.replace_reply` (tests/app/conversation/test_conversation_owner.py
fails when another module writes one of its private fields).

It also measures the conversation for the UI (:meth:`Conversation.tokens_before`, the context
meter; :meth:`Conversation.rebuilt_record`, the token inspector of a resumed chat).

Not handled here: running a turn (:mod:`app.conversation.turn`), fitting the context
(:mod:`app.conversation.fit`), the public :class:`~app.conversation.session.ChatSession` that
ties them together.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from app.conversation.branches import BranchTree
from app.conversation.context_breakdown import PromptRecord
from app.conversation.messages import REPLY_ROLES, ChatMessage, TurnStats, template_message
from backends.base import Backend, SamplingParams
from templates import ChatTemplate, TemplateError
from templates.builder import BuiltPrompt, PromptBuilder

if TYPE_CHECKING:
    from tokenizer.protocol import Tokenizer

#: replies that keep the exact prompt they answered (the token inspector's per-message view); older
#: ones drop it, so a long conversation's memory stays flat instead of growing by a whole prompt a turn
RECORDS_KEPT = 8


class Conversation:
    """Messages, branches and system prompt of a chat with one model, with its settings."""

    def __init__(self, tokenizer: Tokenizer, template: ChatTemplate, *, backend: Backend, system_prompt: str = "",
                 sampling: SamplingParams | None = None, context_size: int,
                 enable_thinking: bool | None = None, tools: list[dict[str, Any]] | None = None,
                 tool_instructions: str = "") -> None:
        self.tokenizer = tokenizer
        #: tool schemas given to the template (None: no tools, as HF passes it)
        self.tools = tools
        self.template = template
        self.backend = backend
        self.system_prompt = system_prompt
        #: joined to the system prompt while tools are given (``tools.instructions``)
        self.tool_instructions = tool_instructions
        self.sampling = sampling if sampling is not None else SamplingParams()
        self.context_size = context_size
        self.enable_thinking = enable_thinking
        self.messages: list[ChatMessage] = []
        #: the siblings of regenerated replies and edited prompts, off the shown path (app.conversation.branches)
        self.branches = BranchTree()
        #: the last turn's prompt (ids, text, how much was reused), for tests and ``tokchat render``
        self.last_prompt: BuiltPrompt | None = None
        #: the last turn's prompt with the messages in it and those left out (the token inspector)
        self.last_record: PromptRecord | None = None
        self._builder = PromptBuilder(tokenizer, template)
        self._window = 0  # index of the first message still in the prompt
        #: what a send does when the prompt would not fit: drop | summarize | refuse (app.conversation.compaction)
        self.compact_policy = "drop"
        self._token_counts: dict[str, int] = {}  # content -> plain token count, to plan drops
        self._size_cache: tuple[Any, int] = (None, 0)  # tokens_before(): (key, size)
        #: the reply the backend's cache ends with and the prompt before it (what /continue extends)
        self._tail: tuple[ChatMessage, BuiltPrompt] | None = None

    # -- measuring ----------------------------------------------------------------------------

    @property
    def context_used(self) -> int:
        """Tokens of the conversation as it stands, rendered by the template and encoded (what
        ``tokchat render --ids --no-generation-prompt`` gives on the stored messages).

        One definition, live and reopened alike: what the engine holds after a reply (its prompt and
        ids as generated) lacks the reply's closing markup (``<|im_end|>\n``) that every later prompt
        and every reopened count has, so counting that instead made the meter jump after a reopen."""
        return self.tokens_before(len(self.messages))

    def tokens_before(self, index: int) -> int:
        """Prompt tokens of the conversation up to ``messages[index]`` (the system message and the
        turns still in the window), without a generation prompt: what an edit of that message
        keeps.  Cached, since the meter asks as the draft changes."""
        from templates import prompt_ids

        path = self._in_prompt(min(self._window, index), index)
        # a continued reply (/continue) grows in place: its text is part of the key, not only its identity
        key = (self.system_text, index, self._window, tuple((id(m), m.content, m.reasoning) for m in path[-2:]),
               len(path), self._summary_key())
        if self._size_cache[0] != key:
            try:
                rendered = self.template.render([template_message(m) for m in self._system_messages() + path],
                                                add_generation_prompt=False, enable_thinking=self.enable_thinking,
                                                tools=self.tools)
                size = len(prompt_ids(self.tokenizer, rendered)) if rendered.text else 0
            except TemplateError:
                size = 0  # a template that cannot render this (an empty chat) has sent nothing yet
            self._size_cache = (key, size)
        return self._size_cache[1]

    def draft_tokens(self, text: str) -> int:
        """Tokens ``text`` adds as a message's content (template markup not counted)."""
        return len(self.tokenizer.encode(text)) if text else 0

    def token_count(self, text: str) -> int:
        """Plain token count of a message's text (cached; how dropped turns are sized)."""
        count = self._token_counts.get(text)
        if count is None:
            count = self._token_counts[text] = len(self.tokenizer.encode(text))
        return count

    def rebuilt_record(self, reply_index: int) -> PromptRecord:
        """The prompt that answered ``messages[reply_index]``, rebuilt from the stored text.

        For turns whose ids were not recorded (a chat resumed from the
        history): the whole path before the reply, rendered and encoded as
        the next turn would send it; the reply ids are its text encoded.
        No overflow policy is applied, so the prompt may be longer than the
        context was.
        """
        from templates import prompt_ids

        path = self._system_messages() + self.messages[:reply_index]
        rendered = self.template.render([template_message(m) for m in path], add_generation_prompt=True,
                                        enable_thinking=self.enable_thinking, tools=self.tools)
        prompt = BuiltPrompt(rendered, prompt_ids(self.tokenizer, rendered), 0)
        reply = self.messages[reply_index]
        return PromptRecord(prompt, tuple(path), (), tuple(self.tokenizer.encode(reply.content)),
                            self.context_size)

    def tool_schema_spans(self, record: PromptRecord) -> list[tuple[str, int, int]]:
        """Where the tool schemas sit in ``record``'s prompt text, for the breakdown (none without tools)."""
        from app.conversation.context_breakdown import changed_span

        if not self.tools:
            return []
        messages = [template_message(m) for m in record.messages]
        plain = self.template.render(messages, add_generation_prompt=True, enable_thinking=self.enable_thinking,
                                     tools=None).text
        span = changed_span(record.prompt.text, plain)
        return [("tool schemas", *span)] if span else []

    # -- the system prompt ----------------------------------------------------------------------

    @property
    def system_text(self) -> str:
        """The system message the template gets: the system prompt, then the tool instructions
        while tools are given.  Small models that were shown a tool's result otherwise tend
        to call the tool again instead of answering (Qwen2.5-Coder does, measured)."""
        parts = (self.system_prompt, self.tool_instructions if self.tools else "")
        return "\n\n".join(p for p in parts if p)

    def _system_messages(self) -> list[ChatMessage]:
        """The system message every prompt starts with (none when ``system_text`` is empty), the summary of the
        turns compacted out of the prompt joined to it (app.conversation.compaction): at the prompt's start, so
        the turns after it extend one stable prefix, and in a place every template accepts."""
        from app.conversation.summary import active_summary, summary_block

        summary = active_summary(self.messages)
        text = "\n\n".join(p for p in (self.system_text, summary_block(summary) if summary else "") if p)
        return [ChatMessage("system", text)] if text else []

    def _summary_key(self) -> tuple[object, ...]:
        """What of the summary changes the prompt (tokens_before's cache key)."""
        from app.conversation.summary import active_summary

        summary = active_summary(self.messages)
        return (id(summary), summary.content) if summary is not None else ()

    def _in_prompt(self, start: int, end: int) -> list[ChatMessage]:
        """The messages of ``messages[:end]`` the prompt holds when it starts at ``start``: pinned ones before
        it (/pin), then the path from it; summaries are in the system message, not at their place."""
        return ([m for m in self.messages[:start] if m.pinned and m.role != "summary"]
                + [m for m in self.messages[start:end] if m.role != "summary"])

    def template_messages(self, start: int, new: Sequence[ChatMessage]) -> list[dict[str, Any]]:
        """The template's messages: the system message, the path from ``start`` (and the pinned ones before
        it), then ``new``."""
        path = self._in_prompt(start, len(self.messages))
        return [template_message(m) for m in [*self._system_messages(), *path, *new]]

    def set_system(self, text: str) -> None:
        """Change the system prompt; the next turn re-encodes the prompt in full."""
        self.system_prompt = text
        self.prompt_changed()

    def prompt_changed(self) -> None:
        """What the backend holds no longer starts the next prompt (a new system prompt, a summary edited or
        taken back): the next turn encodes its prompt afresh."""
        self._builder.forget()
        self._tail = None

    # -- the window: where the prompt starts ------------------------------------------------------

    @property
    def window_start(self) -> int:
        """The first message still in the prompt (the pinned ones before it stay; :mod:`app.conversation.fit`)."""
        return self._window

    def build_prompt(self, start: int, new: Sequence[ChatMessage]) -> BuiltPrompt:
        """The prompt for ``new`` after the path from ``start``, extending what the backend holds where it can."""
        return self._builder.build(self.template_messages(start, new), self.enable_thinking, self.tools)

    def move_window(self, start: int) -> None:
        """The prompt starts at ``messages[start]`` from now on (turns before it left it: a drop)."""
        self._window = start

    def add_summary(self, summary: ChatMessage, start: int) -> None:
        """``summary`` joins the path and stands for the turns before ``start``, which leave the prompt; the
        engine then holds the summary's prompt, not the conversation's (app.conversation.compaction)."""
        self.messages.append(summary)
        self._window = start
        self.prompt_changed()

    def put_back(self, messages: list[ChatMessage], window: int) -> None:
        """The path and window as they were before a turn that was refused (nothing was sent)."""
        self.messages, self._window = messages, window

    # -- changing the path outside a turn ---------------------------------------------------------

    def take_replies(self) -> None:
        """Take the trailing reply (the assistant message and its tool messages) off the path: what
        a regenerate, an edit and a /reply replace.  The caller keeps the path as it was to put back."""
        while self.messages and self.messages[-1].role in REPLY_ROLES:
            self.messages.pop()

    def continue_refusal(self) -> str | None:
        """Why the last reply cannot be continued (one line), or None."""
        last = self.messages[-1] if self.messages else None
        if last is None or last.role != "assistant":
            return "nothing to continue: the conversation does not end with a reply"
        if last.tool_calls:
            return "the last reply called a tool: its result answers it, not /continue"
        if last.finish_reason == "stop" and not (last.opening and last.content == last.opening):
            return ("the last reply ended on its own (stop), so there is nothing to continue; /reply TEXT "
                    "writes a start for a new reply and continues from it")
        held = self.sampling.constraint
        if held is not None and held.kind != "tool_calls" and self.backend.info.backend == "remote":
            # tokchat's engine holds the format from where the reply stopped; a server starts its grammar afresh
            return ("a server holds a reply format from the start of a reply only, so continuing this one would "
                    "break it: /format off continues it as free text, or ask again")
        return None

    def fork_at(self, index: int) -> list[ChatMessage]:
        """Keep ``messages[:index + 1]`` (a new conversation from that message on) and return them.

        The backend's cache is kept: when the kept path ends with a reply whose
        prompt and ids are known, the builder is primed with them, so the next
        turn evaluates only what is new.  Forking at a user message keeps the
        messages before it (its text is the caller's to put back in the box).
        """
        if not 0 <= index < len(self.messages):
            raise IndexError(f"no message {index + 1}: the conversation has {len(self.messages)}")
        keep = index + (0 if self.messages[index].role == "user" else 1)
        self.messages = self.messages[:keep]
        self.branches.clear()
        self._resume_at_end()
        return list(self.messages)

    def switch_branch(self, at: int, index: int) -> None:
        """Show sibling ``index`` (0-based) of the fork at path position ``at``; the chat goes on from it.

        The prompt builder is primed with that reply's own prompt and reply
        ids, so the next prompt extends them exactly and the backend reuses
        its cache as far as the two branches share a prefix.
        """
        self.messages = self.branches.switch(self.messages, at, index)
        self._resume_at_end()

    def _resume_at_end(self) -> None:
        """The path changed under the engine (a fork, a branch switch): when it ends with a reply whose
        prompt is recorded, the next prompt extends that prompt and the reply's ids; else (a branch
        loaded from the history, or one that ends in a user message) it is encoded afresh."""
        last = self.messages[-1] if self.messages else None
        record = last.record if last is not None and last.role == "assistant" else None
        if record is None:
            self._builder.forget()
            self._window = 0
            self._tail = None
            return
        self._builder.remember(record.prompt, record.reply_ids)
        self._window = min(len(record.dropped), len(self.messages))
        self.last_record, self.last_prompt = record, record.prompt
        same = last is not None and last.reply_ids == tuple(record.reply_ids)
        self._tail = (last, record.prompt) if last is not None and same else None

    def reset(self) -> None:
        """Start a new conversation with the same model, template and system prompt."""
        self.messages = []
        self.branches.clear()
        self._window = 0
        self._builder.forget()
        self._tail = None

    def load_messages(self, messages: Sequence[ChatMessage], branches: BranchTree | None = None) -> None:
        """Continue a stored conversation (``branches``: its other branches, positions in ``messages``);
        a leading system message becomes the system prompt."""
        messages = list(messages)
        if messages and messages[0].role == "system":
            self.system_prompt = messages.pop(0).content
        self.messages = messages
        self.branches = branches if branches is not None else BranchTree()
        # ids sent by another session (another template or tokenizer) say nothing about this one
        for message in [*messages, *self.branches.all_messages()]:
            message.record = None
        from app.conversation.summary import summary_first, summary_start

        self.messages = summary_first(self.messages)
        self._window = summary_start(self.messages)  # a stored summary: its turns stay out of the prompt
        self._builder.forget()
        self._tail = None

    # -- a turn's reply ----------------------------------------------------------------------------

    def commit_reply(self, message: ChatMessage, head: BuiltPrompt, reply_ids: Sequence[int]) -> None:
        """A turn's reply joins the conversation (app.conversation.turn commits here, once per reply):
        appended unless it is already the path's (a continuation grown in place), with the record of the
        prompt it answered; the builder remembers its ids as generated, so the next prompt extends them."""
        if not any(m is message for m in self.messages):
            self.messages.append(message)
        message.record = self.last_record = self._record(head, message, reply_ids)
        self._forget_old_records()
        self._builder.remember(head, reply_ids)
        self._tail = (message, head)

    def grow_reply(self, message: ChatMessage, content: str, reasoning: str, stats: TurnStats, finish_reason: str,
                   reply_ids: tuple[int, ...]) -> None:
        """A continued reply (/continue) grows in place by ``content`` and ``reasoning``; ``stats`` hold both
        parts.  :meth:`commit_reply` then records it."""
        message.content += content
        message.reasoning += reasoning
        message.stats, message.finish_reason, message.reply_ids = stats, finish_reason, reply_ids

    def replace_reply(self, message: ChatMessage, content: str, tool_calls: list[dict[str, Any]] | None) -> None:
        """Rewrite a committed reply the HF way after its tool calls were parsed (app.tools.loop): its text
        without the call markup, and the calls as ``tool_calls`` for the template to render again.  Its ids as
        generated stay what the backend holds."""
        message.content = content
        message.tool_calls = tool_calls

    def add_tool_results(self, results: Sequence[ChatMessage]) -> None:
        """Tool results join the path without a step that answers them (the user stopped the turn: the
        model sees them next turn)."""
        self.messages.extend(results)

    def set_reply_stats(self, message: ChatMessage, stats: TurnStats) -> None:
        """A reply's stats replaced by the whole turn's (a tool turn's steps summed, app.tools.loop)."""
        message.stats = stats

    def dropped_turns(self) -> int:
        """User turns now out of the prompt (a turn's ``dropped_turns``)."""
        return sum(1 for m in self.messages[: self._window] if m.role == "user")

    def cache_cut(self, prompt: BuiltPrompt, replaced: ChatMessage | None = None) -> int:
        """Ids of what the backend holds that ``prompt`` does not start with (its cache loses them).

        ``replaced``: a reply this turn replaces on purpose (it stays a sibling); when the cache ends
        with it, its ids are not counted: only earlier turns rewritten (a template that drops old
        reasoning) are a cut worth showing."""
        from backends.base import common_prefix_length

        held = self._builder.held_ids
        tail = self._tail
        if replaced is not None and tail is not None and tail[0] is replaced:
            held = held[:len(tail[1].ids)]
        return len(held) - common_prefix_length(held, prompt.ids) if held else 0

    # -- what the history knows of the path ------------------------------------------------------

    def mark_stored(self, message: ChatMessage, row_id: int | None) -> None:
        """``message`` is row ``row_id`` of the history (None: not stored, or about to be saved anew): what a
        branch switch, a rewind, a fork and a /continue of it are stored by.  The recorder returns row ids
        (app.history.recorder); the front end that drives both says which message each one is."""
        message.store_id = row_id

    def forget_reply_ids(self) -> None:
        """The stored replies' ids are of another vocabulary (a conversation written by another model,
        app.history.model_identity): they would mean other text here, so every reply, on the path and
        off it, is encoded again from its text."""
        for message in [*self.messages, *self.branches.all_messages()]:
            message.reply_ids = None

    # -- what a turn needs of the path ------------------------------------------------------------

    def _reply_context(self, index: int) -> tuple[BuiltPrompt, list[int]]:
        """The prompt before ``messages[index]`` (a reply) and the reply's ids: as generated when the
        backend's cache ends with it or its ids were stored by this model, else its text encoded."""
        reply = self.messages[index]
        if self._tail is not None and self._tail[0] is reply and reply.reply_ids is not None:
            return self._tail[1], list(reply.reply_ids)
        messages = [*self._system_messages(), *self._in_prompt(min(self._window, index), index)]
        head = self._builder.build([template_message(m) for m in messages], self.enable_thinking, self.tools)
        if reply.reply_ids is not None and reply.stats is not None and reply.stats.model == self.backend.info.model_name:
            return head, list(reply.reply_ids)
        text = reply.content
        if reply.reasoning:  # the think block as the model writes it, opened by the prompt or by the reply
            opened = head.text.rstrip().endswith("<think>")
            text = f"{'' if opened else '<think>'}\n{reply.reasoning}\n</think>\n\n{reply.content}"
        return head, self.tokenizer.encode(text)

    def _record(self, head: BuiltPrompt, reply: ChatMessage, reply_ids: Sequence[int]) -> PromptRecord:
        """What answered ``reply`` (on the path): ``head``, the messages before the reply in the prompt and
        those left out, and all the reply's ids."""
        at = next(i for i, m in enumerate(self.messages) if m is reply)
        return PromptRecord(head, tuple(self._system_messages() + self._in_prompt(self._window, at)),
                            tuple(self.messages[: self._window]), tuple(reply_ids), self.context_size)

    def _forget_old_records(self) -> None:
        """Keep the sent prompt on the newest :data:`RECORDS_KEPT` replies only (see there)."""
        kept = 0
        for message in reversed(self.messages):
            if message.record is None:
                continue
            kept += 1
            if kept > RECORDS_KEPT:
                message.record = None
