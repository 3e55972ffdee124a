"""``tokchat pull REF``: download a model from the Hugging Face Hub with a progress bar.

REF is ``hf:ORG/REPO/FILE.gguf``, ``hf:ORG/REPO:Q4_K_M``, ``hf:ORG/REPO``
(the file is chosen, and the choice explained) or a preset name.  Before
downloading it says which file, why, its size and the free space; Ctrl-C
stops and keeps the partial file, which the next pull resumes.  ``--list``
shows the repo's GGUFs and the choice without downloading.  The same pull
runs on first use of ``tokchat --model REF`` (:func:`pull_if_missing`).
"""
from __future__ import annotations

import argparse
import os
import threading
from pathlib import Path
from typing import Callable


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("ref", help="hf:ORG/REPO/FILE.gguf, hf:ORG/REPO:QUANT, hf:ORG/REPO or a preset name")
    parser.add_argument("--list", action="store_true", help="list the repo's GGUF files and the choice; download nothing")
    parser.add_argument("--offline", action="store_true", help="do not contact the hub (same as HF_HUB_OFFLINE=1)")


def _console():
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def _ref(value: str):
    from app.errors import CLIError
    from app.models.hub_ref import FORMS, RefError, model_ref

    try:
        ref = model_ref(value)
    except RefError as exc:
        raise CLIError(str(exc)) from None
    if ref is None:
        raise CLIError(f"{value}: not a hub reference or a preset with a hub repo (expected {FORMS})")
    return ref


def print_listing(choices, chosen, reason: str, out) -> None:
    """The repo's GGUFs (best quantization first), the chosen one marked, and why."""
    from app.models.hub import human_bytes

    rows = [("", "QUANT", "SIZE", "FILE")]
    for gguf in choices:
        parts = f" (+{len(gguf.paths) - 1} parts)" if gguf.split else ""
        rows.append(("*" if gguf is chosen else "", gguf.quant or "?", human_bytes(gguf.size), gguf.path + parts))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for row in rows:
        out.print("  ".join(f"{cell:<{w}}" for cell, w in zip(row, widths)) + "  " + row[3], markup=False)
    if chosen is not None:
        out.print(f"* {chosen.path}: {reason}", markup=False)


def _list_cached(ref, settings, out) -> None:
    """``--list`` offline: what the cache holds of the repo."""
    from app.models.hub import HubError
    from app.models.hub_cache import cached_ggufs, cached_model

    ggufs, snapshot = cached_ggufs(settings.cache, ref.repo_id, ref.revision)
    if not ggufs:
        raise HubError(f"{ref}: offline, and the cache holds nothing of {ref.repo_id}")
    found = cached_model(ref, settings.cache)
    assert snapshot is not None  # the files were found in a snapshot
    chosen = next((g for g in ggufs if found == snapshot / g.path), None)
    print_listing(ggufs, chosen, "what --model would open", out)
    out.print("(offline: only the files in the cache are listed)", markup=False)


def download_with_bar(plan, console) -> Path:
    """Run :func:`app.models.hub.download` under a Rich progress bar (bytes, speed, time left)."""
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                               TransferSpeedColumn)

    from app.models.hub import download

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(Path(plan.gguf.path).name, total=plan.total, completed=sum(plan.have.values()))

        def update(p) -> None:
            label = Path(p.file).name if p.phase == "download" else f"checking sha256 of {Path(p.file).name}"
            done = p.done if p.phase == "download" else p.total
            bar.update(task, completed=done, description=label)

        return _interruptible(lambda cancel: download(plan, progress=update, cancel=cancel))


def _interruptible(run: Callable[[threading.Event], Path]) -> Path:
    """``run(cancel)`` on a daemon thread while this (main) thread waits in short, interruptible steps.

    A download blocked in a socket read on the main thread may never see Ctrl-C:
    a server that stops sending without closing leaves the read waiting for
    bytes that do not come (seen as a pull that ignored Ctrl-C for over a minute).
    Waiting here instead, Ctrl-C is taken at once: the download is told to stop
    (at its next chunk) and, if it is stuck, left behind with the process; the
    partial file keeps what was written, and the next pull resumes it.
    """
    cancel = threading.Event()
    outcome: dict[str, Path] = {}
    failure: dict[str, BaseException] = {}

    def target() -> None:
        try:
            outcome["path"] = run(cancel)
        except BaseException as exc:  # handed to the main thread, which raises it
            failure["error"] = exc

    worker = threading.Thread(target=target, name="tokchat-pull", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.1)
    except KeyboardInterrupt:
        cancel.set()
        worker.join(2.0)  # a download still receiving stops at its next chunk
        raise
    if "error" in failure:
        raise failure["error"]
    return outcome["path"]


def pull(ref, console) -> Path:
    """Plan, explain, check space, download; returns the local path (part 1 of a split)."""
    from app.models.hub import DownloadCancelled, check_space, human_bytes, plan_pull

    plan = plan_pull(ref)
    if plan.complete:
        console.print(f"{ref}: {plan.gguf.path} is already downloaded: {plan.local_path}", markup=False)
        return plan.local_path
    free = check_space(plan)
    parts = f" in {len(plan.gguf.paths)} parts" if plan.gguf.split else ""
    resumed = f", resuming after {human_bytes(sum(plan.have.values()))}" if plan.have else ""
    console.print(f"{ref}: {plan.gguf.path} ({plan.reason})", markup=False)
    console.print(f"downloading {human_bytes(plan.needed)}{parts}{resumed} into {plan.settings.cache} "
                  f"({human_bytes(free)} free)", markup=False)
    try:
        path = download_with_bar(plan, console)
    except KeyboardInterrupt:
        raise DownloadCancelled(f"{ref}: download stopped; the partial file is kept and "
                                f"`tokchat pull {ref}` resumes it") from None
    console.print(f"done: sha256 checked; `tokchat --model {ref}` opens it", markup=False)
    return path


def pull_if_missing(model: str | None, offline: bool = False) -> None:
    """``tokchat --model REF``: pull REF with a progress bar first when the cache lacks it.

    Offline, or for a local path, nothing happens here: resolution answers
    (from the cache, or with one line saying what is missing).
    """
    from app.models.hub_ref import RefError, model_ref

    try:
        ref = model_ref(model)
    except RefError:
        return  # resolution reports it
    if ref is None or offline:
        return
    from app.models.hub import hub_settings  # only for hub references: a local model never pays for it
    from app.models.hub_cache import cached_model

    settings = hub_settings()
    if settings.offline or cached_model(ref, settings.cache) is not None:
        return
    pull(ref, _console())


def run(args: argparse.Namespace) -> int:
    from app.models.hub import HubUnreachable, hub_settings, plan_pull, resolve
    from app.models.hub_cache import cached_model

    if args.offline:
        os.environ["HF_HUB_OFFLINE"] = "1"
    ref = _ref(args.ref)
    console = _console()
    from rich.console import Console

    out = Console(highlight=False, soft_wrap=True)  # stdout, for --list
    settings = hub_settings()
    cached = cached_model(ref, settings.cache)
    if args.list:
        if settings.offline:
            _list_cached(ref, settings, out)
            return 0
        plan = plan_pull(ref, settings=settings)
        print_listing(plan.choices, plan.gguf, plan.reason, out)
        return 0
    if settings.offline:
        path = resolve(args.ref)  # the cache, or one line saying it is not there
        console.print(f"{ref}: in the cache (offline): {path}", markup=False)
        return 0
    try:
        pull(ref, console)
    except HubUnreachable:
        if cached is None:
            raise
        console.print(f"{ref}: the hub could not be reached; the cached copy stays usable: {cached}",
                      markup=False)
    return 0
