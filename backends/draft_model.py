"""A small model drafting for a larger one of the same vocabulary (llama.cpp's ``-md``), in the engine's process.

The draft model runs in a second llama.cpp context beside the main one.  At
each step :class:`ModelDrafter` brings the draft context up to the reply's
ids (keeping the common prefix of its cache, as the main engine does), then
proposes ids greedily, one draft decode each, until the draft length or until
the draft model's own top probability falls under ``p_min`` (llama.cpp's
``--draft-p-min``: a draft the draft model itself doubts is rarely kept and
costs a decode).  The main engine verifies the draft in one batch exactly as
it verifies an n-gram draft (:mod:`backends.speculative`).

Why greedy drafts keep sampling exact at temperature > 0: a greedy draft is
a deterministic function of the context (``q`` one-hot), and for such a draft
drawing the model's own id first and keeping the draft id when they agree is
the standard speculative-sampling rule; the reply's distribution is the main
model's, whatever the draft model believes.  (Sampling drafts from ``q`` and
accepting with ``min(1, p/q)`` would keep more ids at high temperature; not
done: the chain's draws would then differ from the plain loop's, and a
seeded reply would change with speculation.)

The vocabulary check is tokchat's own: both GGUFs' token lists and special
ids must be equal id for id, else one line names the first difference.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from backends.base import common_prefix_length

if TYPE_CHECKING:
    from backends.llama_engine import LlamaEngine

#: special-id keys of a GGUF vocabulary that must agree between the two models
_SPECIAL_KEYS = ("bos", "eos", "eot", "eom", "sep", "pad", "unk")


@dataclass(frozen=True)
class DraftModelConfig:
    """How the draft model proposes: up to 16 ids, stopping where its own top probability is under 0.75.

    These were llama-server's defaults before the pinned llama.cpp, which drafts 3 ids with no floor
    (``--spec-type draft-simple``; ``-md`` alone drafts nothing there).  Kept: a long draft is what pays where
    verification is nearly free (a GPU), and the floor stops a draft the draft model itself doubts; where
    drafting does not pay at all, ``auto`` sets the draft model aside (:class:`backends.speculative.SpeedCheck`).
    """

    max_draft: int = 16
    p_min: float = 0.75


def vocab_difference(main: Path, draft: Path) -> str | None:
    """None when the two GGUFs share one vocabulary id for id; else what differs, in one line naming both."""
    why = vocab_mismatch(main, draft)
    return None if why is None else f"{Path(draft).name} cannot draft for {Path(main).name}: {why}"


def vocab_mismatch(main: Path, draft: Path) -> str | None:
    """None when the two GGUFs share one vocabulary id for id; else the first difference (its reason alone)."""
    from tokenizer.gguf import read_gguf
    from tokenizer.gguf_vocab import read_vocab

    a, b = read_vocab(read_gguf(main)), read_vocab(read_gguf(draft))
    if a["model"] != b["model"]:
        return f"their tokenizers differ ({b['model']} against {a['model']})"
    ta, tb = a["tokens"], b["tokens"]
    if len(ta) != len(tb):
        # llama.cpp pads some vocabularies; ids beyond the shorter list cannot be drafted, so refuse
        return f"their vocabularies have {len(tb)} and {len(ta)} tokens"
    first = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), None)
    if first is not None:
        return f"token {first} is {tb[first]!r} in the draft and {ta[first]!r} in the main model"
    sa, sb = a.get("special") or {}, b.get("special") or {}
    for key in _SPECIAL_KEYS:
        if sa.get(key) != sb.get(key):
            return f"their {key} ids differ ({sb.get(key)} against {sa.get(key)})"
    return None


class ModelDrafter:
    """Greedy drafts from a draft model kept in step with one reply's ids.

    Shape of the state: ``ids`` is the reply's context so far (prompt, then
    every id the main model kept); the draft engine's cache holds some prefix
    of ``ids`` plus, after a draft, the drafted ids but the last; :meth:`draft`
    cuts it back to the common prefix before drafting again.
    """

    def __init__(self, engine: LlamaEngine, context: Sequence[int],
                 config: DraftModelConfig = DraftModelConfig()) -> None:
        self.engine = engine
        self.config = config
        self.ids: list[int] = [int(t) for t in context]

    def extend(self, ids: Sequence[int]) -> None:
        self.ids.extend(int(t) for t in ids)

    def draft(self, limit: int) -> list[int]:
        """Up to ``min(limit, config.max_draft)`` ids the draft model would say next, greedy.

        The draft length is this config's: the reply's :class:`backends.speculative.Speculator` passes only
        the room the context and the reply have left (prompt lookup's adaptive length is lookup's own)."""
        cap = min(limit, self.config.max_draft)
        if cap < 1 or not self.ids:
            return []
        engine = self.engine
        keep = min(common_prefix_length(engine.tokens, self.ids), len(self.ids) - 1)
        engine.truncate(keep)
        engine.decode(self.ids[keep:])
        out: list[int] = []
        while True:
            token, p = engine.top_choice()
            if p < self.config.p_min:
                break
            out.append(token)
            if len(out) >= cap:
                break
            engine.decode((token,))
        return out
