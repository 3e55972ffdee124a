"""Where the context went: the parts of a prompt that was sent, counted on the ids that were sent.

The session keeps, for every reply, a :class:`PromptRecord`: the
:class:`~templates.builder.BuiltPrompt` it sent (text, message spans, ids),
the messages that were in it, those the overflow policy had left out, and
the reply ids as generated.  :func:`breakdown` splits those *same* ids into
parts; it never encodes anything again, so the numbers cannot drift from
what the backend got.

How ids are placed: each id's bytes (``tokenizer.token_bytes``) are walked
along the prompt text's UTF-8 bytes, which gives every id a byte range
(:func:`token_ranges`).  An id whose bytes are not in the text (a BOS the
model wants but the template did not write) gets an empty range where it
stands; a SentencePiece space prefix is allowed for.  An id is then owned by
the message span it overlaps most (the spans come from the template render,
:attr:`RenderedPrompt.literal_spans`), else it is template markup.

Parts: template markup (BOS included), the system prompt, each turn (its
user message and the replies and tool results after it), the message sent
this turn, extra carved parts (:func:`breakdown`'s ``extra_spans``: the hook
for tool schemas written into the markup), then outside the prompt the reply,
the draft being typed and the room left.  Dropped turns are listed with the
plain token count of their text, marked as not sent.

Not handled: a template that folds the system prompt into the first user
message (no system role) counts it with that message; a span the template
could not place (``RenderedPrompt.unplaced``) counts as markup.
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

if TYPE_CHECKING:
    from templates.builder import BuiltPrompt
    from tokenizer.protocol import Tokenizer

#: part kinds, in the order they are listed
MARKUP, SYSTEM, TURN, CURRENT, EXTRA, TOOL = "markup", "system", "turn", "current", "extra", "tool"


@dataclass(frozen=True)
class PromptRecord:
    """What one turn sent: the prompt, the messages in it and those left out, and the reply.

    ``messages`` are in template order (a system message first when there is
    one; the message sent this turn last); ``dropped`` are the earlier
    messages the overflow policy left out.  Messages are read by duck typing
    (``role``, ``content``) or as mappings.
    """

    prompt: BuiltPrompt
    messages: tuple[Any, ...]
    dropped: tuple[Any, ...] = ()
    reply_ids: tuple[int, ...] = ()
    context_size: int = 0

    @property
    def ids(self) -> list[int]:
        return self.prompt.ids


@dataclass
class Part:
    """One slice of the context: what it is, how many ids, and which messages it covers."""

    kind: str  # markup | system | turn | current | extra | tool
    label: str
    tokens: int = 0
    #: indices into PromptRecord.messages this part covers (empty for markup and extras)
    messages: tuple[int, ...] = ()
    dropped: bool = False  # a turn the overflow policy left out (tokens: its text alone, not sent)
    roles: dict[str, int] = field(default_factory=dict)  # role -> ids, for a turn


@dataclass
class Breakdown:
    """The parts of one turn's context; ``owner`` maps every prompt id to its part."""

    parts: list[Part]
    owner: array[int]  # prompt id index -> index into parts
    ranges: list[tuple[int, int]]  # prompt id index -> byte range in the prompt text
    message_part: dict[int, int]  # PromptRecord.messages index -> index into parts
    message_owner: array[int]  # prompt id index -> PromptRecord.messages index, -1 for markup
    prompt_tokens: int
    reply_tokens: int
    draft_tokens: int
    context_size: int

    @property
    def used(self) -> int:
        """Ids in the backend's context after the turn: the prompt plus the reply."""
        return self.prompt_tokens + self.reply_tokens

    @property
    def room(self) -> int:
        """What is left for the next turn's markup and reply once the draft is sent."""
        return self.context_size - self.used - self.draft_tokens

    def rows(self) -> list[tuple[str, str, str]]:
        """``(label, tokens, share)`` rows for a table: prompt parts, then reply, draft and room."""
        total = self.context_size or 1
        out = []
        for part in self.parts:
            if part.dropped:
                out.append((part.label, f"({part.tokens})", "dropped"))
            else:
                out.append((part.label, str(part.tokens), f"{100 * part.tokens / total:.1f}%"))
        for label, value in (("reply", self.reply_tokens), ("draft (text)", self.draft_tokens),
                             ("room left", self.room)):
            out.append((label, str(value), f"{100 * value / total:.1f}%"))
        return out

    def text(self) -> str:
        """The breakdown as aligned plain-text lines (``tokchat render --pieces``)."""
        rows = [("part", "ids", "of ctx")] + self.rows()
        width = max(len(r[0]) for r in rows)
        lines = [f"{a:<{width}}  {b:>7}  {c:>7}" for a, b, c in rows]
        lines.append(f"{'prompt':<{width}}  {self.prompt_tokens:>7}  of {self.context_size} "
                     f"(used with the reply: {self.used})")
        return "\n".join(lines)


def role_and_content(message: Any) -> tuple[str, str]:
    if isinstance(message, Mapping):
        return str(message.get("role", "")), str(message.get("content", ""))
    return str(getattr(message, "role", "")), str(getattr(message, "content", ""))


def token_ranges(tokenizer: Tokenizer, ids: Sequence[int], text: str) -> list[tuple[int, int]]:
    """Each id's ``(start, end)`` byte range in ``text``'s UTF-8 bytes, by walking its bytes along.

    A BOS (or any id) whose bytes are not at that point of the text gets an
    empty range there; a SentencePiece piece whose leading space the text
    lacks is placed without it.  If the walk falls out of step it continues
    with empty ranges, which then count as markup.
    """
    data = text.encode("utf-8", "surrogatepass")
    pos = 0
    out: list[tuple[int, int]] = []
    token_bytes = tokenizer.token_bytes
    for tid in ids:
        piece = token_bytes(tid)
        if piece and data.startswith(piece, pos):
            out.append((pos, pos + len(piece)))
            pos += len(piece)
        elif piece[:1] == b" " and data.startswith(piece[1:], pos):
            out.append((pos, pos + len(piece) - 1))
            pos += len(piece) - 1
        else:
            out.append((pos, pos))
    return out


def _byte_spans(text: str, spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Character spans as UTF-8 byte spans, encoding the text once between sorted endpoints."""
    points = sorted({p for span in spans for p in span})
    at: dict[int, int] = {}
    char, byte = 0, 0
    for point in points:
        byte += len(text[char:point].encode("utf-8", "surrogatepass"))
        char = point
        at[point] = byte
    return [(at[a], at[b]) for a, b in spans]


def _span_messages(text: str, spans: Sequence[tuple[int, int]], messages: Sequence[Any]) -> list[int]:
    """The message index of each span (-1: none), matching text in order.

    Spans come only for messages with non-blank content, in render order; a
    template may trim content, so a span matches a message whose stripped
    content equals the span's text (or holds it, for a template that edits).
    """
    contents = [role_and_content(m)[1] for m in messages]
    out: list[int] = []
    nxt = 0
    for a, b in spans:
        piece = text[a:b]
        piece = piece.strip()
        found = next((i for i in range(nxt, len(contents)) if contents[i].strip() == piece), -1)
        if found < 0:  # an edited or folded message (a system prompt merged into the first turn)
            found = next((i for i in range(nxt, len(contents)) if contents[i].strip()
                          and (piece in contents[i] or contents[i].strip() in piece)), -1)
        if found >= 0:
            nxt = found + 1
        out.append(found)
    return out


def _owners(ranges: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> array[int]:
    """For each id, the index of the span it overlaps most (-1: none); both lists sorted."""
    owner = array("i", [-1]) * len(ranges)
    k = 0
    for i, (s, e) in enumerate(ranges):
        while k < len(spans) and spans[k][1] <= s:
            k += 1
        best, best_overlap = -1, 0
        j = k
        while j < len(spans) and spans[j][0] < e:
            overlap = min(e, spans[j][1]) - max(s, spans[j][0])
            if overlap > best_overlap:
                best, best_overlap = j, overlap
            j += 1
        owner[i] = best
    return owner


def breakdown(tokenizer: Tokenizer, record: PromptRecord, *, draft_tokens: int = 0,
              count: Callable[[str], int] | None = None,
              extra_spans: Sequence[tuple[str, int, int]] = ()) -> Breakdown:
    """Split the ids ``record`` sent into parts (see the module docstring).

    ``count(text)`` gives a dropped message's plain token count (default:
    ``len(tokenizer.encode(text))``); ``extra_spans`` are ``(label, start,
    end)`` character spans of the prompt text that take their ids out of
    the markup (tool schemas).
    """
    prompt = record.prompt
    ids = list(prompt.ids)
    text = prompt.text
    rendered = prompt.rendered
    spans = sorted(rendered.literal_spans)
    span_msg = _span_messages(text, spans, record.messages)
    ranges = token_ranges(tokenizer, ids, text)
    span_owner = _owners(ranges, _byte_spans(text, spans))

    # parts: markup, system, one per turn (a user message and what follows it), the current message
    parts: list[Part] = [Part(MARKUP, "template markup")]
    message_part: dict[int, int] = {}
    count = count or (lambda t: len(tokenizer.encode(t)) if t else 0)
    dropped = list(record.dropped)
    turn_no = 0
    for start in _turn_starts(dropped):
        turn_no += 1
        roles: dict[str, int] = {}
        for m in dropped[start[0]:start[1]]:
            role, content = role_and_content(m)
            roles[role] = roles.get(role, 0) + count(content)
        parts.append(Part(TURN, f"turn {turn_no} (dropped)", sum(roles.values()), (), True, roles))
    sent = list(record.messages)
    first = 0
    if sent and role_and_content(sent[0])[0] == "system":
        parts.append(Part(SYSTEM, "system prompt", messages=(0,)))
        message_part[0] = len(parts) - 1
        first = 1
    last_user = max((i for i in range(first, len(sent)) if role_and_content(sent[i])[0] == "user"),
                    default=len(sent))
    for a, b in _turn_starts(sent[first:]):
        a, b = a + first, b + first
        if a >= last_user:
            kind, label = CURRENT, "this turn's message"
        else:
            turn_no += 1
            kind = TOOL if all(role_and_content(m)[0] == "tool" for m in sent[a:b]) else TURN
            label = f"turn {turn_no}"
        parts.append(Part(kind, label, messages=tuple(range(a, b))))
        for i in range(a, b):
            message_part[i] = len(parts) - 1
    extras = sorted(extra_spans, key=lambda s: s[1])
    extra_owner = _owners(ranges, _byte_spans(text, [(a, b) for _, a, b in extras])) if extras else None
    extra_base = len(parts)
    for label, _, _ in extras:
        parts.append(Part(EXTRA, label))

    owner = array("i", [0]) * len(ids)
    message_owner = array("i", [-1]) * len(ids)
    for i in range(len(ids)):
        span = span_owner[i]
        msg = span_msg[span] if span >= 0 else -1
        if msg >= 0:
            index = message_part.get(msg, 0)
            message_owner[i] = msg
            role = role_and_content(sent[msg])[0]
            part = parts[index]
            part.roles[role] = part.roles.get(role, 0) + 1
        elif extra_owner is not None and extra_owner[i] >= 0:
            index = extra_base + extra_owner[i]
        else:
            index = 0
        owner[i] = index
        parts[index].tokens += 1
    return Breakdown(parts, owner, ranges, message_part, message_owner, len(ids),
                     len(record.reply_ids), draft_tokens, record.context_size)


def changed_span(with_part: str, without_part: str) -> tuple[int, int] | None:
    """Where ``with_part`` differs from ``without_part``: ``(start, end)`` in ``with_part``, or None.

    The tool schemas a template writes are found this way: the prompt as
    sent, against the same messages rendered with no tools (text only,
    nothing encoded); what is left between the common start and the common
    end is the schemas and the markup around them.
    """
    if with_part == without_part:
        return None
    limit = min(len(with_part), len(without_part))
    start = 0
    while start < limit and with_part[start] == without_part[start]:
        start += 1
    end = 0
    while end < limit - start and with_part[-1 - end] == without_part[-1 - end]:
        end += 1
    return (start, len(with_part) - end) if len(with_part) - end > start else None


def _turn_starts(messages: Sequence[Any]) -> list[tuple[int, int]]:
    """``(start, end)`` index ranges of turns: each user message with what follows until the next."""
    bounds: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(messages) + 1):
        if i == len(messages) or role_and_content(messages[i])[0] == "user":
            if i > start:
                bounds.append((start, i))
            start = i
    return bounds
