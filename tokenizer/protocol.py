"""What the rest of tokchat may ask of a tokenizer: the :class:`Tokenizer` Protocol.

The app, the templates and the backends take a tokenizer through this Protocol instead of ``Any``, so the
type checker (``mypy``, run by ``python3 dev.py test``) holds every call to the interface below.
:class:`tokenizer.core.Tokenizer` (what every loader returns) is one, checked wherever one is passed; a
test's wrapper is one when it has these members.  Attributes are read-only here: the loader sets them
once, nobody else writes them.

Not here: the loaders' own parts (merges, splitters, caches) and ``clear_cache``, which only benchmarks
call on the concrete class.  Importing this module costs nothing: it needs only :mod:`tokenizer.stream`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Sequence

from tokenizer.stream import StreamDecoder


class Tokenizer(Protocol):
    """Text <-> token ids for one model, as llama.cpp and Hugging Face count them (see ``tokenizer.core``)."""

    # -- facts the loader read from the model file (set once) --------------------------------------------------
    @property
    def kind(self) -> str:
        """llama.cpp's vocabulary type: ``bpe``, ``spm``, ``wpm``, ``ugm``."""

    @property
    def pre(self) -> str | None:
        """The pre-tokenizer's name (``qwen2``, ``llama3``...), None where the vocabulary has none."""

    @property
    def source(self) -> str:
        """Where the vocabulary came from (a file path), for messages."""

    @property
    def vocab_size(self) -> int: ...

    @property
    def bos_id(self) -> int | None: ...

    @property
    def eos_id(self) -> int | None: ...

    @property
    def sep_id(self) -> int | None: ...

    @property
    def bos_token(self) -> str | None: ...

    @property
    def eos_token(self) -> str | None: ...

    @property
    def add_bos(self) -> bool: ...

    @property
    def add_eos(self) -> bool: ...

    @property
    def add_sep(self) -> bool: ...

    @property
    def eog_ids(self) -> frozenset[int]:
        """Every id that ends a generation (EOS, EOT, ``<|im_end|>``...)."""

    @property
    def chat_template(self) -> str | None:
        """The model file's own chat template (Jinja), if it has one."""

    @property
    def metadata(self) -> dict[str, Any]:
        """The model file's metadata as read (GGUF values are of many types: ``Any`` is what they are)."""

    @property
    def special_tokens(self) -> dict[str, int]:
        """Control and user-defined tokens: text -> id."""

    # -- encoding ----------------------------------------------------------------------------------------------
    def encode(self, text: str, special: bool = False, literal_spans: Sequence[tuple[int, int]] = ()) -> list[int]:
        """Token ids for ``text``, never with BOS; ``special=True`` turns control-token text into its id."""

    def with_special(self, ids: list[int]) -> list[int]:
        """``ids`` framed as llama.cpp's ``add_special=True`` frames them (BOS/EOS, or [CLS] ... [SEP])."""

    # -- decoding ----------------------------------------------------------------------------------------------
    def token_bytes(self, tid: int) -> bytes: ...

    def decode_bytes(self, ids: Sequence[int], skip_special: bool = False) -> bytes: ...

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str: ...

    def stream_decoder(self, skip_special: bool = False) -> StreamDecoder: ...

    # -- vocabulary --------------------------------------------------------------------------------------------
    def token_to_id(self, text: str) -> int | None: ...

    def id_to_token(self, tid: int) -> str: ...

    def is_special(self, tid: int) -> bool: ...

    def token_attr(self, tid: int) -> int:
        """llama.cpp's attribute bits for ``tid`` (``tokenizer.core.ATTR_*``)."""


if TYPE_CHECKING:
    from tokenizer.core import Tokenizer as _Concrete

    def _the_loaders_tokenizer_is_one(tok: _Concrete) -> Tokenizer:
        """Never called: the type checker fails here when ``tokenizer.core.Tokenizer`` stops fitting."""
        return tok
