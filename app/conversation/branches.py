"""Branches: a regenerated reply or an edited prompt keeps what it replaced as a sibling.

The session's ``messages`` stays the one path on screen (everything that
builds prompts reads only that).  :class:`BranchTree` keeps the rest: at a
*fork* (a position in the path where more than one continuation exists)
it holds every alternative continuation, each with the forks further down
it.  Switching siblings swaps the tail of the path at that position::

    path:   u1  a1  u2  [a2']           fork at 3: [a2, a2'] shown 2/2
                                        (a2's own later turns are kept with it)

Only the shown alternative lives in the path; the others are stored as
:class:`Branch` objects (their messages and their own deeper forks).

Not handled here: prompt ids (the session re-primes its prompt builder
from the reply's :class:`~app.conversation.context_breakdown.PromptRecord` after a
switch, so the next prompt extends that branch's ids exactly), storage
(:mod:`app.history.store` keeps the tree as parent links) and drawing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence


@dataclass
class Branch:
    """One continuation from a fork: its messages and the forks inside it (absolute positions)."""

    messages: list[Any]
    forks: dict[int, "Fork"] = field(default_factory=dict)


@dataclass
class Fork:
    """The alternatives at one position; ``alternatives[shown]`` is stale while it is on screen."""

    alternatives: list[Branch]
    shown: int


class BranchTree:
    """The forks along the shown path, keyed by position in it."""

    def __init__(self) -> None:
        self.forks: dict[int, Fork] = {}

    def clear(self) -> None:
        self.forks = {}

    def _take_deeper(self, at: int) -> dict[int, Fork]:
        deeper = {k: v for k, v in self.forks.items() if k > at}
        for k in deeper:
            del self.forks[k]
        return deeper

    def fork(self, path: list[Any], at: int) -> None:
        """``path[at:]`` is about to be replaced by a new continuation: keep it as a sibling."""
        if at >= len(path):
            return  # nothing to keep (e.g. a regenerate after a refused turn)
        old = Branch(list(path[at:]), self._take_deeper(at))
        fork = self.forks.get(at)
        if fork is None:
            fork = self.forks[at] = Fork([old], 0)
        else:
            fork.alternatives[fork.shown] = old
        fork.alternatives.append(Branch([]))  # the new one, filled in when it is switched away from
        fork.shown = len(fork.alternatives) - 1

    def unfork(self, path: list[Any], at: int) -> None:
        """The new continuation was refused and ``path`` is back as before: forget the empty sibling."""
        fork = self.forks.get(at)
        if fork is None or fork.alternatives[fork.shown].messages:
            return
        fork.alternatives.pop(fork.shown)
        fork.shown = len(fork.alternatives) - 1
        restored = fork.alternatives[fork.shown]
        self.forks.update(restored.forks)
        if len(fork.alternatives) == 1:
            del self.forks[at]

    def switch(self, path: list[Any], at: int, index: int) -> list[Any]:
        """The path with alternative ``index`` shown at ``at`` (the current one kept)."""
        fork = self.forks[at]
        if not 0 <= index < len(fork.alternatives):
            raise IndexError(f"no alternative {index + 1} of {len(fork.alternatives)} here")
        if index == fork.shown:
            return path
        fork.alternatives[fork.shown] = Branch(list(path[at:]), self._take_deeper(at))
        chosen = fork.alternatives[index]
        fork.shown = index
        self.forks.update(chosen.forks)
        chosen.forks = {}
        return list(path[:at]) + list(chosen.messages)

    def position(self, at: int) -> tuple[int, int] | None:
        """``(shown, count)``, 1-based, for the fork at ``at``; None where there is no fork."""
        fork = self.forks.get(at)
        return (fork.shown + 1, len(fork.alternatives)) if fork else None

    def last_fork(self) -> int | None:
        return max(self.forks) if self.forks else None

    def all_messages(self) -> list[Any]:
        """Every message off the shown path (in all stored alternatives, at any depth)."""
        out: list[Any] = []
        stack = list(self.forks.values())
        while stack:
            fork = stack.pop()
            for n, alt in enumerate(fork.alternatives):
                if n != fork.shown:
                    out.extend(alt.messages)
                    stack.extend(alt.forks.values())
        return out


def from_links(nodes: Sequence[tuple[int, int | None, Any]], shown: Sequence[int]) -> tuple[list[Any], BranchTree]:
    """The shown path and its :class:`BranchTree` from stored parent links.

    ``nodes`` are ``(id, parent_id, message)`` for every message of a
    conversation; ``shown`` the ids of the branch on screen, first to last.
    Off the shown path, each branch follows its most recent continuation
    (the others become forks inside it).  Messages below the shown tip (a
    reply being replaced when tokchat stopped) become siblings of the empty
    continuation the path ends with.
    """
    children: dict[int | None, list[tuple[int, Any]]] = {}
    for node_id, parent, message in sorted(nodes, key=lambda n: n[0]):
        children.setdefault(parent, []).append((node_id, message))

    def follow(parent: int | None, pos: int, chosen: Sequence[int] | None) -> tuple[list[Any], dict[int, Fork]]:
        messages: list[Any] = []
        forks: dict[int, Fork] = {}
        while True:
            kids = children.get(parent, [])
            if not kids:
                return messages, forks
            depth = len(messages)
            ids = [k for k, _ in kids]
            if chosen is None:
                pick: int | None = len(kids) - 1
            else:
                pick = ids.index(chosen[depth]) if depth < len(chosen) and chosen[depth] in ids else None
            alternatives = [Branch([]) if n == pick else _branch_from(kid_id, message, pos + depth)
                            for n, (kid_id, message) in enumerate(kids)]
            if pick is None:  # the shown branch ends here; what lies below is its siblings
                forks[pos + depth] = Fork(alternatives + [Branch([])], len(kids))
                return messages, forks
            if len(kids) > 1:
                forks[pos + depth] = Fork(alternatives, pick)
            kid_id, message = kids[pick]
            messages.append(message)
            parent = kid_id

    def _branch_from(kid_id: int, message: Any, pos: int) -> Branch:
        rest, forks = follow(kid_id, pos + 1, None)
        return Branch([message] + rest, forks)

    path, forks = follow(None, 0, list(shown))
    tree = BranchTree()
    tree.forks = forks
    return path, tree
