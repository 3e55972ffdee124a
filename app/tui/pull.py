"""Models from the TUI: the ``/model`` picker, and downloads that leave the chat usable.

``/model`` with no argument opens :class:`~app.tui.widgets.model_picker.ModelPicker`;
``/model REF`` where REF names the hub (``hf:...`` or a preset name) and is
not in the cache downloads it first, in a thread worker, with a progress
line in the model bar (bytes, speed, time left).  The loaded model keeps
chatting meanwhile; when the download finishes the new model loads as
``/model PATH`` does.  Esc (when no reply is streaming) cancels; the partial
file stays and the same ``/model REF`` resumes it.

A mixin of :class:`app.tui.app.ChatApp` (``self`` is the app), like
:mod:`app.tui.commands`.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

#: how often the model bar shows the download's progress
PROGRESS_EVERY_S = 0.1


class PullMixin:
    """Pull state: one download at a time, owned here."""

    _pull_cancel: threading.Event | None = None
    _pull_ref: str = ""
    #: (the download's cancel event, its newest Progress), written by the download thread
    _pull_latest: tuple | None = None
    _pull_timer = None
    #: (monotonic time, bytes) when the download started, for its speed
    _pull_start: tuple[float, int] = (0.0, 0)

    @property
    def pulling(self) -> bool:
        return self._pull_cancel is not None

    # ---------------------------------------------------------------- picker
    def open_model_picker(self) -> None:
        from app.tui.widgets.model_picker import ModelPicker

        current = self.chat.model_path if self.chat is not None else None
        self.push_screen(ModelPicker(list(self.options.model_dirs), current), self._picked)

    def _picked(self, value: str | None) -> None:
        if value:
            self.switch_model(value)

    def switch_model(self, value: str) -> None:
        """Open ``value`` (a path, ``hf:`` reference or preset name): download first when needed."""
        if self.pulling:
            self.notify(f"A download is running ({self._pull_ref}): wait, or press Esc to cancel it",
                        severity="warning")
            return
        if self._needs_download(value):
            self._start_pull(value)
            return
        self.load_model(value)

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
        self._pull_cancel, self._pull_ref = cancel, value
        self._pull_start = (time.monotonic(), 0)
        self._pull_latest = None
        self._pull_timer = self.set_interval(PROGRESS_EVERY_S, self._render_latest)
        self._show_download(f"looking up {value} on the hub")
        self._pull(value, cancel)

    def _pull(self, value: str, cancel: threading.Event) -> None:
        self.run_worker(lambda: self._pull_thread(value, cancel), thread=True, group="pull", exit_on_error=False)

    def _pull_thread(self, value: str, cancel: threading.Event) -> None:
        from app.models.hub import DownloadCancelled, check_space, download, plan_pull
        from app.models.hub_ref import model_ref

        try:
            plan = plan_pull(model_ref(value))
            check_space(plan)
            self.call_from_thread(self._pull_planned, cancel, plan)
            path = download(plan, progress=lambda p: setattr(self, "_pull_latest", (cancel, p)), cancel=cancel)
        except DownloadCancelled:
            return  # Esc already said so
        except Exception as exc:  # shown on screen; the chat goes on with the loaded model
            from app.tui.app import error_text

            self.call_from_thread(self._pull_failed, cancel, error_text(exc))
            return
        self.call_from_thread(self._pull_done, cancel, path)

    def _render_latest(self) -> None:
        """Timer tick: show the newest progress the download thread left (it never waits for the UI)."""
        latest = self._pull_latest
        if latest is not None:
            self._pull_progress(*latest)

    def _pull_planned(self, cancel: threading.Event, plan) -> None:
        from app.models.hub import human_bytes

        if cancel is not self._pull_cancel:
            return
        self._pull_start = (time.monotonic(), sum(plan.have.values()))
        resumed = f", resuming after {human_bytes(sum(plan.have.values()))}" if plan.have else ""
        self.notify(f"Downloading {plan.gguf.path} ({human_bytes(plan.needed)}{resumed}): {plan.reason}. "
                    "Esc cancels.", title="Download")

    def _pull_progress(self, cancel: threading.Event, progress) -> None:
        from app.models.hub import human_bytes

        if cancel is not self._pull_cancel:
            return
        name = Path(progress.file).name
        if progress.phase == "verify":
            self._show_download(f"checking sha256 of {name}")
            return
        started, base = self._pull_start
        elapsed = time.monotonic() - started
        speed = (progress.done - base) / elapsed if elapsed > 0 else 0.0
        left = f" · {int((progress.total - progress.done) / speed)} s left" if speed > 0 else ""
        self._show_download(f"↓ {name} {human_bytes(progress.done)}/{human_bytes(progress.total)}"
                            f" · {human_bytes(int(speed))}/s{left} · Esc cancels")

    def _pull_done(self, cancel: threading.Event, path: Path) -> None:
        if cancel is not self._pull_cancel:
            return
        self._end_pull()
        self.notify(f"Downloaded {path.name}; loading it", title="Download")
        self.load_model(str(path))

    def _pull_failed(self, cancel: threading.Event, error: str) -> None:
        if cancel is not self._pull_cancel:
            return
        self._end_pull()
        self.notify(error, title="Download failed", severity="error", timeout=10)

    def cancel_pull(self) -> bool:
        """Esc: stop the download (the partial file is kept); False when none runs."""
        if self._pull_cancel is None:
            return False
        self._pull_cancel.set()
        ref = self._pull_ref
        self._end_pull()
        self.notify(f"Download stopped; the partial file is kept: /model {ref} resumes it", title="Download")
        return True

    def _end_pull(self) -> None:
        self._pull_cancel = None
        self._pull_latest = None
        if self._pull_timer is not None:
            self._pull_timer.stop()
            self._pull_timer = None
        self._show_download("")
        self.refresh_bindings()

    def _show_download(self, text: str) -> None:
        from app.tui.widgets.model_bar import ModelBar

        self.query_one(ModelBar).download = text
        self.refresh_bindings()

    def on_unmount(self) -> None:
        """Quit: stop a download at its next chunk, so the process can exit."""
        if self._pull_cancel is not None:
            self._pull_cancel.set()
