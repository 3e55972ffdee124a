"""The history's data types: what a stored conversation and message look like.

Kept apart from :mod:`app.history.store` (the SQLite side) so that export, the
recorder and the TUI can use them without opening a database.  Messages are saved from
:class:`app.conversation.messages.ChatMessage` values, read by their typed fields (imported for
type checking only, so this module loads without the conversation package).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from app.conversation.messages import ChatMessage

TITLE_CHARS = 60


class StoreError(Exception):
    """The history database cannot be used; the message is one line for the user."""


@dataclass
class ConversationInfo:
    """One row of the conversation list."""

    id: int
    title: str
    model_path: str = ""
    model_name: str = ""
    template: str = ""
    system_prompt: str = ""
    sampling: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0
    message_count: int = 0
    #: a fork (/fork): the conversation it was made from and the message it was cut after (None: not a fork)
    forked_from: int | None = None
    forked_at: int | None = None
    #: a fork whose source conversation has been deleted since (``forked_from`` names no conversation now;
    #: the id is kept, so an undone deletion links them again)
    source_deleted: bool = False


@dataclass
class StoredMessage:
    """A message as stored; ``finish_reason`` is None while a reply is being written."""

    id: int
    role: str
    content: str
    reasoning: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    ttft_s: float | None = None
    tokens_per_s: float | None = None
    stats: dict | None = None
    created_at: float = 0.0
    finished_at: float | None = None
    #: tool calling, as the template takes it: ``tool_calls`` (a reply), ``tool_call_id`` and ``name`` (a result)
    tool: dict | None = None
    #: the message before this one on its branch (None: the first message)
    parent_id: int | None = None
    #: a reply's start written by the user (/reply); ``content`` begins with it
    opening: str = ""
    #: a reply's ids as generated (its opening's first): /continue resumes from them with the same model
    reply_ids: list[int] | None = None

    def to_chat_message(self) -> ChatMessage:
        """This message as an :class:`app.conversation.session.ChatMessage` (for ``ChatSession.load_messages``)."""
        from app.conversation.messages import ChatMessage, stats_from_dict

        stats = stats_from_dict(self.stats) if self.stats else None
        tool = self.tool or {}
        return ChatMessage(role=self.role, content=self.content, reasoning=self.reasoning,
                           stats=stats, finish_reason=self.finish_reason, tool_calls=tool.get("tool_calls"),
                           tool_call_id=tool.get("tool_call_id"), name=tool.get("name"),
                           store_id=self.id or None, opening=self.opening,
                           reply_ids=tuple(self.reply_ids) if self.reply_ids is not None else None)


@dataclass
class Conversation:
    """A whole stored conversation."""

    info: ConversationInfo
    #: the branch shown, first to last
    messages: list[StoredMessage]
    #: every other message (siblings of regenerated replies and edited prompts), linked by parent_id
    branches: list[StoredMessage] = field(default_factory=list)

    def chat_messages(self) -> list[ChatMessage]:
        """The messages as ``ChatMessage`` objects, ready for ``ChatSession.load_messages``."""
        return [m.to_chat_message() for m in self.messages]


def make_title(text: str) -> str:
    """A conversation title from its first user message: first line, at most TITLE_CHARS."""
    line = " ".join(text.strip().split("\n", 1)[0].split())
    if len(line) > TITLE_CHARS:
        line = line[: TITLE_CHARS - 1].rstrip() + "…"
    return line or "(untitled)"


def as_dict(value: Any) -> dict | None:
    if value is None:
        return None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, dict):
        return dict(value)
    raise TypeError(f"expected a dataclass or a dict, got {type(value).__name__}")


def message_columns(message: ChatMessage, finish_reason: str | None) -> dict:
    """Column values of a message (role, content, reasoning, stats, finish_reason ...); ``finish_reason``
    overrides the message's own (``"interrupted"``)."""
    from app.conversation.messages import stats_dict

    stats = stats_dict(message.stats) if message.stats is not None else None
    reason = finish_reason or message.finish_reason or (stats or {}).get("finish_reason")
    get = (stats or {}).get
    return {
        "role": message.role, "content": message.content or "",
        "reasoning": message.reasoning or "",
        "prompt_tokens": get("prompt_tokens"), "completion_tokens": get("completion_tokens"),
        "reasoning_tokens": get("reasoning_tokens"), "ttft_s": get("ttft_s"),
        "tokens_per_s": get("tokens_per_s"), "finish_reason": reason,
        "stats_json": json.dumps(stats) if stats is not None else None,
        "tool_json": tool_json(message),
        "reply_json": reply_json(message.opening, message.reply_ids),
    }


def reply_json(opening: str, ids: Sequence[int] | None) -> str | None:
    """A reply's user-written opening and its ids as generated, as JSON (None when it has neither)."""
    fields = {**({"opening": opening} if opening else {}), **({"ids": list(ids)} if ids is not None else {})}
    return json.dumps(fields, ensure_ascii=False) if fields else None


def parse_reply_json(text: str | None) -> tuple[str, list[int] | None]:
    """``(opening, ids)`` from a ``reply_json`` column."""
    data = json.loads(text) if text else {}
    return data.get("opening", ""), data.get("ids")


def tool_json(message: ChatMessage) -> str | None:
    """A message's tool-calling fields (``tool_calls``, ``tool_call_id``, ``name``) as JSON (None for a
    message without any)."""
    fields = {"tool_calls": message.tool_calls, "tool_call_id": message.tool_call_id, "name": message.name}
    fields = {k: v for k, v in fields.items() if v}
    return json.dumps(fields, ensure_ascii=False) if fields else None
