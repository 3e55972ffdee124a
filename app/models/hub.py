"""Fetch a model from the Hugging Face Hub into huggingface_hub's cache: plan, check, download, verify.

Everything goes through ``huggingface_hub``: ``HfApi.model_info`` lists the
repo (sizes and LFS sha256), ``get_hf_file_metadata`` reads a file's
commit, etag, size and download URL, ``http_get`` streams it (Range
requests, its own retries), and ``hf_hub_download`` finally links the blob
into the snapshot and writes ``refs/main``, so the cache is exactly what
huggingface_hub would have made.  Two things are ours because
huggingface_hub (2.x) no longer does them:

- **resume across runs**: hf_hub_download writes to a temporary name it
  deletes on failure; here the partial file is ``blobs/<sha256>.incomplete``
  and the next pull continues it with a Range request;
- **the sha256 check** against the LFS hash after the download.

It also refuses before downloading when the disk lacks the space, and is
silent: huggingface_hub's retry warnings are muted, and errors become one
line (:class:`HubError`).  Settings (``HF_ENDPOINT``, ``HF_HUB_OFFLINE``,
``HF_HOME``/``HF_HUB_CACHE``, the token) are read when a call is made.

Not handled: Xet transfers (files are fetched over plain HTTP, which the hub
serves for every file), non-GGUF repos, revisions other than ``main``.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import re
import shutil
import sys
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Literal, TypeVar
from urllib.parse import urlparse

from app.models.gguf_choice import NoSuchQuant, RepoGGUF, choose, repo_ggufs
from app.models.hub_cache import PARTIAL_SUFFIX, cached_model, hf_cache_dir, hf_offline, storage_dir
from app.models.hub_ref import HubRef, ModelNotFound, RefError, model_ref

#: what one hub request (:func:`_hub_call`) returns
T = TypeVar("T")
#: seconds to wait for the hub to answer a listing or a file's metadata
METADATA_TIMEOUT_S = 10.0
#: bytes per read while downloading: progress and Esc/Ctrl-C are noticed this often
CHUNK_BYTES = 1 << 20


class HubError(ModelNotFound):
    """A model could not be fetched; the message is one line that says what to do."""


class HubUnreachable(HubError):
    """No answer from the hub (no network, or ``HF_ENDPOINT`` points nowhere)."""


class NotEnoughSpace(HubError):
    """The disk holding the cache has less free space than the download needs."""


class ChecksumMismatch(HubError):
    """The downloaded bytes do not hash to the LFS sha256 the hub announced."""


class DownloadCancelled(HubError):
    """Ctrl-C or Esc; the partial file is kept and the next pull resumes it."""


@dataclass(frozen=True)
class HubSettings:
    endpoint: str
    cache: Path
    offline: bool


def hub_settings() -> HubSettings:
    """``HF_ENDPOINT``, the cache and ``HF_HUB_OFFLINE`` as they are now (not at import time)."""
    from huggingface_hub import constants

    endpoint = (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
    return HubSettings(endpoint, hf_cache_dir(), hf_offline())


@dataclass
class Progress:
    """One progress report: bytes of the whole pull (all parts), and what is happening."""

    done: int
    total: int
    file: str
    phase: str  # "download" | "verify"


ProgressFn = Callable[[Progress], None]


@dataclass
class PullPlan:
    """What a pull will fetch, decided before a byte is downloaded."""

    ref: HubRef
    commit: str
    gguf: RepoGGUF
    reason: str
    #: every model file in the repo (what ``--list`` shows)
    choices: list[RepoGGUF]
    settings: HubSettings
    #: path in repo -> bytes already here (a finished blob counts whole, a partial file its size)
    have: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.gguf.size

    @property
    def needed(self) -> int:
        return self.total - sum(self.have.values())

    @property
    def snapshot(self) -> Path:
        return storage_dir(self.settings.cache, self.ref.repo_id) / "snapshots" / self.commit

    @property
    def local_path(self) -> Path:
        """Where the model (part 1) is once pulled."""
        return self.snapshot / self.gguf.path

    @property
    def complete(self) -> bool:
        """Every part is already in the cache at this commit."""
        return all((self.snapshot / p).exists() for p in self.gguf.paths)


@contextlib.contextmanager
def quiet_hub() -> Iterator[None]:
    """Mute huggingface_hub's retry warnings and progress bars: tokchat says what happened itself."""
    logger = logging.getLogger("huggingface_hub")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _network_error(exc: BaseException) -> bool:
    """A failure to talk to the hub (huggingface_hub 2.x raises httpx2's errors, 1.x httpx's)."""
    kinds: list[type] = [ConnectionError, TimeoutError]
    for name in ("httpx2", "httpx"):
        module = sys.modules.get(name)
        if module is not None:
            kinds.append(module.TransportError)
    return isinstance(exc, tuple(kinds))


def _hub_call(ref: HubRef, settings: HubSettings, what: Callable[[], T]) -> T:
    """Run one hub request; its failures become one-line :class:`HubError`s."""
    from huggingface_hub.errors import (EntryNotFoundError, GatedRepoError, HfHubHTTPError,
                                        RepositoryNotFoundError, RevisionNotFoundError)

    try:
        with quiet_hub():
            return what()
    except GatedRepoError as exc:
        raise HubError(f"{ref}: the repo is gated: accept its terms on the hub, then log in with `hf auth login`") \
            from exc
    except RepositoryNotFoundError as exc:
        raise HubError(f"{ref}: no such repo on {settings.endpoint} (or it is private: log in with "
                       "`hf auth login`)") from exc
    except (EntryNotFoundError, RevisionNotFoundError) as exc:
        raise HubError(f"{ref}: no such file in the repo (`tokchat pull hf:{ref.repo_id} --list` shows "
                       "what it has)") from exc
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        raise HubError(f"{ref}: the hub answered HTTP {status}: try again later") from exc
    except Exception as exc:
        if _network_error(exc):
            raise HubUnreachable(f"{ref}: the hub at {settings.endpoint} could not be reached "
                                 f"({type(exc).__name__}); check the network, or use a model already "
                                 "downloaded (`tokchat models`)") from exc
        raise


def list_repo(ref: HubRef, settings: HubSettings | None = None) -> tuple[list[RepoGGUF], str]:
    """The repo's model files (best quantization first) and the commit they are at: one request."""
    from huggingface_hub import HfApi

    settings = settings or hub_settings()
    if settings.offline:
        raise HubError(f"{ref}: the hub is offline (HF_HUB_OFFLINE or --offline): cannot list the repo")

    def fetch():
        return HfApi(endpoint=settings.endpoint).model_info(ref.repo_id, revision=ref.revision,
                                                            files_metadata=True, timeout=METADATA_TIMEOUT_S)

    info = _hub_call(ref, settings, fetch)
    files = [(s.rfilename, s.size or (s.lfs.size if s.lfs else 0), s.lfs.sha256 if s.lfs else "")
             for s in info.siblings or []]
    return repo_ggufs(files), info.sha or ref.revision


def plan_pull(ref: HubRef, *, memory: int | None = None, settings: HubSettings | None = None) -> PullPlan:
    """List the repo and choose the file (one request); nothing is downloaded."""
    settings = settings or hub_settings()
    choices, commit = list_repo(ref, settings)
    if ref.filename:
        gguf = next((g for g in choices if ref.filename in g.paths), None)
        if gguf is None:
            raise HubError(f"{ref}: no such GGUF in the repo (`tokchat pull hf:{ref.repo_id} --list` shows "
                           "what it has)")
        reason = "the file named" + (f" (with its {len(gguf.paths)} parts)" if gguf.split else "")
    else:
        try:
            gguf, reason = choose(choices, quant=None if ref.preset else ref.quant,
                                  preset_quant=ref.quant if ref.preset else None, preset=ref.preset, memory=memory)
        except NoSuchQuant as exc:
            raise HubError(f"{ref}: {exc}") from exc
    plan = PullPlan(ref, commit, gguf, reason, choices, settings)
    blobs = storage_dir(settings.cache, ref.repo_id) / "blobs"
    for path, (size, sha) in gguf.parts.items():
        if sha and (blobs / sha).is_file():
            plan.have[path] = size
        elif sha and (blobs / (sha + PARTIAL_SUFFIX)).is_file():
            plan.have[path] = min((blobs / (sha + PARTIAL_SUFFIX)).stat().st_size, size)
    return plan


def free_space(path: Path) -> int:
    """Free bytes on the disk that holds ``path`` (or its nearest existing parent)."""
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def check_space(plan: PullPlan) -> int:
    """Free bytes where the cache is; raises :class:`NotEnoughSpace` when the download cannot fit."""
    target = storage_dir(plan.settings.cache, plan.ref.repo_id)
    free = free_space(target)
    if plan.needed > free:
        raise NotEnoughSpace(f"{plan.ref}: {plan.gguf.path} needs {human_bytes(plan.needed)} but only "
                             f"{human_bytes(free)} is free on the disk holding {plan.settings.cache}: free some "
                             "space or point HF_HUB_CACHE at another disk")
    return free


def human_bytes(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _sha256(path: Path, report: Callable[[int], None]) -> str:
    digest = hashlib.sha256()
    done = 0
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(8 << 20), b""):
            digest.update(block)
            done += len(block)
            report(done)
    return digest.hexdigest()


def _bar_class(report: Callable[[int], None], cancel: threading.Event | None):
    """A tqdm stand-in for ``http_get``: forwards byte counts, and stops the download when cancelled.

    ``http_get`` calls ``update(n)`` before writing each chunk, so raising there
    leaves the partial file ending on a whole chunk.
    """

    class Bar:
        def __init__(self, *, initial: int = 0, **_: object) -> None:
            self.n = initial
            report(self.n)

        def __enter__(self) -> "Bar":
            return self

        def __exit__(self, *exc: object) -> Literal[False]:
            return False

        def update(self, n: int) -> None:
            if cancel is not None and cancel.is_set():
                raise DownloadCancelled("cancelled")
            self.n += n
            report(self.n)

    return Bar


def _fetch_file(plan: PullPlan, path: str, size: int, sha: str, base: int,
                progress: ProgressFn | None, cancel: threading.Event | None) -> None:
    """Download one file (or part) into ``blobs/<sha256>``, resuming a partial one, and verify it."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.file_download import get_hf_file_metadata

    ref, settings = plan.ref, plan.settings
    url = hf_hub_url(ref.repo_id, path, revision=plan.commit, endpoint=settings.endpoint)
    meta = _hub_call(ref, settings, lambda: get_hf_file_metadata(url, timeout=METADATA_TIMEOUT_S,
                                                                   endpoint=settings.endpoint))
    etag = meta.etag or sha
    want = sha or etag
    if not re.fullmatch(r"[0-9a-f]{64}", want or ""):
        want = ""  # a git object id (not an LFS file): there is no sha256 to check against
    size = meta.size or size
    blobs = storage_dir(settings.cache, ref.repo_id) / "blobs"
    blob = blobs / etag
    report = (lambda n, phase="download": progress(Progress(base + n, plan.total, path, phase))) \
        if progress else (lambda n, phase="download": None)
    if not blob.is_file():
        blobs.mkdir(parents=True, exist_ok=True)
        with _download_lock(ref, settings, etag, path):
            _fetch_blob(ref, settings, meta, url, path, size, want, blobs, etag, report, cancel)
    # huggingface_hub links the blob into snapshots/<commit>/ and writes refs/<revision>
    from huggingface_hub import hf_hub_download

    _hub_call(ref, settings, lambda: hf_hub_download(ref.repo_id, path, revision=ref.revision,
                                                     cache_dir=settings.cache, endpoint=settings.endpoint,
                                                     etag_timeout=METADATA_TIMEOUT_S))


@contextlib.contextmanager
def _download_lock(ref: HubRef, settings: HubSettings, etag: str, path: str) -> Iterator[None]:
    """One writer per partial file: a second tokchat pulling the same file is told to wait."""
    from filelock import FileLock, Timeout

    lock_path = settings.cache / ".locks" / storage_dir(settings.cache, ref.repo_id).name / f"{etag}.tokchat.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_path), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise HubError(f"{ref}: another tokchat is downloading {path} right now: wait for it to finish") from None
    try:
        yield
    finally:
        lock.release()


def _fetch_blob(ref: HubRef, settings: HubSettings, meta, url: str, path: str, size: int, want: str,
                blobs: Path, etag: str, report: Callable[..., None], cancel: threading.Event | None) -> None:
    """Stream the file into ``blobs/<etag>.incomplete`` (continuing it), check its sha256, rename it."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    blob = blobs / etag
    if blob.is_file():  # finished by another process while we waited
        return
    partial = blobs / (etag + PARTIAL_SUFFIX)
    if partial.is_file() and partial.stat().st_size > size:
        partial.unlink()  # longer than the file: not ours to continue
    headers = build_hf_headers()
    if urlparse(meta.location).netloc != urlparse(url).netloc:
        headers.pop("authorization", None)  # a CDN's signed URL: the token stays on the hub
    with partial.open("ab") as fh:
        resume = fh.tell()
        chunk, constants.DOWNLOAD_CHUNK_SIZE = constants.DOWNLOAD_CHUNK_SIZE, CHUNK_BYTES
        try:
            with quiet_hub():
                http_get(meta.location, fh, resume_size=resume, headers=headers, expected_size=size,
                         displayed_filename=path, tqdm_class=_bar_class(report, cancel))
        except HubError:
            raise
        except Exception as exc:
            if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
                raise NotEnoughSpace(f"{ref}: the disk holding {settings.cache} filled up during the "
                                     f"download of {path}: free some space and run the command again "
                                     "to resume") from exc
            # http_get's size check is a plain OSError: the body ended early
            if _network_error(exc) or (isinstance(exc, OSError) and exc.errno is None):
                raise HubUnreachable(f"{ref}: the download of {path} broke off ({type(exc).__name__}) "
                                     f"after {human_bytes(fh.tell())}: run the same command again to resume"
                                     ) from exc
            raise
        finally:
            constants.DOWNLOAD_CHUNK_SIZE = chunk
    got = _sha256(partial, lambda n: report(n, "verify"))
    if want and got != want:
        partial.unlink()
        raise ChecksumMismatch(f"{ref}: {path} does not match the hub's sha256 ({got[:12]}… != {want[:12]}…); "
                               "the download was deleted: pull again, and if it repeats the file on the hub "
                               "is damaged")
    partial.replace(blob)


def download(plan: PullPlan, *, progress: ProgressFn | None = None,
             cancel: threading.Event | None = None) -> Path:
    """Fetch every file of ``plan`` (all parts of a split) and return the path to load (part 1).

    Raises :class:`DownloadCancelled` when ``cancel`` is set (the partial file is
    kept), :class:`NotEnoughSpace` before downloading when the disk is too full.
    """
    check_space(plan)
    base = 0
    for path in plan.gguf.paths:
        size, sha = plan.gguf.parts[path]
        _fetch_file(plan, path, size, sha, base, progress, cancel)
        base += size
    local = plan.local_path
    if not local.exists():  # the repo moved on between listing and linking: take what refs/main says
        found = cached_model(HubRef(plan.ref.repo_id, plan.gguf.path), plan.settings.cache)
        if found is None:
            raise HubError(f"{plan.ref}: downloaded, but the cache has no link to it under {local.parent}")
        local = found
    return local


def resolve(value: str, *, progress: ProgressFn | None = None, cancel: threading.Event | None = None) -> Path:
    """The local path for ``--model VALUE`` when it names the hub (``hf:``/preset): the cache first,
    without the network; otherwise a pull (unless offline)."""
    try:
        ref = model_ref(value)
    except RefError as exc:
        raise HubError(str(exc)) from None
    if ref is None:
        raise HubError(f"{value}: not a hub reference or preset name")
    settings = hub_settings()
    found = cached_model(ref, settings.cache)
    if found is not None:
        return found
    if settings.offline:
        raise HubError(f"{ref} is not in the Hugging Face cache {settings.cache} and the hub is offline "
                       f"(HF_HUB_OFFLINE or --offline): pull it once with network: `tokchat pull {ref}`")
    try:
        plan = plan_pull(ref, settings=settings)
    except HubUnreachable as exc:
        raise HubUnreachable(f"{ref} is not in the Hugging Face cache {settings.cache} and the hub could not be "
                             f"reached ({settings.endpoint}): connect, or use a downloaded model "
                             "(`tokchat models`)") from exc
    return download(plan, progress=progress, cancel=cancel)
