"""The tokenizer's two user-facing errors.

``TokenizerError`` covers everything a user can act on (an unknown
pre-tokenizer, an id out of range, a file that is not a tokenizer);
``GGUFError`` adds the byte offset where a GGUF file went wrong.
"""
from __future__ import annotations


class TokenizerError(Exception):
    """A problem with a tokenizer file or a request to a tokenizer, worded for the user."""


class GGUFError(TokenizerError):
    """A malformed GGUF file: ``offset`` is where reading failed, ``problem`` says why."""

    def __init__(self, offset: int, problem: str) -> None:
        super().__init__(f"bad GGUF file at byte {offset}: {problem}")
        self.offset = offset
        self.problem = problem
