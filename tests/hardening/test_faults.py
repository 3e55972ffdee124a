"""Faults: an engine failing mid-reply, the model file changing under it, a history that cannot be
written, and the process killed or interrupted mid-reply (headless and TUI).

Everything is real except the failing engine itself (``ScriptedBackend(fail_after=...)``): real
SQLite files in ``tmp_path``, the real SmolLM2 model through llama.cpp in child processes, and the
real TUI in tmux.  After each fault the history database must pass ``PRAGMA integrity_check`` and
hold every turn committed before it; the cut reply keeps its text with a finish reason.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.tmux import Tmux
from support.process_env import child_env

from app.history.recorder import HistoryRecorder
from app.conversation.session import ChatMessage, ChatSession
from app.history.store import ChatStore
from backends import SamplingParams
from backends.engine_wire import ENGINE_PROCESS_MODULE
from backends.scripted import ScriptedBackend
from templates import resolve_template
from tokenizer import load_tokenizer

STORY = "Write a very long story about a dragon who learns to cook, with many chapters."


def _db(tmp_path: Path) -> Path:
    return tmp_path / "data" / "history.sqlite3"


# -- the engine fails mid-reply ----------------------------------------------------------------

def test_a_backend_failing_mid_stream_keeps_both_messages_and_the_chat_goes_on(smollm_path, tmp_path):
    tok = load_tokenizer(smollm_path)
    words = tok.encode(" one two three four five six seven eight")
    backend = ScriptedBackend(words + [tok.eos_id], fail_after=4)
    template, _ = resolve_template("auto", tok)
    session = ChatSession(tok, template, backend=backend, context_size=2048,
                          sampling=SamplingParams(temperature=0, max_tokens=32))
    recorder = HistoryRecorder(store_path=tmp_path / "h.sqlite3", progress_interval_s=0.0)

    def turn(text):
        recorder.on_user(ChatMessage("user", text))
        events = list(session.send(text))
        for event in events:
            recorder.on_event(event)
        recorder.on_reply(session.messages[-1])
        return events

    events = turn("Count for me.")
    kinds = [e.kind for e in events]
    assert kinds[-2:] == ["error", "done"] and events[-1].stats.finish_reason == "error"
    assert events[-2].text == "scripted fault: the engine stopped mid-reply"
    partial = tok.decode(words[:4])
    assert "".join(e.text for e in events if e.kind == "content") == partial
    assert [(m.role, m.content, m.finish_reason) for m in session.messages] == [
        ("user", "Count for me.", None), ("assistant", partial, "error")]

    backend.fail_after = None  # the engine recovers; the chat goes on with the partial reply in context
    events = turn("Again, please.")
    assert events[-1].stats.finish_reason == "stop"
    assert partial in tok.decode(session.last_prompt.ids)
    recorder.close()
    store = ChatStore(tmp_path / "h.sqlite3")
    assert store.integrity_check() == "ok"
    stored = store.load(recorder.conversation_id).messages
    assert [(m.role, m.content, m.finish_reason) for m in stored] == [
        ("user", "Count for me.", None), ("assistant", partial, "error"),
        ("user", "Again, please.", None), ("assistant", tok.decode(words), "stop")]
    assert stored[1].completion_tokens == 4


# -- the model file changes while loaded -------------------------------------------------------

_MODEL_CHANGES = """
import os, shutil, sys
from pathlib import Path
from backends import LoadOptions, SamplingParams, open_backend
from tokenizer import load_tokenizer
source, model, change = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
shutil.copy(source, model)
tok = load_tokenizer(model)
backend = open_backend(model, LoadOptions(backend="cpu", n_ctx=256))
prompt = tok.encode("<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n", special=True)
greedy = SamplingParams(temperature=0, max_tokens=6)
first = list(backend.generate(prompt, greedy, tok.eog_ids))
if change == "delete":
    model.unlink()
else:
    os.truncate(model, model.stat().st_size // 2)
longer = tok.encode("<|im_start|>user\\nTell me about the sea and the long roads<|im_end|>\\n<|im_start|>assistant\\n",
                    special=True)
try:
    second = list(backend.generate(longer, greedy, tok.eog_ids))
    outcome = "reply"
except Exception as exc:
    second, outcome = [], type(exc).__name__ + ": " + str(exc)
backend.close()
print("RESULT", outcome, len(first), len(second), flush=True)
"""


def _change_model(smollm_path, tmp_path, change):
    return subprocess.run([sys.executable, "-c", _MODEL_CHANGES, str(smollm_path), str(tmp_path / "m.gguf"), change],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=child_env(tmp_path))


def test_a_model_deleted_while_loaded_keeps_working(smollm_path, tmp_path):
    result = _change_model(smollm_path, tmp_path, "delete")
    assert result.returncode == 0, result.stderr
    assert "RESULT reply 6 6" in result.stdout


def test_a_model_truncated_while_loaded_is_one_error_not_a_crash(smollm_path, tmp_path):
    """llama.cpp maps the file: a page past a truncated end would kill the process with SIGBUS."""
    result = _change_model(smollm_path, tmp_path, "truncate")
    assert result.returncode == 0, f"the process died with status {result.returncode}: {result.stderr[-500:]}"
    line = next(l for l in result.stdout.splitlines() if l.startswith("RESULT"))
    assert line.startswith("RESULT BackendError: the model file m.gguf changed on disk while loaded"), line
    assert "\n" not in line and line.endswith(" 6 0")


# -- the history cannot be written --------------------------------------------------------------

def _drop_file_override_and_cap(fsize: int | None):
    def preexec():
        import ctypes
        import resource

        if os.geteuid() == 0:  # root ignores file modes unless these capabilities are gone
            libc = ctypes.CDLL(None, use_errno=True)
            for capability in (1, 2, 3):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
                if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                    raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, it does not kill
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return preexec


def _headless(smollm_path, tmp_path, *extra, preexec=None, prompt="Say hello."):
    return subprocess.run(
        [sys.executable, "-m", "app", "--model", str(smollm_path), "--prompt", prompt, "--temperature", "0",
         "--max-tokens", "6", "--backend", "cpu", "--ctx", "512", *extra],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=child_env(tmp_path), preexec_fn=preexec)


def _earlier_turns(smollm_path, tmp_path, n=2):
    for i in range(n):
        result = _headless(smollm_path, tmp_path, prompt=f"Earlier question {i}?")
        assert result.returncode == 0, result.stderr
    with ChatStore(_db(tmp_path)) as store:
        return [(m.role, m.content, m.finish_reason) for c in reversed(store.list_conversations())
                for m in store.load(c.id).messages]


def test_a_read_only_history_keeps_the_chat_going_and_says_so_once(smollm_path, tmp_path):
    before = _earlier_turns(smollm_path, tmp_path, 1)
    data = tmp_path / "data"
    for path in [data, *data.iterdir()]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    result = _headless(smollm_path, tmp_path, preexec=_drop_file_override_and_cap(None))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() and "Traceback" not in result.stderr
    notices = [l for l in result.stderr.splitlines() if "history database" in l or "history is off" in l]
    assert len(notices) == 1 and notices[0].startswith("tokchat: history is off for this chat: history database ")
    for path in [data, *data.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    with ChatStore(_db(tmp_path)) as store:
        assert store.integrity_check() == "ok"
        after = [(m.role, m.content, m.finish_reason) for c in reversed(store.list_conversations())
                 for m in store.load(c.id).messages]
    assert after == before


def test_a_full_disk_keeps_the_chat_going_and_says_so_once(smollm_path, tmp_path):
    before = _earlier_turns(smollm_path, tmp_path, 2)
    db = _db(tmp_path)
    with ChatStore(db) as store:  # fold the WAL in, so the limit below is about new writes
        store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    limit = db.stat().st_size  # no file may grow past what the database is now: a full disk for SQLite
    result = _headless(smollm_path, tmp_path, preexec=_drop_file_override_and_cap(limit))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() and "Traceback" not in result.stderr
    notices = [l for l in result.stderr.splitlines() if "history database" in l or "history is off" in l]
    assert len(notices) == 1 and notices[0].startswith("tokchat: history is off for this chat: history database ")
    with ChatStore(db) as store:
        assert store.integrity_check() == "ok"
        after = [(m.role, m.content, m.finish_reason) for c in reversed(store.list_conversations())
                 for m in store.load(c.id).messages]
    assert after[: len(before)] == before
    assert all(finish in (None, "stop", "length", "interrupted") for _, _, finish in after)


# -- killed or interrupted mid-reply: headless ----------------------------------------------------

def _start_story(smollm_path, tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "app", "--model", str(smollm_path), "--prompt", STORY, "--temperature", "0",
         "--max-tokens", "600", "--backend", "cpu", "--ctx", "1024", "--stats",
         "--repeat-penalty", "1"],  # greedy without a penalty: SmolLM2 writes on to max_tokens
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, env=child_env(tmp_path))
    os.set_blocking(process.stdout.fileno(), False)
    shown = b""
    deadline = time.monotonic() + 240
    first_at = None
    while time.monotonic() < deadline:
        chunk = process.stdout.read() or b""
        shown += chunk
        if shown.strip() and first_at is None:
            first_at = time.monotonic()
        if first_at is not None and time.monotonic() - first_at > 2.5 and len(shown.split()) >= 5:
            return process, shown
        if process.poll() is not None:
            raise AssertionError(f"the reply ended before the signal: {shown!r} {process.stderr.read()!r}")
        time.sleep(0.05)
    raise AssertionError("the reply did not start")


def _check_history(tmp_path, before, cut_reasons):
    with ChatStore(_db(tmp_path)) as store:  # opening it marks a dead writer's reply as interrupted
        assert store.integrity_check() == "ok"
        conversations = [store.load(c.id) for c in reversed(store.list_conversations())]
    turns = [(m.role, m.content, m.finish_reason) for c in conversations[:-1] for m in c.messages]
    assert turns == before
    user, reply = conversations[-1].messages
    assert (user.role, user.content) == ("user", STORY)
    assert reply.finish_reason in cut_reasons
    return reply


@pytest.mark.slow
def test_sigkill_mid_reply_headless_loses_no_committed_turn(smollm_path, tmp_path):
    before = _earlier_turns(smollm_path, tmp_path, 2)
    process, shown = _start_story(smollm_path, tmp_path)
    process.kill()
    process.wait(30)
    assert process.returncode == -signal.SIGKILL
    reply = _check_history(tmp_path, before, {"interrupted"})
    assert reply.content.strip() and shown.decode().startswith(reply.content)  # saved once a second


@pytest.mark.slow
def test_sigint_mid_reply_headless_keeps_the_partial_reply(smollm_path, tmp_path):
    before = _earlier_turns(smollm_path, tmp_path, 2)
    process, shown = _start_story(smollm_path, tmp_path)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    stats = json.loads(err.decode().strip().splitlines()[-1])
    assert stats["finish_reason"] == "cancelled" and "Traceback" not in err.decode()
    reply = _check_history(tmp_path, before, {"cancelled"})
    printed = (shown + out).decode()
    assert reply.content.strip() and printed.strip() == reply.content.strip()
    assert reply.completion_tokens == stats["completion_tokens"]


# -- killed or interrupted mid-reply: the TUI in tmux ---------------------------------------------

class _Tmux(Tmux):
    """:class:`support.tmux.Tmux` with the pid of the tokchat it runs."""

    def app_pid(self) -> int:
        """The tokchat process: the child of the pane's shell."""
        shell = int(self.run("list-panes", "-t", self.name, "-F", "#{pane_pid}").split()[0])
        children = Path(f"/proc/{shell}/task/{shell}/children").read_text().split()
        return int(children[0])

    def kill_server(self) -> None:
        self.kill()


def engine_pids(parent: int) -> list[int]:
    """The engine-host processes whose parent is ``parent``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text() if entry.name.isdigit() else ""
            cmdline = (entry / "cmdline").read_bytes() if stat else b""
        except OSError:  # a process that ended while the list was read
            continue
        if stat and int(stat.rsplit(")", 1)[1].split()[1]) == parent and ENGINE_PROCESS_MODULE.encode() in cmdline:
            found.append(int(entry.name))
    return found


def _wait_for_saved_partial(tmp_path: Path, timeout_s: float) -> None:
    """Until the history holds the second turn's reply with some text in it (the recorder saves it at once)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with ChatStore(_db(tmp_path)) as store:
            messages = store.load(store.last_conversation_id()).messages
        if len(messages) >= 4 and messages[3].role == "assistant" and messages[3].content.strip():
            return
        time.sleep(0.05)
    raise AssertionError("the reply's first words were not saved")


def _resume(pid: int) -> None:
    """SIGCONT to a held engine, unless it has already gone (a SIGKILL'd chat can take it along)."""
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        return  # the engine went with the chat: nothing to let go


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_a_signal_mid_reply_in_the_tui_loses_no_committed_turn(signum, smollm_path, tmp_path):
    if shutil.which("tmux") is None:
        raise AssertionError("tmux is not installed: apt-get install tmux")
    tmux = _Tmux(tmp_path)
    env = {**child_env(tmp_path), "TERM": "xterm-256color"}
    command = (f"{sys.executable} -m app --model {smollm_path} --backend cpu --ctx 1024 --temperature 0 "
               f"--max-tokens 600 --repeat-penalty 1; echo TOKCHAT-EXITED $?; sleep 60")
    subprocess.run(["tmux", "-S", tmux.socket, "new-session", "-d", "-s", tmux.name, "-x", "110", "-y", "34",
                    command], check=True, env=env, cwd=tmp_path)
    try:
        tmux.wait(lambda s: "llama.cpp on CPU" in s, 90, "the model to load")
        tmux.run("send-keys", "-t", tmux.name, "-l", "Hi!")
        tmux.wait(lambda s: "Hi!" in s, 10, "the first message in the box")
        tmux.run("send-keys", "-t", tmux.name, "Enter")
        tmux.wait(lambda s: "completion" in s, 120, "the first reply's stats")
        with ChatStore(_db(tmp_path)) as store:
            first = store.load(store.last_conversation_id()).messages
        assert [m.role for m in first] == ["user", "assistant"] and first[1].finish_reason in ("stop", "length")
        tmux.run("send-keys", "-t", tmux.name, "-l", STORY)
        tmux.wait(lambda s: STORY[:40] in s, 10, "the story prompt in the box")
        tmux.run("send-keys", "-t", tmux.name, "Enter")
        tmux.wait(lambda s: "esc Stop" in s, 30, "the reply to start")
        pid = tmux.app_pid()
        (engine,) = engine_pids(pid)
        # hold the engine at a known point mid-reply, so the verdict never depends on how fast this machine
        # finishes the reply: once its first words are saved, the engine is stopped (SIGSTOP) until the signal
        # has been sent, and then let go (a killed chat's engine sees its parent gone and exits)
        _wait_for_saved_partial(tmp_path, timeout_s=60)
        os.kill(engine, signal.SIGSTOP)
        assert "esc Stop" in tmux.screen(), "the reply ended before the engine was held"
        os.kill(pid, signum)
        _resume(engine)
        screen = tmux.wait(lambda s: "TOKCHAT-EXITED" in s, 60, "tokchat to end")
        with ChatStore(_db(tmp_path)) as store:
            assert store.integrity_check() == "ok"
            messages = store.load(store.last_conversation_id()).messages
        assert [(m.role, m.content, m.finish_reason) for m in messages[:2]] == \
            [(m.role, m.content, m.finish_reason) for m in first]
        assert (messages[2].role, messages[2].content) == ("user", STORY)
        cut = messages[3]
        assert cut.role == "assistant" and cut.finish_reason in ("interrupted", "cancelled")
        assert cut.content.strip()
        if signum == signal.SIGINT:
            assert "Traceback" not in screen
    finally:
        tmux.kill_server()
