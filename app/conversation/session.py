"""The conversation manager: messages in, typed reply events and exact accounting out.

No UI code lives here; the TUI and the headless mode both drive a
:class:`ChatSession`.  One turn is a stack of small stages:

    backend.generate(ids)  ->  tokenizer.stream_decoder()  ->  ThinkFilter  ->  ReplyEvent

Prompt ids come from :class:`templates.builder.PromptBuilder`, which keeps
turn N's prompt an exact extension of turn N-1's prompt plus the reply ids
as generated, so the backend re-evaluates only the new part.

Context overflow: when ``prompt + max_tokens`` does not fit, the oldest
turns leave the prompt (never the system prompt, never the message being
sent) and a ``notice`` event says so; a message that does not fit even alone
is refused with an ``error`` event and nothing is changed.  A reply ends on
any end-of-generation id (``stop``), on ``max_tokens`` (``length``), on
:meth:`ChatSession.cancel` (``cancelled``) or on a backend failure
(``error``); in every case the partial reply is kept with its finish reason.

Tools: ``tools`` (JSON schemas) go to the template, and :meth:`ChatSession.continue_turn`
answers tool results; finding calls in a reply and running them is :mod:`app.tool_loop`'s job.

Not handled here: persistence (see :mod:`app.history.recorder`).
"""
from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterator, Sequence

from backends.base import Backend, BackendError, GenerationStats, SamplingParams
from templates import ChatTemplate, TemplateError
from app.conversation.branches import BranchTree
from app.conversation.context_breakdown import PromptRecord
from templates.builder import BuiltPrompt, PromptBuilder
from tokenizer.think import ThinkFilter

#: end-of-turn markers that stop generation when the vocabulary has them as control tokens
END_MARKERS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<｜end▁of▁sentence｜>", "<|endoftext|>")
#: the least room a reply must have, or the message is refused
MIN_REPLY_TOKENS = 32
#: replies that keep the exact prompt they answered (the token inspector's per-message view); older
#: ones drop it, so a long conversation's memory stays flat instead of growing by a whole prompt a turn
RECORDS_KEPT = 8


@dataclass
class TurnStats:
    """Exact accounting for one turn."""

    new_prompt_tokens: int = 0  # prompt ids the backend had to evaluate (the rest came from its cache)
    prompt_tokens: int = 0
    completion_tokens: int = 0  # generated ids, the stop id included
    #: of completion_tokens, those the model generated inside the think block (its own tags included)
    reasoning_tokens: int = 0
    ttft_s: float = 0.0  # from send() to the first generated id
    tokens_per_s: float = 0.0  # generation speed after the first id
    #: prompt processing: new prompt ids evaluated per second of the time to the first id (0 when none)
    prompt_tokens_per_s: float = 0.0
    context_used: int = 0  # prompt + completion: what the backend's context holds now
    context_limit: int = 0
    finish_reason: str = "stop"  # stop | length | cancelled | error
    dropped_turns: int = 0  # earlier turns currently left out of the prompt to fit the context
    backend: str = ""
    device: str = ""
    #: layers on the GPU out of those llama.cpp can offload ("29/29"; "" on the CPU), and the VRAM they take
    gpu_layers: str = ""
    vram_mib: int = 0
    tool_call_tokens: int = 0  # of completion_tokens, those inside tool-call markup
    tool_result_tokens: int = 0  # tokens of the tool results sent back to the model
    model_steps: int = 1  # generations in this turn (1 + one per round of tool results)
    #: False when a remote server's own count disagreed with the ids received (see backends.remote)
    verified: bool = True
    #: what produced this reply: the model's name, the chat template and the sampling settings
    #: (a chat goes on across /model, so each reply says which one answered)
    model: str = ""
    template: str = ""
    sampling: dict | None = None
    #: ids of the reply's start the user wrote (/reply): counted in prompt_tokens, not completion_tokens
    opening_tokens: int = 0
    #: ids the engine held from the last turn that this prompt does not start with, so they were
    #: dropped from its cache (a template that leaves earlier reasoning out: Qwen3, DeepSeek R1)
    cache_cut_tokens: int = 0
    #: tokchat closed the think block itself after the reasoning budget (--reasoning-budget)
    reasoning_cut: bool = False
    #: of completion_tokens, the ids tokchat appended to close the think block (``\n</think>\n\n``) when the
    #: budget was spent: not the model's reasoning, so not in reasoning_tokens (0 when nothing was cut)
    forced_close_tokens: int = 0
    #: speculative decoding (backends.speculative): ids the drafter proposed and how many the model kept;
    #: the kept ones are counted in completion_tokens like every other id (0 and 0: no speculation)
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    #: a continued reply (/continue): each part's own stats as a dict, first to last; the counts above
    #: are their sums (prompt_tokens, new_prompt_tokens and ttft_s are the first part's: see merge_stats;
    #: the rest the last part's)
    parts: list | None = None


@dataclass
class ChatMessage:
    """One message; an assistant reply carries its reasoning, stats and finish reason.

    Tool calling uses Hugging Face's message convention: an assistant reply
    carries ``tool_calls`` (``[{"type": "function", "id": ..., "function":
    {"name": ..., "arguments": {...}}}]``), a ``tool`` message the
    ``tool_call_id`` and tool ``name`` it answers.
    """

    role: str
    content: str
    reasoning: str = ""
    stats: TurnStats | None = None
    finish_reason: str | None = None
    #: for a reply: the prompt it answered, as sent (see app.conversation.context_breakdown); None when loaded
    record: PromptRecord | None = field(default=None, compare=False, repr=False)
    tool_calls: list[dict] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    #: the message's row in the history database, once stored (how a branch switch is saved)
    store_id: int | None = field(default=None, compare=False, repr=False)
    #: a reply's start written by the user (/reply); ``content`` begins with it
    opening: str = ""
    #: a reply's ids as generated (its opening's ids first): what /continue resumes from
    reply_ids: tuple[int, ...] | None = field(default=None, compare=False, repr=False)


@dataclass
class ReplyEvent:
    """What a turn yields: ``notice``, ``reasoning``, ``content``, ``error``, then ``done`` last.

    The tool loop (:mod:`app.tools.loop`) adds ``tool_call_delta`` (call text as it is
    generated), ``tool_call`` and ``tool_result`` (``data``: the call / its outcome).
    """

    kind: str
    text: str = ""
    stats: TurnStats | None = None
    data: Any = None


@dataclass
class _Turn:
    """Mutable state of the reply being generated."""

    started: float
    reply_ids: list[int] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    reasoning_tokens: int = 0
    forced_close_tokens: int = 0  # ids appended to close the think block (the budget was spent)
    first_at: float | None = None
    last_at: float | None = None
    finish: str = ""  # "" until decided; still "" at the end means cancelled
    ended: bool = False  # the stream ran to its end (stop id, length, or the backend finished)
    flushed: bool = False
    decoder: Any = None
    think: ThinkFilter | None = None
    verified: bool = True  # every generation of this turn matched the backend's own count
    prior_reasoning: int = 0  # reasoning ids of the reply's earlier part (a continued reply), for the budget
    evaluated: int = 0  # prompt ids evaluated by earlier generations of this turn (after a budget cut)
    drafted: int = 0  # speculative drafts of earlier generations of this turn (after a budget cut)
    accepted: int = 0
    reasoning_cut: bool = False
    stats: GenerationStats | None = None  # the engine's facts about this turn's latest generation


class ChatSession:
    """A conversation with one model: system prompt, messages, sampling and context size."""

    def __init__(self, tokenizer: Any, template: ChatTemplate, *, backend: Backend, system_prompt: str = "",
                 sampling: SamplingParams | None = None, context_size: int,
                 enable_thinking: bool | None = None, tools: list[dict] | None = None) -> None:
        self.tokenizer = tokenizer
        #: tool schemas given to the template (None: no tools, as HF passes it)
        self.tools = tools
        self.template = template
        self.backend = backend
        self.system_prompt = system_prompt
        #: joined to the system prompt while tools are given (``tools.instructions``)
        self.tool_instructions = ""
        self.sampling = sampling if sampling is not None else SamplingParams()
        self.context_size = context_size
        self.enable_thinking = enable_thinking
        #: reasoning ids after which tokchat closes the think block itself (None: no limit)
        self.reasoning_budget: int | None = None
        self.messages: list[ChatMessage] = []
        #: the siblings of regenerated replies and edited prompts, off the shown path (app.conversation.branches)
        self.branches = BranchTree()
        self.stop_ids = frozenset(tokenizer.eog_ids) | _marker_ids(tokenizer)
        #: the last turn's prompt (ids, text, how much was reused), for tests and ``tokchat render``
        self.last_prompt: BuiltPrompt | None = None
        #: the last turn's prompt with the messages in it and those left out (the token inspector)
        self.last_record: PromptRecord | None = None
        #: the engine's facts about the generation running now, or the last one (the TUI's progress line)
        self.generation_stats: GenerationStats | None = None
        self._builder = PromptBuilder(tokenizer, template)
        self._window = 0  # index of the first message still in the prompt
        self._cancel = threading.Event()
        self._token_counts: dict[str, int] = {}  # content -> plain token count, to plan drops
        self._size_cache: tuple[Any, int] = (None, 0)  # tokens_before(): (key, size)
        #: the reply the backend's cache ends with and the prompt before it (what /continue extends)
        self._tail: tuple[ChatMessage, BuiltPrompt] | None = None

    # -- public API -------------------------------------------------------------------------

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

        path = self.messages[min(self._window, index):index]
        # a continued reply (/continue) grows in place: its text is part of the key, not only its identity
        key = (self.system_text, index, self._window, tuple((id(m), m.content, m.reasoning) for m in path[-2:]),
               len(path))
        if self._size_cache[0] != key:
            try:
                rendered = self.template.render([_template_message(m) for m in self._system_messages() + path],
                                                add_generation_prompt=False, enable_thinking=self.enable_thinking,
                                                tools=self.tools)
                size = len(prompt_ids(self.tokenizer, rendered)) if rendered.text else 0
            except TemplateError:
                size = 0  # a template that cannot render this (an empty chat) has sent nothing yet
            self._size_cache = (key, size)
        return self._size_cache[1]

    def refusal(self, text: str) -> str | None:
        """Why a message of ``text`` cannot be sent even with every earlier turn left out, or None.

        The same rule as the turn's own (:meth:`_fit`), checked before anything changes, so the
        UI can refuse it and keep the draft."""
        from templates import prompt_ids

        need = min(self.sampling.max_tokens, self.context_size, MIN_REPLY_TOKENS)
        if self.draft_tokens(text) + need <= self.context_size // 2:
            return None  # far from the limit: no need to render
        try:
            rendered = self.template.render(self._template_messages(len(self.messages), [ChatMessage("user", text)]),
                                            add_generation_prompt=True, enable_thinking=self.enable_thinking,
                                            tools=self.tools)
        except TemplateError as exc:
            return str(exc)
        size = len(prompt_ids(self.tokenizer, rendered))
        if self.context_size - size >= need:
            return None
        return (f"message too long: {size} tokens with the system prompt, and the context holds "
                f"{self.context_size}; shorten it, raise --ctx, or save it to a file and /attach it "
                f"(an attachment is cut to its token budget)")

    def draft_tokens(self, text: str) -> int:
        """Tokens ``text`` adds as a message's content (template markup not counted)."""
        return len(self.tokenizer.encode(text)) if text else 0

    def send(self, user_text: str) -> Iterator[ReplyEvent]:
        """Send a user message and stream the reply; the assistant message is appended at the end."""
        yield from self._turn([ChatMessage("user", user_text)], list(self.messages))

    def continue_turn(self, results: Sequence[ChatMessage]) -> Iterator[ReplyEvent]:
        """Send tool results (``tool`` messages) after the last reply and stream the model's next step."""
        yield from self._turn(list(results), list(self.messages))

    def regenerate(self) -> Iterator[ReplyEvent]:
        """Answer the last user message again; the earlier reply stays as a sibling (``branches``)."""
        before = list(self.messages)
        while self.messages and self.messages[-1].role in _REPLY_ROLES:
            self.messages.pop()
        if not self.messages:
            self.messages = before
            yield ReplyEvent("error", "nothing to regenerate: the conversation has no user message yet")
            yield ReplyEvent("done", stats=self._stats(_Turn(started=time.monotonic()), None, "error"))
            return
        at = len(self.messages)
        self.branches.fork(before, at)
        yield from self._turn([self.messages.pop()], before)
        if self.messages is before:  # refused: no new sibling
            self.branches.unfork(before, at)

    def edit_last_user(self, text: str) -> Iterator[ReplyEvent]:
        """Send ``text`` in place of the last user message; the old one and its reply stay as a sibling."""
        before = list(self.messages)
        while self.messages and self.messages[-1].role in _REPLY_ROLES:
            self.messages.pop()
        if self.messages and self.messages[-1].role == "user":
            self.messages.pop()
        at = len(self.messages)
        self.branches.fork(before, at)
        yield from self._turn([ChatMessage("user", text)], before)
        if self.messages is before:
            self.branches.unfork(before, at)

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
        return None

    def continue_reply(self) -> Iterator[ReplyEvent]:
        """Generate more of the last reply (cut by ``max_tokens``, stopped, or written by the user).

        The prompt is the reply's own prompt plus its ids as generated, so the
        backend's cache holds all of it (only the last id is evaluated again)
        and, greedy, a reply continued from N ids is the reply generated in one
        go.  The new text joins the same message; its stats keep each part.
        """
        why = self.continue_refusal()
        if why is not None:
            yield from self._refused(why)
            return
        reply = self.messages[-1]
        head, prior = self._reply_context(len(self.messages) - 1)
        yield from self._extend(head, prior, reply, list(self.messages))

    def reply_with(self, opening: str) -> Iterator[ReplyEvent]:
        """Answer the last user message with a reply that starts with ``opening`` (the user's words);
        the model continues from it.  An earlier reply to it stays as a sibling (``branches``).

        The opening's ids are appended to the prompt as they encode on their own (no
        re-tokenization across the generation prompt); they count as prompt, not completion.
        """
        if not opening:
            yield from self._refused("/reply needs the start of the reply: /reply TEXT")
            return
        before = list(self.messages)
        while self.messages and self.messages[-1].role in _REPLY_ROLES:
            self.messages.pop()
        if not self.messages or self.messages[-1].role != "user":
            self.messages = before
            yield from self._refused("nothing to reply to: the conversation has no user message yet")
            return
        at = len(self.messages)
        if at < len(before):
            self.branches.fork(before, at)
        try:
            head, _ = self._fit([])
        except TemplateError as exc:
            head = None
            why = str(exc)
        else:
            why = "no room in the context for a reply"
        if head is None:
            if at < len(before):
                self.branches.unfork(before, at)
            self.messages = before
            yield from self._refused(why)
            return
        opening_ids = self.tokenizer.encode(opening)
        yield from self._extend(head, opening_ids, None, before, opening=opening)
        if self.messages is before and at < len(before):
            self.branches.unfork(before, at)

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
        last = self.messages[-1] if self.messages else None
        record = last.record if last is not None and last.role == "assistant" else None
        if record is not None:
            self._builder.remember(record.prompt, record.reply_ids)
            self._window = min(len(record.dropped), len(self.messages))
            self.last_record, self.last_prompt = record, record.prompt
            self._tail = (last, record.prompt) if last.reply_ids == tuple(record.reply_ids) else None
        else:
            self._builder.forget()
            self._window = 0
            self._tail = None
        return list(self.messages)

    def _refused(self, why: str) -> Iterator[ReplyEvent]:
        yield ReplyEvent("error", why)
        yield ReplyEvent("done", stats=self._stats(_Turn(started=time.monotonic()), None, "error"))

    def _reply_context(self, index: int) -> tuple[BuiltPrompt, list[int]]:
        """The prompt before ``messages[index]`` (a reply) and the reply's ids: as generated when the
        backend's cache ends with it or its ids were stored by this model, else its text encoded."""
        reply = self.messages[index]
        if self._tail is not None and self._tail[0] is reply and reply.reply_ids is not None:
            return self._tail[1], list(reply.reply_ids)
        messages = [*self._system_messages(), *self.messages[min(self._window, index):index]]
        head = self._builder.build([_template_message(m) for m in messages], self.enable_thinking, self.tools)
        if reply.reply_ids is not None and reply.stats is not None and reply.stats.model == self.backend.info.model_name:
            return head, list(reply.reply_ids)
        text = reply.content
        if reply.reasoning:  # the think block as the model writes it, opened by the prompt or by the reply
            opened = head.text.rstrip().endswith("<think>")
            text = f"{'' if opened else '<think>'}\n{reply.reasoning}\n</think>\n\n{reply.content}"
        return head, self.tokenizer.encode(text)

    def _extend(self, head: BuiltPrompt, prior_ids: list[int], prior: ChatMessage | None,
                before: list[ChatMessage], opening: str = "") -> Iterator[ReplyEvent]:
        """Generate a reply after ``head`` that already holds ``prior_ids`` (a reply to continue, or the
        user's opening); ``prior`` is the message the new text joins (None: a new reply)."""
        turn = _Turn(started=time.monotonic())
        self._cancel.clear()
        ids = list(head.ids) + list(prior_ids)
        if self.context_size - len(ids) < 1:
            self.messages = before
            yield from self._refused(f"the context is full ({len(ids)} of {self.context_size} tokens): "
                                     "nothing can be added to this reply; raise --ctx")
            return
        turn.decoder = self.tokenizer.stream_decoder()
        turn.think = ThinkFilter.for_prompt(head.text)
        primed = "".join(turn.decoder.feed(t) for t in prior_ids)
        events = turn.think.feed(primed)
        if prior is None:  # the opening is this reply's first text (not yielded: the caller shows it)
            for event in events:
                (turn.reasoning if event.kind == "reasoning" else turn.content).append(event.text)
        else:
            turn.prior_reasoning = prior.stats.reasoning_tokens if prior.stats else 0
        # a reply written over the last one (/reply) drops that one on purpose, as a regenerate does
        cut = self._cache_cut(head, replaced=before[-1] if len(before) > len(self.messages) else None) \
            if prior is None else 0
        rendered = replace(head.rendered, text=head.text + self.tokenizer.decode(prior_ids))
        prompt = BuiltPrompt(rendered, ids, head.reused)
        self.last_prompt = prompt
        shown_opening = "".join(turn.content) if prior is None else ""

        def commit() -> TurnStats:
            stats = self._stats(turn, prompt, turn.finish)
            stats.cache_cut_tokens = cut
            all_ids = tuple(prior_ids) + tuple(turn.reply_ids)
            if prior is None:
                stats.opening_tokens = len(prior_ids)
                message = ChatMessage("assistant", "".join(turn.content), "".join(turn.reasoning), stats,
                                      turn.finish, opening=shown_opening or opening, reply_ids=all_ids)
                self.messages.append(message)
            else:
                message = prior
                stats = merge_stats(prior.stats, stats) if prior.stats is not None else stats
                message.content += "".join(turn.content)
                message.reasoning += "".join(turn.reasoning)
                message.stats, message.finish_reason, message.reply_ids = stats, turn.finish, all_ids
            message.record = self.last_record = self._record_for(head, message, all_ids)
            self._forget_old_records()
            self._builder.remember(head, all_ids)
            self._tail = (message, head)
            return stats

        yield from self._stream(prompt, turn, commit)

    def _record_for(self, head: BuiltPrompt, reply: ChatMessage, reply_ids: Sequence[int]) -> PromptRecord:
        """The record of a reply generated after ``head``: the messages before it, and all its ids."""
        at = next(i for i, m in enumerate(self.messages) if m is reply)
        return PromptRecord(head, tuple(self._system_messages() + self.messages[self._window:at]),
                            tuple(self.messages[: self._window]), tuple(reply_ids), self.context_size)

    def switch_branch(self, at: int, index: int) -> None:
        """Show sibling ``index`` (0-based) of the fork at path position ``at``; the chat goes on from it.

        The prompt builder is primed with that reply's own prompt and reply
        ids, so the next prompt extends them exactly and the backend reuses
        its cache as far as the two branches share a prefix.
        """
        self.messages = self.branches.switch(self.messages, at, index)
        last = next((m for m in reversed(self.messages) if m.role == "assistant"), None)
        record = last.record if last is not None and last is self.messages[-1] else None
        if record is not None:
            self._builder.remember(record.prompt, record.reply_ids)
            self._window = len(record.dropped)
            self.last_record, self.last_prompt = record, record.prompt
            self._tail = (last, record.prompt) if last.reply_ids == tuple(record.reply_ids) else None
        else:  # a branch loaded from the history, or one that ends in a user message
            self._builder.forget()
            self._window = 0
            self._tail = None

    def cancel(self) -> None:
        """Stop the reply being generated (any thread); the partial reply is kept as cancelled."""
        self._cancel.set()
        self.backend.cancel()

    def reset(self) -> None:
        """Start a new conversation with the same model, template and system prompt."""
        self.messages = []
        self.branches.clear()
        self._window = 0
        self._builder.forget()
        self._tail = None

    @property
    def system_text(self) -> str:
        """The system message the template gets: the system prompt, then the tool instructions
        while tools are given.  Small models that were shown a tool's result otherwise tend
        to call the tool again instead of answering (Qwen2.5-Coder does, measured)."""
        parts = (self.system_prompt, self.tool_instructions if self.tools else "")
        return "\n\n".join(p for p in parts if p)

    def _system_messages(self) -> list[ChatMessage]:
        """The system message every prompt starts with (none when ``system_text`` is empty)."""
        return [ChatMessage("system", self.system_text)] if self.system_text else []

    def set_system(self, text: str) -> None:
        """Change the system prompt; the next turn re-encodes the prompt in full."""
        self.system_prompt = text
        self._builder.forget()  # what the backend holds no longer starts the next prompt
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
        self._window = 0
        self._builder.forget()
        self._tail = None

    # -- one turn ---------------------------------------------------------------------------

    def _turn(self, new: list[ChatMessage], before: list[ChatMessage]) -> Iterator[ReplyEvent]:
        """One turn after ``new`` (the user's message, or tool results); on a refusal the
        messages are put back as they were (``before``)."""
        turn = _Turn(started=time.monotonic())
        self._cancel.clear()
        try:
            prompt, notice = self._fit(new)
        except TemplateError as exc:
            prompt, notice = None, str(exc)
        if prompt is None:
            self.messages = before
            yield ReplyEvent("error", notice or "")
            yield ReplyEvent("done", stats=self._stats(turn, None, "error"))
            return
        if notice:
            yield ReplyEvent("notice", notice)
        # what the cache loses when the path before ``new`` is the one generated (a regenerate or an
        # edit drops the old reply on purpose: not counted)
        cut = self._cache_cut(prompt) if len(self.messages) == len(before) else 0
        self.messages.extend(new)
        self.last_prompt = prompt
        turn.decoder = self.tokenizer.stream_decoder()
        turn.think = ThinkFilter.for_prompt(prompt.text)
        yield from self._stream(prompt, turn, lambda: self._commit(prompt, turn, cache_cut=cut))

    def _cache_cut(self, prompt: BuiltPrompt, replaced: ChatMessage | None = None) -> int:
        """Ids of what the backend holds that ``prompt`` does not start with (its cache loses them).

        ``replaced``: a reply this turn replaces on purpose (it stays a sibling); when the cache ends
        with it, its ids are not counted: only earlier turns rewritten (a template that drops old
        reasoning) are a cut worth showing."""
        held = self._builder.held_ids
        if replaced is not None and self._tail is not None and self._tail[0] is replaced:
            held = held[:len(self._tail[1].ids)]
        return len(held) - _common_prefix(held, prompt.ids) if held else 0

    def _stream(self, prompt: BuiltPrompt, turn: _Turn, commit: Any) -> Iterator[ReplyEvent]:
        """Generate after ``prompt.ids`` (the decoder and think filter of ``turn`` already set), then
        ``commit()`` the reply whatever happens, and yield ``done`` with its stats."""
        room = self.context_size - len(prompt.ids)
        sampling = replace(self.sampling, max_tokens=max(1, min(self.sampling.max_tokens, room)))
        stream = self._generate(prompt, sampling, turn)
        error: str | None = None
        try:
            yield from stream
        except BackendError as exc:
            turn.finish, error = "error", str(exc)
        except Exception:
            turn.finish = "error"  # a bug: the partial reply is kept, the traceback goes on up
            raise
        finally:
            stream.close()
            if not turn.ended and turn.finish != "error":
                turn.finish = "cancelled"  # the caller stopped reading, or cancel() was called
            self._flush(turn)  # text still held back is kept even when it cannot be yielded now
            stats = commit()
        if error is not None:
            yield ReplyEvent("error", error)
        yield ReplyEvent("done", stats=stats)

    def _generate(self, prompt: BuiltPrompt, sampling: SamplingParams, turn: _Turn) -> Iterator[ReplyEvent]:
        """backend ids -> stream decoder -> think filter -> events, with accounting on the way.

        Reasoning budget: once the reply has ``reasoning_budget`` reasoning ids, the generation
        stops, the model's end-of-thinking ids (:meth:`think_close_ids`) join the reply as if
        generated, and a new generation goes on from there (the engine's cache holds all of it,
        so only those ids are evaluated), as llama.cpp's server does."""
        budget = self.reasoning_budget
        if budget is not None and turn.think.in_reasoning and turn.prior_reasoning >= budget:
            yield from self._close_think(turn)  # a budget of 0, or one spent before a /continue
            budget = None
        while True:
            ids = self.backend.generate(list(prompt.ids) + turn.reply_ids,
                                        replace(sampling, max_tokens=sampling.max_tokens - len(turn.reply_ids)),
                                        self.stop_ids)
            turn.stats = self.generation_stats = ids.stats
            noticed = ""  # an engine found dead and started again for this reply: said once, when it is known
            over_budget = False
            try:
                if ids.stats.notice:
                    noticed = ids.stats.notice
                    yield ReplyEvent("notice", noticed)
                for token in ids:
                    if ids.stats.notice != noticed:
                        noticed = ids.stats.notice
                        yield ReplyEvent("notice", noticed)
                    now = time.monotonic()
                    turn.first_at = turn.first_at or now
                    turn.last_at = now
                    turn.reply_ids.append(token)
                    if token in self.stop_ids:
                        turn.finish = "stop"
                        break
                    before = turn.think.in_reasoning
                    events = turn.think.feed(turn.decoder.feed(token))
                    if before or turn.think.in_reasoning:
                        turn.reasoning_tokens += 1
                    yield from self._emit(events, turn)
                    if self._cancel.is_set():
                        break
                    if (budget is not None and turn.think.in_reasoning
                            and turn.reasoning_tokens + turn.prior_reasoning >= budget
                            and len(turn.reply_ids) < sampling.max_tokens):
                        over_budget = True
                        break
                else:
                    if not self._cancel.is_set():
                        turn.finish = "length" if len(turn.reply_ids) >= sampling.max_tokens else "stop"
            finally:
                ids.close()
                # a remote backend checks the ids it passed on against the server's count (backends.remote)
                turn.verified = turn.verified and ids.stats.verified
            if not over_budget:
                break
            turn.evaluated += ids.stats.prompt_evaluated
            turn.drafted, turn.accepted = _draft_counts(ids.stats, turn)
            yield from self._close_think(turn)
            budget = None  # one cut per reply
        if not turn.finish:
            return  # cancelled: the finally in _turn marks it and keeps the held-back text
        turn.ended = True
        yield from self._emit(self._flush(turn), turn, record=False)

    def _close_think(self, turn: _Turn) -> Iterator[ReplyEvent]:
        """Append the end-of-thinking ids to the reply as if generated (the reasoning budget is spent)."""
        turn.reasoning_cut = True
        for token in self.think_close_ids(turn.think.close_tag):
            turn.reply_ids.append(token)
            turn.forced_close_tokens += 1  # tokchat's, not the model's: counted apart from reasoning_tokens
            yield from self._emit(turn.think.feed(turn.decoder.feed(token)), turn)

    def think_close_ids(self, close_tag: str = "</think>") -> list[int]:
        """The ids that end a think block: ``\\n</think>\\n\\n`` as the model's own tokenizer encodes it
        (``</think>`` is one id where the vocabulary has it), the way Qwen3 and R1 close theirs."""
        return self.tokenizer.encode(f"\n{close_tag}\n\n", special=True)

    @staticmethod
    def _emit(events: list, turn: _Turn, record: bool = True) -> Iterator[ReplyEvent]:
        for event in events:
            if record:
                (turn.reasoning if event.kind == "reasoning" else turn.content).append(event.text)
            yield ReplyEvent(event.kind, event.text)

    @staticmethod
    def _flush(turn: _Turn) -> list:
        """Events for the text the decoder and think filter still hold (once), recorded in ``turn``."""
        if turn.flushed or turn.think is None:
            return []
        turn.flushed = True
        tail = turn.decoder.finalize()
        events = (turn.think.feed(tail) if tail else []) + turn.think.finalize()
        for event in events:
            (turn.reasoning if event.kind == "reasoning" else turn.content).append(event.text)
        return events

    def _commit(self, prompt: BuiltPrompt, turn: _Turn, cache_cut: int = 0) -> TurnStats:
        stats = self._stats(turn, prompt, turn.finish)
        stats.cache_cut_tokens = cache_cut
        self.last_record = self._record(prompt, turn.reply_ids)
        message = ChatMessage("assistant", "".join(turn.content), "".join(turn.reasoning),
                              stats, turn.finish, self.last_record, reply_ids=tuple(turn.reply_ids))
        self.messages.append(message)
        self._forget_old_records()
        self._builder.remember(prompt, turn.reply_ids)
        self._tail = (message, prompt)
        return stats

    def _forget_old_records(self) -> None:
        """Keep the sent prompt on the newest :data:`RECORDS_KEPT` replies only (see there)."""
        kept = 0
        for message in reversed(self.messages):
            if message.record is None:
                continue
            kept += 1
            if kept > RECORDS_KEPT:
                message.record = None

    def _stats(self, turn: _Turn, prompt: BuiltPrompt | None, finish: str) -> TurnStats:
        info = self.backend.info
        n_prompt = len(prompt.ids) if prompt else 0
        n_reply = len(turn.reply_ids)
        speed = 0.0
        if n_reply > 1 and turn.first_at is not None and turn.last_at and turn.last_at > turn.first_at:
            speed = (n_reply - 1) / (turn.last_at - turn.first_at)
        if n_reply:
            evaluated = (turn.stats.prompt_evaluated if turn.stats else 0) + turn.evaluated
        else:
            evaluated = self._evaluated_unanswered(turn, prompt, finish)
        ttft = (turn.first_at - turn.started) if turn.first_at else 0.0
        drafted, accepted = _draft_counts(turn.stats, turn) if n_reply else (0, 0)
        return TurnStats(
            new_prompt_tokens=evaluated, prompt_tokens=n_prompt, completion_tokens=n_reply,
            reasoning_tokens=turn.reasoning_tokens, forced_close_tokens=turn.forced_close_tokens,
            ttft_s=ttft, tokens_per_s=speed, prompt_tokens_per_s=evaluated / ttft if ttft > 0 else 0.0,
            context_used=n_prompt + n_reply, context_limit=self.context_size, finish_reason=finish,
            dropped_turns=sum(1 for m in self.messages[: self._window] if m.role == "user"),
            backend=info.backend, device=info.device,
            gpu_layers=(f"{info.offloaded_layers}/{info.total_layers}"
                        if getattr(info, "offloaded_layers", 0) and getattr(info, "total_layers", 0) else ""),
            vram_mib=getattr(info, "vram_mib", 0),
            verified=turn.verified, model=info.model_name, template=self.template.name,
            sampling=asdict(self.sampling), reasoning_cut=turn.reasoning_cut,
            drafted_tokens=drafted, accepted_tokens=accepted,
        )

    def _evaluated_unanswered(self, turn: _Turn, prompt: BuiltPrompt | None, finish: str) -> int:
        """Prompt ids evaluated by a turn stopped before its first reply id (Esc while a long prompt
        was evaluated): the engine's last progress report, the count the user saw on the progress line.
        The engine keeps those ids in its cache, so the next turn reuses them; saying 0 here would
        hide that work.  A refused or failed turn evaluated nothing that is counted."""
        if prompt is None or finish != "cancelled":
            return 0
        progress = turn.stats.progress if turn.stats else None
        return min(progress.done, len(prompt.ids)) if progress is not None else 0

    def _record(self, prompt: BuiltPrompt, reply_ids: Sequence[int]) -> PromptRecord:
        """What this turn sent (called before the reply is appended: the user message is last)."""
        return PromptRecord(prompt, tuple(self._system_messages() + self.messages[self._window:]),
                            tuple(self.messages[: self._window]), tuple(reply_ids), self.context_size)

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
        rendered = self.template.render([_template_message(m) for m in path], add_generation_prompt=True,
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
        messages = [_template_message(m) for m in record.messages]
        plain = self.template.render(messages, add_generation_prompt=True, enable_thinking=self.enable_thinking,
                                     tools=None).text
        span = changed_span(record.prompt.text, plain)
        return [("tool schemas", *span)] if span else []

    def token_count(self, text: str) -> int:
        """Plain token count of a message's text (cached; how dropped turns are sized)."""
        return self._count(text)

    # -- fitting the context ----------------------------------------------------------------

    def _template_messages(self, start: int, new: list[ChatMessage]) -> list[dict[str, Any]]:
        return [_template_message(m) for m in [*self._system_messages(), *self.messages[start:], *new]]

    def _fit(self, new: list[ChatMessage]) -> tuple[BuiltPrompt | None, str | None]:
        """The prompt for ``new``, dropping the oldest turns if needed; (None, why) if it cannot fit."""
        need = min(self.sampling.max_tokens, self.context_size)
        start = min(self._window, len(self.messages))
        dropped_before = start
        while True:
            prompt = self._builder.build(self._template_messages(start, new), self.enable_thinking, self.tools)
            excess = len(prompt.ids) + need - self.context_size
            if excess <= 0:
                break
            # drop an eighth of the context more than needed: the turns after a drop then
            # extend the same prefix (backends reuse their cache) instead of each dropping
            # one more turn and changing the prompt's start every time
            later = self._drop_plan(start, excess + self.context_size // 8)
            if later is None:  # only the system prompt and this message are left
                if self.context_size - len(prompt.ids) >= min(need, MIN_REPLY_TOKENS):
                    break  # it fits with a shorter reply
                if len(prompt.ids) < self.context_size:  # it fits, but not with the room kept for the reply
                    reply = min(need, MIN_REPLY_TOKENS)
                    return None, (
                        f"message too long: the prompt would be {len(prompt.ids)} tokens, leaving "
                        f"{self.context_size - len(prompt.ids)} of the context's {self.context_size} for a reply "
                        f"that needs room for {reply} (--max-tokens {self.sampling.max_tokens}); lower "
                        f"--max-tokens, shorten the message or the system prompt, or raise --ctx"
                    )
                return None, (
                    f"message too long: the prompt would be {len(prompt.ids)} tokens with a context of "
                    f"{self.context_size}; shorten it, shorten the system prompt, or raise --ctx"
                )
            start = later
        self._window = start
        if start > dropped_before:
            # every turn now out of the prompt, as the turn's stats count them (dropped_turns)
            turns = sum(1 for m in self.messages[:start] if m.role == "user")
            return prompt, (f"context full: left the {turns} oldest turn{'s' if turns != 1 else ''} "
                            f"out of the prompt ({len(prompt.ids)} of {self.context_size} tokens used)")
        return prompt, None

    def _drop_plan(self, start: int, excess: int) -> int | None:
        """The first message to keep so that roughly ``excess`` tokens leave; None if none can."""
        freed = 0
        index = start
        while index < len(self.messages):
            freed += self._count(self.messages[index].content) + 4  # + markup, roughly
            index += 1
            while index < len(self.messages) and self.messages[index].role != "user":
                freed += self._count(self.messages[index].content) + 4
                index += 1
            if freed >= excess:
                break
        return index if index > start else None

    def _count(self, content: str) -> int:
        count = self._token_counts.get(content)
        if count is None:
            count = self._token_counts[content] = len(self.tokenizer.encode(content))
        return count


def merge_stats(first: TurnStats, second: TurnStats) -> TurnStats:
    """The stats of a reply generated in parts (/continue): sums of the counts, each part kept.

    ``prompt_tokens``, ``new_prompt_tokens``, ``opening_tokens`` and ``ttft_s`` are the first part's:
    the prompt the reply answered (``tokchat render --ids`` of the messages before it) and how much of
    it was evaluated, so "new" never exceeds "total".  What a later part evaluated again to go on (the
    reply's own ids, or more after a branch switch) stays in its part (``parts``) and is shown apart.
    The speed is all generated ids over all generation time; the rest is the last part's.
    """
    parts = list(first.parts or [_part(first)]) + [_part(second)]

    def gen_time(p: dict) -> float:
        return (p["completion_tokens"] - 1) / p["tokens_per_s"] if p["tokens_per_s"] > 0 else 0.0

    spent = sum(gen_time(p) for p in parts)
    steps = sum(max(p["completion_tokens"] - 1, 0) for p in parts if p["tokens_per_s"] > 0)
    return replace(
        second, prompt_tokens=first.prompt_tokens, opening_tokens=first.opening_tokens, ttft_s=first.ttft_s,
        new_prompt_tokens=parts[0]["new_prompt_tokens"],
        completion_tokens=sum(p["completion_tokens"] for p in parts),
        reasoning_tokens=sum(p["reasoning_tokens"] for p in parts),
        forced_close_tokens=sum(p.get("forced_close_tokens", 0) for p in parts),
        drafted_tokens=sum(p.get("drafted_tokens", 0) for p in parts),
        accepted_tokens=sum(p.get("accepted_tokens", 0) for p in parts),
        tool_call_tokens=sum(p["tool_call_tokens"] for p in parts),
        tokens_per_s=steps / spent if spent > 0 else 0.0,
        reasoning_cut=any(p["reasoning_cut"] for p in parts), verified=all(p["verified"] for p in parts),
        parts=parts)


def _draft_counts(stats: GenerationStats | None, turn: _Turn) -> tuple[int, int]:
    """(drafted, accepted) of this turn so far: earlier generations' plus the latest generation's."""
    counts = stats.draft if stats is not None else None
    if counts is None:
        return turn.drafted, turn.accepted
    return turn.drafted + counts.drafted, turn.accepted + counts.accepted


def _part(stats: TurnStats) -> dict:
    part = asdict(stats)
    part.pop("parts", None)
    return part


#: roles that belong to a reply (what regenerate and edit take away)
_REPLY_ROLES = ("assistant", "tool")


def _template_message(message: ChatMessage) -> dict[str, Any]:
    """A message as the template sees it: role and content, plus the tool keys it has."""
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    for key in ("tool_calls", "tool_call_id", "name"):
        value = getattr(message, key, None)
        if value:
            out[key] = value
    return out


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _marker_ids(tokenizer: Any) -> frozenset[int]:
    specials = getattr(tokenizer, "special_tokens", None) or {}
    return frozenset(specials[m] for m in END_MARKERS if m in specials)
