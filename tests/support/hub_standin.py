"""A local stand-in for the Hugging Face Hub, so the real ``huggingface_hub`` client can be tested here.

The hub cannot be reached from this machine (and tests never reach the
internet), so tests start this server on loopback and point ``HF_ENDPOINT``
at it.  It serves files from disk under the hub's URL scheme, with the
headers ``huggingface_hub`` reads (``file_download.get_hf_file_metadata`` and
``http_get``; ``hf_api.model_info`` and ``list_repo_tree``):

- ``GET /api/models/{repo}[/revision/{rev}]``: id, sha, siblings with
  ``size``, ``blobId`` and ``lfs {sha256, size, pointerSize}``.
- ``GET /api/models/{repo}/tree/{rev}[/{path}]``: files and folders, one page.
- ``HEAD|GET /{repo}/resolve/{rev}/{file}``: ``X-Repo-Commit``,
  ``X-Linked-Etag`` (the LFS sha256, which names the cache blob),
  ``X-Linked-Size``, ``ETag``, ``Content-Length``, ``Accept-Ranges``;
  ``Range: bytes=N-`` answers 206 with ``Content-Range``.
- unknown repos and files answer 404 with ``X-Error-Code`` (RepoNotFound,
  EntryNotFound), as the hub does, so the client raises its typed errors.

Faults a test can ask for: cut the connection after N bytes of a file (the
next request is served whole), advertise a wrong sha256 or a huge size, and
hold a download after N bytes until the test releases it.  Every request is
logged (method, path, Range) so tests can check what the client asked for.

Not served: Xet storage (no ``X-Xet-Hash``, so the client uses plain HTTP),
redirects to a CDN, gated or private repos, pagination beyond one page.
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator
from urllib.parse import unquote, urlparse

#: bytes written per socket send (small enough for cuts and holds to land mid-file)
SEND_CHUNK = 256 * 1024


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class HostedFile:
    """One file in a stand-in repo: what is served, and what the hub says about it."""

    source: Path
    sha256: str  # advertised LFS sha256 (a test may make it wrong on purpose)
    size: int  # advertised size (a test may inflate it)
    #: the next GET is cut after this many bytes (then cleared)
    cut_after: int | None = None
    #: GETs stop after this many bytes until ``release`` is set
    hold_after: int | None = None
    release: threading.Event = field(default_factory=threading.Event)


@dataclass
class Request:
    method: str
    path: str
    range: str | None


@dataclass
class StandinRepo:
    commit: str
    files: dict[str, HostedFile] = field(default_factory=dict)


class HubStandin:
    """Start with :meth:`start`; ``endpoint`` is what ``HF_ENDPOINT`` should be."""

    def __init__(self) -> None:
        self.repos: dict[str, StandinRepo] = {}
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._sha_cache: dict[Path, str] = {}

    # --------------------------------------------------------------- content
    def add_file(self, repo_id: str, path_in_repo: str, source: Path, *, sha256: str | None = None,
                 size: int | None = None) -> HostedFile:
        """Host ``source`` as ``path_in_repo`` of ``repo_id`` (the repo is created on first use)."""
        repo = self.repos.setdefault(repo_id, StandinRepo(hashlib.sha1(repo_id.encode()).hexdigest()))
        source = Path(source)
        if sha256 is None:
            sha256 = self._sha_cache.get(source) or sha256_of(source)
            self._sha_cache[source] = sha256
        hosted = HostedFile(source, sha256, source.stat().st_size if size is None else size)
        repo.files[path_in_repo] = hosted
        return hosted

    def file(self, repo_id: str, path_in_repo: str) -> HostedFile:
        return self.repos[repo_id].files[path_in_repo]

    def gets(self, path_suffix: str) -> list[Request]:
        """The GET requests for a file whose URL path ends with ``path_suffix``."""
        with self._lock:
            return [r for r in self.requests if r.method == "GET" and r.path.endswith(path_suffix)]

    # --------------------------------------------------------------- server
    def start(self) -> str:
        standin = self

        class Handler(_Handler):
            hub = standin

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="hub-standin", daemon=True)
        self._thread.start()
        return self.endpoint

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        for repo in self.repos.values():
            for hosted in repo.files.values():
                hosted.release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _log(self, method: str, path: str, range_header: str | None) -> None:
        with self._lock:
            self.requests.append(Request(method, path, range_header))


_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/]+))?$")
_TREE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?$")
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


class _Handler(BaseHTTPRequestHandler):
    """One request; ``hub`` is set on the subclass that :meth:`HubStandin.start` makes."""

    hub: HubStandin
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # quiet: pytest shows the request log
        return

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    # ---------------------------------------------------------------- routes
    def _serve(self, head: bool) -> None:
        path = unquote(urlparse(self.path).path)
        self.hub._log(self.command, path, self.headers.get("Range"))
        if match := _RESOLVE.match(path):
            self._resolve(match["repo"], match["rev"], match["file"], head)
        elif match := _TREE.match(path):
            self._tree(match["repo"], match["rev"], (match["path"] or "").strip("/"))
        elif match := _API.match(path):
            self._model_info(match["repo"])
        else:
            self._error(404, "RepoNotFound", f"no route {path}")

    def _repo(self, repo_id: str) -> StandinRepo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", f"Repository Not Found for {repo_id}")
        return repo

    def _model_info(self, repo_id: str) -> None:
        repo = self._repo(repo_id)
        if repo is None:
            return
        siblings = [{"rfilename": name, "size": f.size, "blobId": _git_oid(name),
                     "lfs": {"sha256": f.sha256, "size": f.size, "pointerSize": 134}}
                    for name, f in sorted(repo.files.items())]
        self._json({"id": repo_id, "modelId": repo_id, "sha": repo.commit, "private": False,
                    "gated": False, "disabled": False, "tags": ["gguf"], "siblings": siblings})

    def _tree(self, repo_id: str, rev: str, prefix: str) -> None:
        repo = self._repo(repo_id)
        if repo is None:
            return
        recursive = "recursive=true" in (urlparse(self.path).query or "").lower()
        entries, folders = [], set()
        for name, f in sorted(repo.files.items()):
            if prefix and not name.startswith(prefix + "/"):
                continue
            rest = name[len(prefix) + 1:] if prefix else name
            if "/" in rest and not recursive:
                folders.add((prefix + "/" if prefix else "") + rest.split("/")[0])
                continue
            entries.append({"type": "file", "path": name, "size": f.size, "oid": _git_oid(name),
                            "lfs": {"oid": f.sha256, "size": f.size, "pointerSize": 134}})
        entries += [{"type": "directory", "path": d, "oid": _git_oid(d)} for d in sorted(folders)]
        self._json(entries)

    def _resolve(self, repo_id: str, rev: str, name: str, head: bool) -> None:
        repo = self._repo(repo_id)
        if repo is None:
            return
        hosted = repo.files.get(name)
        if hosted is None:
            self._error(404, "EntryNotFound", f"{name} not in {repo_id}", commit=repo.commit)
            return
        real_size = hosted.source.stat().st_size
        start = 0
        if not head and (match := _RANGE.match(self.headers.get("Range", ""))):
            start = int(match[1])
        status = 206 if start else 200
        self.send_response(status)
        self.send_header("X-Repo-Commit", repo.commit)
        self.send_header("X-Linked-Etag", f'"{hosted.sha256}"')
        self.send_header("X-Linked-Size", str(hosted.size))
        self.send_header("ETag", f'"{hosted.sha256}"')
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(max(hosted.size if head else real_size - start, 0)))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{real_size - 1}/{real_size}")
        self.end_headers()
        if head:
            return
        cut, hosted.cut_after = hosted.cut_after, None
        with hosted.source.open("rb") as fh:
            fh.seek(start)
            sent = start
            while block := fh.read(SEND_CHUNK):
                if cut is not None and sent + len(block) > cut:
                    self.wfile.write(block[:max(cut - sent, 0)])
                    self.wfile.flush()
                    self.close_connection = True  # the body is short: the client sees the peer close
                    return
                if hosted.hold_after is not None and sent + len(block) > hosted.hold_after:
                    hosted.release.wait(timeout=120)
                try:
                    self.wfile.write(block)
                except (BrokenPipeError, ConnectionResetError):  # the client cancelled
                    self.close_connection = True
                    return
                sent += len(block)

    # --------------------------------------------------------------- replies
    def _json(self, data: object) -> None:
        body = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, code: str, message: str, commit: str | None = None) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        if commit:
            self.send_header("X-Repo-Commit", commit)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


def _git_oid(name: str) -> str:
    return hashlib.sha1(name.encode()).hexdigest()


def point_hub_at(endpoint: str, home: Path, monkeypatch) -> Path:
    """Make huggingface_hub (and tokchat) use ``endpoint`` and a fresh cache under ``home``; the hub cache."""
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("HF_HOME", str(home))
    for name in ("HF_HUB_CACHE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HF_HUB_ENABLE_HF_TRANSFER"):
        monkeypatch.delenv(name, raising=False)
    # explicitly online: huggingface_hub keeps whatever HF_HUB_OFFLINE was when it was first imported
    # (an earlier test in this process may have set it), and refuses requests while that is on
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    return home / "hub"


#: the repo and file the stand-in serves SmolLM2 under (see :func:`serving_smollm`)
SMOLLM_REPO = "tokchat-test/SmolLM2-135M-Instruct-GGUF"
SMOLLM_FILE = "SmolLM2-135M-Instruct-Q4_1.gguf"


@contextmanager
def serving_smollm(smollm_path: Path, home: Path, monkeypatch) -> Iterator[HubStandin]:
    """A started stand-in serving ``SMOLLM_REPO/SMOLLM_FILE``, with the hub client pointed at it
    (a fresh cache under ``home``); stopped on exit."""
    server = HubStandin()
    server.add_file(SMOLLM_REPO, SMOLLM_FILE, smollm_path)
    server.start()
    point_hub_at(server.endpoint, home, monkeypatch)
    try:
        yield server
    finally:
        server.stop()
