"""Models from the TUI: the ``/model`` picker, and downloads that leave the chat usable.

``/model`` with no argument opens :class:`~app.tui.widgets.model_picker.ModelPicker`;
``/model REF`` where REF names the hub (``hf:...`` or a preset name) and is
not in the cache downloads it first, in a thread worker, with a progress
line in the model bar (bytes, speed, time left).  The loaded model keeps
chatting meanwhile; when the download finishes the new model loads as
``/model PATH`` does.  Esc (when no reply is streaming) cancels; the partial
file stays and the same ``/model REF`` resumes it.

:class:`ModelPull` is held by the chat window (``app.pull``) and owns the one
download that may run.  The model to open (a cached or local one at once, a
downloaded one when its download ends) is told with a :class:`ModelPull.Open`
message: loading a model is the window's.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textual.message import Message
from textual.timer import Timer

from app.tui.format import error_text
from app.tui.host import ChatHost

#: how often the model bar shows the download's progress
PROGRESS_EVERY_S = 0.1


class ModelPull:
    """The ``/model`` picker and one download at a time, with its progress in the model bar."""

    @dataclass
    class Open(Message):
        """Load ``model`` (a path, or a reference that needs no download) with its own preset."""

        model: str

    def __init__(self, host: ChatHost) -> None:
        self.host = host
        self._cancel: threading.Event | None = None
        self._ref = ""
        #: (the download's cancel event, its newest Progress), written by the download thread
        self._latest: tuple | None = None
        self._timer: Timer | None = None
        #: (monotonic time, bytes) when the download started, for its speed
        self._start: tuple[float, int] = (0.0, 0)

    @property
    def pulling(self) -> bool:
        return self._cancel is not None

    # ---------------------------------------------------------------- picker
    async def command(self, arg: str) -> None:
        """``/model [REF]``: the picker, or open REF (downloaded first when it names the hub and is not cached)."""
        from app.tui.slash import SlashError

        if self.host.generating:
            raise SlashError("/model has to wait until the reply finishes (Esc stops it)")
        if not arg:
            self.open_picker()
            return
        self.switch_model(arg)

    def open_picker(self) -> None:
        from app.tui.widgets.model_picker import ModelPicker

        chat = self.host.chat
        current = chat.model_path if chat is not None else None
        self.host.push_screen(ModelPicker(list(self.host.options.model_dirs), current), self._picked)

    def _picked(self, value: str | None) -> None:
        if value:
            self.switch_model(value)

    def switch_model(self, value: str) -> None:
        """Open ``value`` (a path, ``hf:`` reference or preset name): download first when needed."""
        if self.pulling:
            self.host.notify(f"A download is running ({self._ref}): wait, or press Esc to cancel it",
                             severity="warning")
            return
        if self._needs_download(value):
            self._start_pull(value)
            return
        self.host.post_message(self.Open(value))

    @staticmethod
    def _needs_download(value: str) -> bool:
        from app.models.hub import hub_settings
        from app.models.hub_cache import cached_model
        from app.models.hub_ref import RefError, model_ref

        try:
            ref = model_ref(value)
        except RefError:
            return False  # loading reports the bad reference
        if ref is None:
            return False
        settings = hub_settings()
        return not settings.offline and cached_model(ref, settings.cache) is None

    # -------------------------------------------------------------- download
    def _start_pull(self, value: str) -> None:
        cancel = threading.Event()
        self._cancel, self._ref = cancel, value
        self._start = (time.monotonic(), 0)
        self._latest = None
        self._timer = self.host.set_interval(PROGRESS_EVERY_S, self._render_latest)
        self._show_download(f"looking up {value} on the hub")
        self.host.run_worker(lambda: self._pull_thread(value, cancel), thread=True, group="pull",
                             exit_on_error=False)

    def _pull_thread(self, value: str, cancel: threading.Event) -> None:
        from app.models.hub import DownloadCancelled, check_space, download, plan_pull
        from app.models.hub_ref import model_ref

        host = self.host
        try:
            ref = model_ref(value)
            assert ref is not None  # only a hub reference is pulled (_needs_download)
            plan = plan_pull(ref)
            check_space(plan)
            host.call_from_thread(self._planned, cancel, plan)
            path = download(plan, progress=lambda p: setattr(self, "_latest", (cancel, p)), cancel=cancel)
        except DownloadCancelled:
            return  # Esc already said so
        except Exception as exc:  # shown on screen; the chat goes on with the loaded model
            host.call_from_thread(self._failed, cancel, error_text(exc))
            return
        host.call_from_thread(self._done, cancel, path)

    def _render_latest(self) -> None:
        """Timer tick: show the newest progress the download thread left (it never waits for the UI)."""
        latest = self._latest
        if latest is not None:
            self._progress(*latest)

    def _planned(self, cancel: threading.Event, plan: Any) -> None:
        from app.models.hub import human_bytes

        if cancel is not self._cancel:
            return
        self._start = (time.monotonic(), sum(plan.have.values()))
        resumed = f", resuming after {human_bytes(sum(plan.have.values()))}" if plan.have else ""
        self.host.notify(f"Downloading {plan.gguf.path} ({human_bytes(plan.needed)}{resumed}): {plan.reason}. "
                         "Esc cancels.", title="Download")

    def _progress(self, cancel: threading.Event, progress: Any) -> None:
        from app.models.hub import human_bytes

        if cancel is not self._cancel:
            return
        name = Path(progress.file).name
        if progress.phase == "verify":
            self._show_download(f"checking sha256 of {name}")
            return
        started, base = self._start
        elapsed = time.monotonic() - started
        speed = (progress.done - base) / elapsed if elapsed > 0 else 0.0
        left = f" · {int((progress.total - progress.done) / speed)} s left" if speed > 0 else ""
        self._show_download(f"↓ {name} {human_bytes(progress.done)}/{human_bytes(progress.total)}"
                            f" · {human_bytes(int(speed))}/s{left} · Esc cancels")

    def _done(self, cancel: threading.Event, path: Path) -> None:
        if cancel is not self._cancel:
            return
        self._end()
        self.host.notify(f"Downloaded {path.name}; loading it", title="Download")
        self.host.post_message(self.Open(str(path)))

    def _failed(self, cancel: threading.Event, error: str) -> None:
        if cancel is not self._cancel:
            return
        self._end()
        self.host.notify(error, title="Download failed", severity="error", timeout=10)

    def cancel(self) -> bool:
        """Esc: stop the download (the partial file is kept); False when none runs."""
        if self._cancel is None:
            return False
        self._cancel.set()
        ref = self._ref
        self._end()
        self.host.notify(f"Download stopped; the partial file is kept: /model {ref} resumes it", title="Download")
        return True

    def _end(self) -> None:
        self._cancel = None
        self._latest = None
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self._show_download("")
        self.host.refresh_bindings()

    def _show_download(self, text: str) -> None:
        from app.tui.widgets.model_bar import ModelBar

        self.host.query_one(ModelBar).download = text
        self.host.refresh_bindings()

    def close(self) -> None:
        """Quit: stop a download at its next chunk, so the process can exit."""
        if self._cancel is not None:
            self._cancel.set()
