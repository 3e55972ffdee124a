"""Connecting to a server: is it there, which kind, what it serves, and are our ids its ids.

:func:`connect` returns a :class:`backends.remote.RemoteBackend` ready to generate, or
raises one :class:`backends.base.BackendError` line.  In order:

1. ``GET /health`` (all three servers have it): reachable, and not still loading.
2. The kind: detected from the server's own endpoints: ``/props`` with ``build_info``
   is llama-server, ``/get_model_info`` is SGLang, ``/version`` is vLLM.  A
   ``--server-kind`` that contradicts what was detected is refused (the server does not
   speak that protocol); one given for a server that looks like none of them is trusted.
3. What it serves (:meth:`RemoteBackend.describe`): model, context size, vocabulary size.
4. The vocabulary check: a probe text with special tokens, emoji, CJK, digits and
   whitespace goes through the server's ``/tokenize`` and through our tokenizer; the ids
   must be equal, and so must ``n_vocab`` where the server reports it.  A mismatch
   refuses to connect (unless ``trust_server_vocab``): token ids mean nothing across
   vocabularies, so a chat would be silent nonsense, not an error.

:func:`server_tokenizer_source` finds our tokenizer for what the server serves when the
user gave no ``--model``: the same file on this machine, or the Hugging Face cache.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backends.base import BackendError
from backends.remote import RemoteBackend, RemoteSettings, _http_error, _transport_error
from backends.remote_protocol import SERVER_KINDS, Adapter, ServerInfo

if TYPE_CHECKING:
    from tokenizer.protocol import Tokenizer

#: the probe's fixed part; the tokenizer's own special tokens are added around it
PROBE_TEXT = ("Hello, world! The year 2025 has 365 days; 1234567 + 89 = 1234656.\n"
              "Emoji 🙂👍🏽🇯🇵, CJK 日本語のテキストと中文字符, accents café naïve Ünïcödé,\n\t  spaces   and\ttabs.")


class VocabularyMismatch(BackendError):
    """The server's token ids are not ours: refuse, unless the user trusts the server."""


def make_adapter(kind: str, tokenizer: Tokenizer | None = None) -> Adapter:
    """The adapter for ``kind``; llama-server's recovers held-back ids with ``tokenizer``."""
    if kind == "llamacpp":
        from backends.remote_llamacpp import HeldBackIds, LlamaCppAdapter

        held = None
        if tokenizer is not None:
            held = HeldBackIds(tokenizer.token_bytes, tokenizer.vocab_size, tokenizer.is_special)
        return LlamaCppAdapter(held_back=held)
    if kind == "vllm":
        from backends.remote_vllm import VLLMAdapter

        return VLLMAdapter()
    if kind == "sglang":
        from backends.remote_sglang import SGLangAdapter

        return SGLangAdapter()
    raise BackendError(f"unknown server kind {kind!r}: use one of {', '.join(SERVER_KINDS)}")


def _get(backend: RemoteBackend, path: str) -> Any:
    """``GET path``, its whole (size-capped) answer within the connect timeout."""
    import httpx

    from backends.remote import _send
    from backends.remote_protocol import Request

    try:
        return _send(backend.client, Request("GET", path), backend.settings.url, backend.settings.connect_timeout_s)
    except httpx.HTTPError as exc:
        raise _transport_error(exc, backend.settings.url, streaming=False, path=path,
                               timeout_s=backend.settings.connect_timeout_s) from exc


def check_health(backend: RemoteBackend) -> None:
    """Raise one line unless the server answers ``/health`` (200, or 404 for servers without it)."""
    resp = _get(backend, "/health")
    _refuse_redirect(resp, backend.settings.url, "/health")
    if resp.status_code >= 400 and resp.status_code != 404:
        raise _http_error(resp, backend.settings.url)


def _refuse_redirect(resp: Any, url: str, path: str) -> None:
    """One line naming a redirect (a proxy's login page, http -> https, a moved server): tokchat does not
    follow one, since a redirected POST loses its body and a bearer token must not go to another host."""
    if not 300 <= resp.status_code < 400:
        return
    from urllib.parse import urljoin

    location = str(resp.headers.get("location", "")).strip()[:300]
    target = urljoin(url.rstrip("/") + path, location) if location else ""
    where = f"to {target}" if target else "without saying where (no Location header)"
    fix = (f"pass --server {target[: -len(path)]}" if target.endswith(path) and target[: -len(path)] != url.rstrip("/")
           else "pass the server's own address as --server")
    raise BackendError(f"the server at {url} redirects {path} {where} (HTTP {resp.status_code}): tokchat does not "
                       f"follow redirects; {fix}")


KIND_NAMES = {"llamacpp": "llama-server", "vllm": "vLLM", "sglang": "SGLang"}


def detect_kind(backend: RemoteBackend) -> str:
    """The server kind, from the endpoints only one of them has (see the module docstring)."""
    for path, kind in (("/props", "llamacpp"), ("/get_model_info", "sglang"), ("/version", "vllm")):
        resp = _get(backend, path)
        _refuse_redirect(resp, backend.settings.url, path)
        if resp.status_code in (401, 403, 429) or resp.status_code >= 500:
            raise _http_error(resp, backend.settings.url)  # refused, busy or failing: say so, not "no such server"
        if resp.status_code != 200:
            continue
        try:
            body = resp.json()
        except (ValueError, RecursionError):
            continue
        if kind == "llamacpp" and not (isinstance(body, dict) and "build_info" in body):
            continue
        return kind
    raise BackendError(f"the server at {backend.settings.url} looks like none of llama-server, vLLM or "
                       "SGLang (no /props, /get_model_info or /version): pass --server-kind")


def probe_text(tokenizer: Tokenizer) -> str:
    """:data:`PROBE_TEXT` wrapped in the tokenizer's BOS/EOS texts: specials must match too."""
    specials = [t for t in (tokenizer.bos_token, tokenizer.eos_token) if t]
    return "".join(specials[:1]) + PROBE_TEXT + "".join(specials[1:])


def check_vocabulary(backend: RemoteBackend, tokenizer: Tokenizer, source: str) -> None:
    """Raise :class:`VocabularyMismatch` naming both sides when the ids differ."""
    server = backend.server or ServerInfo(kind=backend.adapter.kind, url=backend.settings.url)
    theirs = f"the server at {server.url} ({Path(server.model).name or server.model or 'its model'})"
    ours = f"tokchat's tokenizer (from {source})"
    fix = "pass --model with the model the server serves, or --trust-server-vocab to chat anyway"
    if server.n_vocab and server.n_vocab != tokenizer.vocab_size:
        raise VocabularyMismatch(f"vocabulary mismatch: {theirs} has {server.n_vocab} tokens, "
                                 f"{ours} has {tokenizer.vocab_size}; {fix}")
    text = probe_text(tokenizer)
    expected = tokenizer.encode(text, special=True)
    got = backend.tokenize(text)
    if got != expected:
        at = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
        server_id = got[at] if at < len(got) else "nothing"
        our_id = expected[at] if at < len(expected) else "nothing"
        raise VocabularyMismatch(
            f"vocabulary mismatch: {theirs} tokenizes the probe text into {len(got)} ids, {ours} into "
            f"{len(expected)}; first difference at id #{at} (server {server_id}, tokchat {our_id}); {fix}")


def _hf_cached(repo: str, filename: str) -> Any:
    """``filename`` of ``repo`` in the Hugging Face cache named by the environment as it is now."""
    import os

    from huggingface_hub import constants, try_to_load_from_cache

    cache = os.environ.get("HF_HUB_CACHE") or (
        str(Path(os.environ["HF_HOME"]) / "hub") if os.environ.get("HF_HOME") else constants.HF_HUB_CACHE)
    return try_to_load_from_cache(repo, filename, cache_dir=cache)


#: a Hugging Face repo id as the hub validates one: ORG/NAME of letters, digits, "-", "_" and ".", at most 96 each
_REPO_ID = re.compile(r"(?![-.])[\w.-]{1,96}(?<![-.])/(?![-.])[\w.-]{1,96}(?<![-.])", re.ASCII)


def hub_repo_id(name: str) -> str | None:
    """``name`` if it can be a Hugging Face repo id (``Qwen/Qwen2.5-7B-Instruct``, what vLLM and SGLang
    report), else None: a path a server names (``/models/Qwen2.5 7B Instruct.gguf``, issue 44 C5) is a
    file on the server's machine, never a repo, whatever its number of slashes."""
    if not name or name.startswith(("/", "~", ".")) or name.lower().endswith(".gguf"):
        return None
    repo = name.rstrip("/")
    return repo if _REPO_ID.fullmatch(repo) and "--" not in repo and ".." not in repo else None


def server_tokenizer_source(server: ServerInfo) -> Path:
    """A local tokenizer for what ``server`` serves: the same file here, or the HF cache."""
    name = server.model
    path = Path(name).expanduser() if name else None
    if path is not None and path.is_file():
        return path
    repo = hub_repo_id(name)
    if repo is not None:
        cached = _hf_cached(repo, "tokenizer.json")
        if isinstance(cached, str):
            return Path(cached).parent
        hint = (f"or fetch its tokenizer once: `hf download {repo} tokenizer.json tokenizer_config.json`")
    else:
        hint = "(copy the model's GGUF here; a vocab-only GGUF is enough)"
    raise BackendError(
        f"the server at {server.url} serves {name or 'a model it does not name'}, whose tokenizer tokchat "
        f"cannot find here: pass --model PATH.gguf, --model DIR (with tokenizer.json) {hint}")


def open_client(settings: RemoteSettings) -> RemoteBackend:
    """A client for ``settings.url`` that reached ``/health``, with its adapter chosen."""
    if not settings.url.startswith(("http://", "https://")):
        raise BackendError(f"--server needs an http:// or https:// URL, not {settings.url!r}")
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(settings.url)
    except ValueError as exc:  # before any port: an unclosed "[", a character NFKC turns into a separator
        raise BackendError(f"--server {settings.url!r} is a malformed URL: {_malformed(str(exc))}") from None
    try:
        parts.port  # noqa: B018 - raises ValueError for a port outside 0-65535 or not a number
    except ValueError as exc:
        raise BackendError(f"--server {settings.url!r} is not a usable URL ({exc}): ports go from 1 to 65535") from None
    if not parts.hostname or parts.port == 0:
        raise BackendError(f"--server {settings.url!r} names no host or port 0: give http(s)://HOST[:PORT]")
    backend = RemoteBackend(settings, make_adapter(settings.kind if settings.kind != "auto" else "llamacpp"))
    try:
        check_health(backend)
        kind = _checked_kind(backend, settings.kind)
        backend.adapter = make_adapter(kind)
        backend.describe()
    except BaseException:
        backend.close()
        raise
    return backend


def _malformed(reason: str) -> str:
    """urlsplit's reason in the user's terms (it says "Invalid IPv6 URL" for any unbalanced bracket)."""
    if reason == "Invalid IPv6 URL":
        return "its host has a '[' without a closing ']' (or a ']' without '['): write an IPv6 host as http://[::1]:8080"
    return reason


def _checked_kind(backend: RemoteBackend, asked: str) -> str:
    """``asked`` (or the detected kind for auto), refused when the server is another kind."""
    try:
        found = detect_kind(backend)
    except BackendError:
        if asked == "auto":
            raise
        return asked  # none of the three by its endpoints: the user says which protocol it speaks
    if asked not in ("auto", found):
        raise BackendError(f"the server at {backend.settings.url} is {KIND_NAMES[found]}, which does not speak "
                           f"{KIND_NAMES.get(asked, asked)}'s protocol: pass --server-kind {found} (or auto)")
    return found


def finish_connect(backend: RemoteBackend, tokenizer: Tokenizer, source: str, n_ctx: int | None = None,
                   state_dir: Path | None = None) -> RemoteBackend:
    """Steps 3 and 4 of the module docstring on an :func:`open_client`, then what tokchat keeps of the server's
    state under ``state_dir`` (:func:`backends.remote_slots.server_state`; None: states off); closes it on
    failure."""
    settings = backend.settings
    try:
        backend.adapter = make_adapter(backend.adapter.kind, tokenizer)
        backend.vocab_size = tokenizer.vocab_size
        backend.describe()
        # llama-server's slot is left to the server (id_slot -1): it takes the idle slot whose cache holds the
        # most of the prompt (--slot-prompt-similarity), so a conversation finds its own slot again from any
        # process, while the TUI's turns, a headless --resume or another client run.  A slot picked here at
        # random (as before issue 44) sent a --resume to another slot 3 times in 4, evaluating its whole prompt.
        if settings.trust_server_vocab:
            backend.info.notes.append("vocabulary check skipped (--trust-server-vocab)")
        else:
            check_vocabulary(backend, tokenizer, source)
            backend.info.notes.append("vocabulary check passed: the server's ids are ours")
        if n_ctx:
            if backend.info.context_size and n_ctx > backend.info.context_size:
                backend.info.notes.append(f"the context size asked for ({n_ctx} tokens, --ctx or model.context_size) "
                                          f"is more than the server's {backend.info.context_size}; using the server's")
            else:
                backend.info.context_size = n_ctx
        if not backend.info.context_size:
            raise BackendError(f"the server at {settings.url} does not say its context size: pass --ctx")
        from backends.remote_slots import server_state

        backend.state = server_state(backend, state_dir)
    except BaseException:
        backend.close()
        raise
    return backend


def connect(settings: RemoteSettings, tokenizer: Tokenizer, source: str, n_ctx: int | None = None,
            state_dir: Path | None = None) -> RemoteBackend:
    """The whole connect sequence (module docstring) for a chat with ``tokenizer``."""
    return finish_connect(open_client(settings), tokenizer, source, n_ctx, state_dir)
