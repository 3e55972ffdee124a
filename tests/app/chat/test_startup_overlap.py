"""Opening a chat starts the engine first and reads the tokenizer while the engine loads.

The engine is the real ``python -m backends.engine_process`` child loading SmolLM2
through llama.cpp; what is checked is the order of events, never a duration:
the engine's process starts while the tokenizer is being read, and an error
in the tokenizer (or Ctrl-C) leaves no engine behind.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import app.models.header as model_header
from app.chat.open import open_chat
from app.settings.options import ChatOptions
from backends import SamplingParams
from backends.engine_wire import ENGINE_PROCESS_MODULE


#: engine children this process had before the running test began (another test's, in this worker):
#: not the engines under test
_EARLIER: set[int] = set()


@pytest.fixture(autouse=True)
def _only_this_tests_engines():
    _EARLIER.clear()
    _EARLIER.update(_engine_children())
    yield
    _EARLIER.clear()


def _engine_children() -> list[int]:
    """The pids of this process's engine-host children that the running test started."""
    found = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue  # a thread that ended after the listing (the load threads come and go)
        for pid in children:
            try:
                if (int(pid) not in _EARLIER
                        and ENGINE_PROCESS_MODULE in Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")):
                    found.append(int(pid))
            except OSError:
                continue  # ended between the two reads
    return found


def _engine_appears(seconds: float = 30.0) -> list[int]:
    """The engine children that show up within ``seconds`` (the load starts on its own thread)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = _engine_children()
        if found:
            return found
        time.sleep(0.01)
    return []


def _wait_gone(pids: list[int], seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [p for p in pids if Path(f"/proc/{p}").exists()
                 and Path(f"/proc/{p}/stat").read_text().split()[2] != "Z"]
        if not alive:
            return True
        time.sleep(0.05)
    return False


def test_the_engine_is_already_starting_when_the_tokenizer_is_read(smollm_path, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    seen: list[list[int]] = []
    real = model_header.load_chat_tokenizer

    def spying(path, header):
        # an engine started only after the tokenizer would never appear while we wait here
        seen.append(_engine_appears())
        return real(path, header)

    monkeypatch.setattr(model_header, "load_chat_tokenizer", spying)
    session = open_chat(ChatOptions(model=str(smollm_path), ctx=512,
                                    sampling=SamplingParams(temperature=0, max_tokens=4))).session
    try:
        assert seen and seen[0], "the tokenizer was read before any engine process was started"
        assert session.backend.pid in seen[0]
        assert list(session.send("Hi")), "the engine started first must be the one that answers"
    finally:
        session.backend.close()


def test_a_tokenizer_that_fails_leaves_no_engine_behind(smollm_path, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    started: list[list[int]] = []

    def failing(path, header):
        started.append(_engine_appears())
        raise ValueError("a tokenizer that cannot be read")

    monkeypatch.setattr(model_header, "load_chat_tokenizer", failing)
    with pytest.raises(ValueError, match="cannot be read"):
        open_chat(ChatOptions(model=str(smollm_path), ctx=512))
    assert started and started[0], "no engine was started, so this test proves nothing"
    assert _wait_gone(started[0]), "the engine of an abandoned chat is still running"


def test_the_command_line_starts_the_engine_before_it_reads_settings_and_loads_with_it(
        smollm_path, tmp_path, monkeypatch, capsys):
    """``tokchat --prompt``: the engine process exists before the settings and the model's header are read,
    and that same process answers (one engine per chat, not a spare and a second one)."""
    for var in ("XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(var, str(tmp_path / var))
    import app.cli
    import app.models.preset_match as preset_match

    at_settings: list[list[int]] = []
    at_tokenizer: list[list[int]] = []
    real_options, real_tokenizer = preset_match.chat_options, model_header.load_chat_tokenizer

    def options_spy(*args, **kwargs):
        at_settings.append(_engine_children())  # no waiting: it must exist already
        return real_options(*args, **kwargs)

    def tokenizer_spy(path, header):
        at_tokenizer.append(_engine_children())
        return real_tokenizer(path, header)

    monkeypatch.setattr(preset_match, "chat_options", options_spy)
    monkeypatch.setattr(model_header, "load_chat_tokenizer", tokenizer_spy)
    code = app.cli.main(["--model", str(smollm_path), "--prompt", "Hi", "--max-tokens", "4", "--temperature", "0",
                         "--ctx", "512", "--no-history"])
    assert code == 0 and capsys.readouterr().out.strip()
    assert at_settings and len(at_settings[0]) == 1, at_settings
    assert at_tokenizer == at_settings, "the chat started a second engine instead of the one waiting"
    assert _wait_gone(at_settings[0])


def test_a_command_line_error_before_the_load_leaves_no_engine(tmp_path, monkeypatch, capsys):
    for var in ("XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(var, str(tmp_path / var))
    import app.cli

    import app.chat.early

    started: list[app.chat.early.EarlyEngine] = []
    real_init = app.chat.early.EarlyEngine.__init__

    def recording_init(self):
        real_init(self)
        started.append(self)

    monkeypatch.setattr(app.chat.early.EarlyEngine, "__init__", recording_init)
    code = app.cli.main(["--model", str(tmp_path / "missing.gguf"), "--prompt", "Hi"])
    assert code == 2 and "missing.gguf" in capsys.readouterr().err
    assert len(started) == 1 and started[0]._spare is None and started[0]._load is None
    assert _wait_gone(_engine_children())


def test_a_server_chat_starts_no_engine(tmp_path, monkeypatch):
    for var in ("XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(var, str(tmp_path / var))
    import app.cli
    import app.models.preset_match as preset_match

    seen: list[list[int]] = []

    def stop_here(*args, **kwargs):
        seen.append(_engine_children())
        raise KeyboardInterrupt  # enough: the engine would have been started before this point

    monkeypatch.setattr(preset_match, "chat_options", stop_here)
    assert app.cli.main(["--server", "http://127.0.0.1:9", "--prompt", "Hi"]) == 130
    assert seen == [[]]


def test_an_engine_started_early_is_the_one_the_chat_opens_with(smollm_path, tmp_path, monkeypatch):
    from app.chat.early import EarlyEngine

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    options = ChatOptions(model=str(smollm_path), ctx=512, sampling=SamplingParams(temperature=0, max_tokens=4))
    early_engine = EarlyEngine()
    early_engine.start_load(options)
    early = _engine_appears()
    assert len(early) == 1
    session = open_chat(options, early=early_engine).session
    try:
        assert session.backend.pid == early[0] and _engine_children() == early
        assert early_engine.take(options) is None, "handed over once: the chat owns it now"
        early_engine.close()  # what the command line does at the end: the adopted engine is not its own
        assert list(session.send("Hi"))
    finally:
        session.backend.close()


def test_an_early_process_is_the_one_the_early_load_runs_in(smollm_path, tmp_path, monkeypatch):
    """Both steps: the process started before the model is known is the one the load goes to."""
    from app.chat.early import EarlyEngine

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    options = ChatOptions(model=str(smollm_path), ctx=512, sampling=SamplingParams(temperature=0, max_tokens=4))
    early_engine = EarlyEngine()
    try:
        assert early_engine.start_process()
        process = _engine_appears()
        assert len(process) == 1
        early_engine.start_load(options)
        chat = open_chat(options, early=early_engine)
        try:
            assert chat.backend.pid == process[0] and _engine_children() == process
        finally:
            chat.backend.close()
    finally:
        early_engine.close()


def test_closing_the_early_engine_ends_a_process_no_chat_took(tmp_path, monkeypatch):
    from app.chat.early import EarlyEngine

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    early_engine = EarlyEngine()
    assert early_engine.start_process()
    process = _engine_appears()
    assert len(process) == 1
    early_engine.close()
    assert _wait_gone(process)


def test_an_early_engine_for_other_options_is_closed_when_another_chat_opens(smollm_path, tmp_path, monkeypatch):
    from app.chat.early import EarlyEngine

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    early_engine = EarlyEngine()
    early_engine.start_load(ChatOptions(model=str(smollm_path), ctx=512))
    early = _engine_appears()
    assert early
    # /model before the first load
    session = open_chat(ChatOptions(model=str(smollm_path), ctx=256), early=early_engine).session
    try:
        assert session.backend.pid not in early and _wait_gone(early)
    finally:
        session.backend.close()


def test_a_load_for_a_chat_that_already_ended_starts_no_engine(smollm_path, tmp_path, monkeypatch):
    """The TUI resolves the model on a thread; a window closed meanwhile used to have that thread start an
    engine process anyway and discard it (one more engine child of a process that had ended its chat)."""
    import app.chat.early
    from app.chat.early import EarlyEngine

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    started: list[object] = []
    real_start = app.chat.early.start_engine

    def start_spy(*args, **kwargs):
        started.append(args[1])
        return real_start(*args, **kwargs)

    monkeypatch.setattr(app.chat.early, "start_engine", start_spy)
    early_engine = EarlyEngine()
    early_engine.close()
    early_engine.start_load(ChatOptions(model=str(smollm_path), ctx=256))
    assert started == [] and _engine_children() == []


def test_the_windows_early_load_hands_over_its_options_and_engine(smollm_path, tmp_path, monkeypatch):
    """What ``tokchat`` (the TUI) does before Textual is imported: the preset and the engine's load on a
    thread; the window's load thread then opens the chat with those options and that engine."""
    from app.chat.early import EarlyEngine
    from app.cli import build_parser
    from app.models.preset_match import chat_options
    from app.tui.loader import early_loader

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setenv("TOKCHAT_CONFIG_DIR", str(tmp_path / "config"))
    args = build_parser().parse_args(["--model", str(smollm_path), "--ctx", "256"])
    early = EarlyEngine()
    early.start_load_on_thread(lambda: chat_options(args))
    engines = _engine_appears()
    options = early.options()
    assert options.preset == "smollm2" and len(engines) == 1
    chat = early_loader(early)(options, lambda _text: None)
    try:
        assert chat.backend.pid == engines[0] and chat.context_size == 256
    finally:
        chat.backend.close()
        early.close()


def test_the_windows_early_load_raises_its_error_where_the_window_asks():
    from app.chat.early import EarlyEngine
    from app.models.resolution import ModelNotFound

    def missing():
        raise ModelNotFound("no model named nothing-here")

    early = EarlyEngine()
    early.start_load_on_thread(missing)
    with pytest.raises(ModelNotFound, match="nothing-here"):
        early.options()
    early.close()
