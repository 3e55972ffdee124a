"""Which vocabulary a conversation's token ids belong to: a fingerprint stored with it, checked on resume.

Token ids mean something only in the vocabulary that produced them.  A conversation
resumed with another model (a server restarted with Qwen under a SmolLM2 conversation,
issue 34 item 3) would otherwise go on silently: the old replies re-encoded into the new
ids, the stored ``reply_ids`` read as the new model's, the header still naming the old
model.  So a new conversation stores its tokenizer's fingerprint in its settings
(``settings["vocab"]``), and ``--resume`` compares it with the tokenizer of this run
(for ``--server`` that is the server's own vocabulary: the connect checked it id for id).

The fingerprint is sampled, not a hash of every piece: hashing Qwen's 151,936 pieces one
by one costs 0.7 s per run.  It covers the size, the first 256 ids (bytes and
specials), every 61st id, the last 512 ids (where added and special tokens live) and the
ids of a probe text with special tokens, so two real vocabularies that differ anywhere a
conversation would notice get different fingerprints.

Not handled here: conversations stored before the fingerprint existed (or by a writer that
does not store it) carry none and are resumed as before.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tokenizer.protocol import Tokenizer
    from app.history.types import ConversationInfo

#: the key in a conversation's settings
SETTINGS_KEY = "vocab"
#: a text whose ids differ between real vocabularies (the same as the server connect's probe)
_PROBE = ("Hello, world! The year 2025 has 365 days; 1234567 + 89 = 1234656.\n"
          "Emoji 🙂👍🏽🇯🇵, CJK 日本語のテキストと中文字符, accents café naïve Ünïcödé,\n\t  spaces   and\ttabs.")


def vocabulary_fingerprint(tokenizer: Tokenizer) -> str:
    """``"<size>:<16 hex digits>"`` for ``tokenizer``'s vocabulary (see the module docstring)."""
    import hashlib  # here: OpenSSL's libcrypto is 3 MiB of a one-shot reply's process

    size = int(tokenizer.vocab_size)
    digest = hashlib.sha256(str(size).encode())
    sampled = sorted(set(range(min(size, 256))) | set(range(0, size, 61)) | set(range(max(0, size - 512), size)))
    for tid in sampled:
        piece = tokenizer.token_bytes(tid)
        digest.update(len(piece).to_bytes(4, "little") + piece + (b"\1" if tokenizer.is_special(tid) else b"\0"))
    specials = "".join(t for t in (tokenizer.bos_token, tokenizer.eos_token) if t)
    ids = tokenizer.encode(specials + _PROBE, special=True)
    digest.update(b",".join(str(i).encode() for i in ids))
    return f"{size}:{digest.hexdigest()[:16]}"


def stored_fingerprint(settings: Any) -> str | None:
    """The fingerprint a conversation's settings hold, or None (an older conversation)."""
    value = settings.get(SETTINGS_KEY) if isinstance(settings, dict) else None
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class VocabularySwitch:
    """A stored conversation whose ids belong to another vocabulary than the loaded model's: ``was``, the
    model that wrote it (its name, its file's, or "another model"), and ``fingerprint``, this model's."""

    was: str
    fingerprint: str


def vocabulary_switch(info: ConversationInfo, tokenizer: Tokenizer) -> VocabularySwitch | None:
    """The rule both front ends follow before going on with a stored conversation (headless ``--resume``,
    the TUI's sidebar): a switch when it was written in another vocabulary than ``tokenizer``'s; None when
    its ids are this model's, or it was stored before fingerprints (nothing to compare).

    Going on anyway (the TUI always, headless with ``--switch-model``) is :func:`switch_record` and
    :meth:`app.conversation.conversation.Conversation.forget_reply_ids`."""
    theirs = stored_fingerprint(info.settings)
    if theirs is None:
        return None
    ours = vocabulary_fingerprint(tokenizer)
    if ours == theirs:
        return None
    return VocabularySwitch(info.model_name or Path(info.model_path).name or "another model", ours)


def switch_record(info: ConversationInfo, switch: VocabularySwitch, *, model: str, model_name: str, template: str,
                  sampling: Any = None) -> dict[str, Any]:
    """What the recorder stores (``HistoryRecorder.update(**...)``) when the stored conversation goes on with this
    model: its model, template (and ``sampling`` when given) and its settings with this vocabulary's fingerprint,
    so a later resume compares against the model that wrote last (what ``/model`` records too)."""
    meta: dict[str, Any] = {"model": model, "model_name": model_name, "template": template,
                            "settings": {**(info.settings or {}), SETTINGS_KEY: switch.fingerprint}}
    if sampling is not None:
        meta["sampling"] = sampling
    return meta
