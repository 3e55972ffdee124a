"""Unigram (SentencePiece) as llama.cpp runs it: ``tokenizer.ggml.model = t5`` (``LLAMA_VOCAB_TYPE_UGM``).

llama.cpp's ``llm_tokenizer_ugm_session``:

1. normalization, left to right: a prefix that starts some user-defined
   token is copied verbatim (as far as it follows that token); otherwise the
   longest prefix found in the precompiled charsmap (an XOR-compressed double
   array over UTF-8 bytes, ``tokenizer.ggml.precompiled_charsmap``) is
   replaced by its string; otherwise one character is copied.
2. whitespace: with ``remove_extra_whitespaces`` every run of non-spaces
   gets one ``▁`` in front and spaces vanish; otherwise each space is ``▁``
   and, with ``add_space_prefix``, one more ``▁`` goes before the first
   non-space character.
3. Viterbi over code points: each vocabulary piece (normal, user-defined
   with score 0, unused) starting at a position challenges the best path to
   its end with ``best[start] + score`` (strictly greater wins, shorter
   pieces first); a code point no single piece covers may be ``<unk>`` at
   ``min_score - 10`` (float32); consecutive ``<unk>`` fuse on the way back.

Pure Python here; the C accelerator (``_accel_merge_free.c``) runs the same steps
on bytes.  One case we do not reproduce: llama.cpp matches user-defined
prefixes byte by byte, so it can stop inside a multi-byte character; we
stop at whole characters.
"""
from __future__ import annotations

import struct
from typing import Any, Callable

from tokenizer.errors import TokenizerError

_SPACE = "\u2581"
UNKNOWN_PENALTY = 10.0
_NO_SCORE = -1.7976931348623157e308  # -DBL_MAX


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


class CharsMap:
    """The precompiled charsmap: longest-prefix lookup of replacement strings.

    The double array is walked exactly as llama.cpp's ``xcda_array_view``
    does; each step over one character is memoized by (state, character).
    """

    def __init__(self, blob: bytes) -> None:
        if len(blob) < 4:
            raise ValueError("precompiled_charsmap is shorter than its 4-byte header")
        size = struct.unpack_from("<I", blob, 0)[0]
        if size + 4 >= len(blob) or size % 4 or size == 0:
            raise ValueError("precompiled_charsmap header gives a bad double-array size")
        self.array = struct.unpack_from(f"<{size // 4}I", blob, 4)
        self.replacements = blob[4 + size:]
        self.root = self._base(0)
        #: (state, char) -> (next state or -1, replacement offset or -1)
        self._steps: dict[tuple[int, str], tuple[int, int]] = {}

    def _base(self, i: int) -> int:
        v = self.array[i]
        return (v >> 10) << ((v & (1 << 9)) >> 6)

    def _step(self, state: int, ch: str) -> tuple[int, int]:
        key = (state, ch)
        hit = self._steps.get(key)
        if hit is not None:
            return hit
        arr, n = self.array, len(self.array)
        leaf = -1
        for c in ch.encode("utf-8", "surrogatepass"):
            if c == 0:
                state = -1
                break
            state ^= c
            if state >= n:
                raise ValueError("precompiled_charsmap walks out of its double array")
            v = arr[state]
            if v & ((1 << 31) | 0xFF) != c:
                state = -1
                break
            is_leaf = (v >> 8) & 1
            state ^= self._base(state)
            if state >= n:
                raise ValueError("precompiled_charsmap walks out of its double array")
            leaf = arr[state] & ((1 << 31) - 1) if is_leaf else -1
        result = (state, leaf)
        self._steps[key] = result
        return result

    def replacement(self, offset: int) -> str:
        end = self.replacements.find(b"\0", offset)
        if end < 0:
            raise ValueError("unterminated string in precompiled_charsmap")
        return self.replacements[offset:end].decode("utf-8", "surrogateescape")

    def shortest_prefix(self, chunk: str) -> str | None:
        """The replacement of the *shortest* key that starts ``chunk``, or None.

        HF's ``Precompiled`` normalizer (``spm_precompiled``'s ``transform``)
        takes the first hit of a common-prefix search, i.e. the shortest key.
        """
        state, step = self.root, self._step
        for ch in chunk:
            state, leaf = step(state, ch)
            if state < 0:
                return None
            if leaf >= 0:
                return self.replacement(leaf)
        return None

    def longest(self, text: str, i: int) -> tuple[int, str] | None:
        """(characters consumed, replacement) of the longest key at ``text[i:]``, or None."""
        state, best, j, n = self.root, None, i, len(text)
        step = self._step
        while j < n:
            state, leaf = step(state, text[j])
            if state < 0:
                break
            j += 1
            if leaf >= 0:
                best = (j - i, leaf)
        if best is None:
            return None
        return best[0], self.replacement(best[1])


class LlamaUnigram:
    """Text fragment -> ids, exactly as llama.cpp's UGM session."""

    def __init__(self, tokens: list[str], attrs: list[int], scores: list[float], unk_id: int | None,
                 charsmap: bytes | None, add_space_prefix: bool, remove_extra_whitespaces: bool,
                 escape_whitespaces: bool = True, viterbi: Callable[[], Any] | None = None) -> None:
        from tokenizer.core import ATTR_NORMAL, ATTR_UNUSED, ATTR_USER_DEFINED

        self.unk_id = unk_id if unk_id is not None else -1
        #: piece text -> (id, score) for the pieces Viterbi may use (later ids win, like llama.cpp's trie)
        self.pieces: dict[str, tuple[int, float]] = {}
        user: list[str] = []
        min_score = 3.4028234663852886e38  # FLT_MAX
        for tid, (text, attr) in enumerate(zip(tokens, attrs)):
            if attr & ATTR_NORMAL:
                min_score = min(min_score, scores[tid])
            if attr & (ATTR_NORMAL | ATTR_USER_DEFINED | ATTR_UNUSED):
                self.pieces[text] = (tid, 0.0 if attr & ATTR_USER_DEFINED else scores[tid])
            if attr & ATTR_USER_DEFINED:
                user.append(text)
        self.unk_score = _f32(min_score - UNKNOWN_PENALTY)
        self.max_len = max(map(len, self.pieces), default=1)
        self.user_prefixes = {t[:k] for t in user for k in range(1, len(t) + 1)}
        self.user_first = {t[0] for t in user}
        self.user_tokens = user
        self.charsmap_blob = charsmap
        self.charsmap = CharsMap(charsmap) if charsmap else None
        self.space = _SPACE if escape_whitespaces else " "
        self.add_space_prefix = add_space_prefix
        self.merge_spaces = remove_extra_whitespaces
        self._viterbi_factory = viterbi
        self._fast: Any = None

    # -- normalization ------------------------------------------------------
    def _user_prefix(self, text: str, i: int) -> int:
        k, n = 0, len(text)
        while i + k < n and text[i : i + k + 1] in self.user_prefixes:
            k += 1
        return k

    def normalize(self, text: str) -> str:
        """llama.cpp's ``normalize``: charsmap, then its whitespace rules."""
        out: list[str] = []
        cm, user_first = self.charsmap, self.user_first
        i, n = 0, len(text)
        while i < n:
            ch = text[i]
            if ch in user_first:
                k = self._user_prefix(text, i)
                if k:
                    out.append(text[i : i + k])
                    i += k
                    continue
            hit = cm.longest(text, i) if cm is not None else None
            if hit is None:
                out.append(ch)
                i += 1
            else:
                out.append(hit[1])
                i += hit[0]
        s = "".join(out)
        space = self.space
        if self.merge_spaces:
            return "".join(space + w for w in s.split(" ") if w)
        s2 = s.replace(" ", space)
        if self.add_space_prefix:
            stripped = s.lstrip(" ")
            if stripped:
                lead = len(s) - len(stripped)
                s2 = s2[:lead] + space + s2[lead:]
        return s2

    # -- segmentation ---------------------------------------------------------
    def viterbi(self, s: str) -> list[int]:
        """Best-score segmentation of the normalized ``s`` (code points), fusing unknowns."""
        n = len(s)
        if n == 0:
            return []
        unk, unk_score, max_len = self.unk_id, self.unk_score, self.max_len
        get = self.pieces.get
        score = [_NO_SCORE] * (n + 1)
        score[0] = 0.0
        token = [unk] * (n + 1)
        start = [0] * (n + 1)
        for i in range(n):
            cur = score[i]
            single = False
            for j in range(i + 1, min(n, i + max_len) + 1):
                hit = get(s[i:j])
                if hit is None:
                    continue
                if j == i + 1:
                    single = True
                challenger = cur + hit[1]
                if challenger > score[j]:
                    score[j], token[j], start[j] = challenger, hit[0], i
            if not single:
                challenger = cur + unk_score
                if challenger > score[i + 1]:
                    score[i + 1], token[i + 1], start[i + 1] = challenger, unk, i
        out: list[int] = []
        pos, prev_unk = n, False
        while True:
            tid = token[pos]
            is_unk = tid == unk
            if not (prev_unk and is_unk):
                out.append(tid)
            if start[pos] == 0:
                break
            prev_unk = is_unk
            pos = start[pos]
        out.reverse()
        return out

    def encode_fragment(self, text: str) -> list[int]:
        if self._viterbi_factory is not None:
            self._fast, self._viterbi_factory = self._viterbi_factory(), None
        try:
            if self._fast is not None:
                ids = self._fast.encode(text)
                if ids is not None:
                    return ids
            return self.viterbi(self.normalize(text))
        except ValueError as exc:  # only a damaged charsmap gets here: say so in one line
            raise TokenizerError(f"this vocabulary's precompiled_charsmap is damaged ({exc}); "
                                 "the GGUF file needs to be re-converted") from None
