"""Issue 26, items 6 and 7: what a headless ``tokchat`` does with an empty or binary stdin,
with SIGTERM or SIGHUP mid-reply, and with a stdout closed under it.

Real ``python -m app`` processes on the real SmolLM2 model (llama.cpp), real signals,
a real pipe; the history is read back from the process's own database.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app.history.store import ChatStore

LONG = ["--prompt", "Write a long story about a cat.", "--temperature", "0", "--max-tokens", "400", "--stats",
        "--threads", "1"]


def _start(model: Path, env: dict, cwd: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "app", "--model", str(model), *args],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=cwd, env=env)


def _stored_reply(env: dict) -> tuple[str, str | None, str]:
    """(content, finish_reason, the user's message) of the newest conversation's last reply."""
    with ChatStore(Path(env["TOKCHAT_DATA_DIR"]) / "history.sqlite3") as store:
        conv = store.load(store.last_conversation_id())
    user = [m for m in conv.messages if m.role == "user"][-1]
    reply = [m for m in conv.messages if m.role == "assistant"][-1]
    return reply.content, reply.finish_reason, user.content


def _stats(err: str) -> dict:
    return json.loads(err.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_stop_signal_mid_reply_stores_everything_that_was_printed(smollm_path, env, tmp_path, signame):
    process = _start(smollm_path, env, tmp_path, *LONG)
    try:
        printed = b""
        while len(printed) < 60:  # well into the reply
            chunk = process.stdout.read1(4096)
            assert chunk, process.stderr.read().decode()
            printed += chunk
        process.send_signal(getattr(signal, signame))
        rest, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    printed += rest
    err_text = err.decode()
    assert process.returncode == 128 + getattr(signal, signame), err_text
    assert "Traceback" not in err_text
    stats = _stats(err_text)
    assert stats["finish_reason"] == "cancelled" and 0 < stats["completion_tokens"] < 400
    content, finish, _ = _stored_reply(env)
    assert finish == "cancelled"
    assert printed.decode().rstrip("\n") == content  # every character shown, and nothing else
    with ChatStore(Path(env["TOKCHAT_DATA_DIR"]) / "history.sqlite3") as store:
        stored = store.last_conversation_id()
    said = "Ctrl-C" if signame == "SIGINT" else signame  # one line: what stopped it, and how to go on
    assert err_text.strip().splitlines()[-2] == (f"tokchat: stopped by {said}: the reply so far is kept; it is "
                                                 f"stored: tokchat --resume {stored} --continue goes on with it")
    print(f"{signame}: {len(printed)} bytes printed, {len(content)} characters stored")


@pytest.mark.slow
def test_a_closed_stdout_is_reported_like_an_interrupt(smollm_path, env, tmp_path):
    """``tokchat ... | head -c 10``: the reader goes away after 10 bytes."""
    process = _start(smollm_path, env, tmp_path, *LONG)
    try:
        head = process.stdout.read(10)
        process.stdout.close()
        err = process.stderr.read().decode()
        process.wait(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    assert len(head) == 10
    assert process.returncode == 141, err
    assert "Traceback" not in err and "Exception ignored" not in err
    assert "tokchat: stdout was closed (broken pipe): the reply stopped there" in err
    stats = _stats(err)
    assert stats["finish_reason"] == "cancelled" and stats["completion_tokens"] < 400
    content, finish, _ = _stored_reply(env)
    assert finish == "cancelled" and content.startswith(head.decode())


@pytest.mark.parametrize("stdin, said", [(b"", "no prompt: stdin was empty"),
                                         (b" \n\t \n", "no prompt: stdin was only whitespace")])
def test_an_empty_stdin_is_one_line_and_exit_2(smollm_path, env, tmp_path, stdin, said):
    result = subprocess.run([sys.executable, "-m", "app", "--model", str(smollm_path)], input=stdin,
                            capture_output=True, cwd=tmp_path, env=env, timeout=300)
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert err.splitlines() == [f"tokchat: {said}; give the question with --prompt TEXT or pipe it on stdin"]
    assert result.stdout == b""
    assert not (Path(env["TOKCHAT_DATA_DIR"]) / "history.sqlite3").exists()  # nothing stored


def test_an_empty_prompt_flag_is_refused_too(smollm_path, env, tmp_path):
    result = subprocess.run([sys.executable, "-m", "app", "--model", str(smollm_path), "--prompt", "  "],
                            capture_output=True, cwd=tmp_path, env=env, timeout=300)
    assert result.returncode == 2
    assert result.stderr.decode().startswith("tokchat: no prompt: --prompt was only whitespace")


def test_binary_stdin_is_refused_as_attach_refuses_the_same_bytes(smollm_path, env, tmp_path):
    data = bytes(range(256)) * 8
    blob = tmp_path / "blob.bin"
    blob.write_bytes(data)
    piped = subprocess.run([sys.executable, "-m", "app", "--model", str(smollm_path)], input=data,
                           capture_output=True, cwd=tmp_path, env=env, timeout=300)
    assert piped.returncode == 2
    assert piped.stderr.decode().splitlines() == [
        "tokchat: the prompt on stdin looks binary (not text): nothing sent; pipe text, or --attach a text file"]
    attached = subprocess.run([sys.executable, "-m", "app", "--model", str(smollm_path), "--prompt", "What is it?",
                               "--attach", str(blob)], capture_output=True, cwd=tmp_path, env=env, timeout=300)
    assert attached.returncode == 2
    assert "looks binary (not text): nothing attached" in attached.stderr.decode()


@pytest.mark.slow
def test_text_stdin_that_is_not_utf8_is_sent_with_a_notice(smollm_path, env, tmp_path):
    result = subprocess.run([sys.executable, "-m", "app", "--model", str(smollm_path), "--max-tokens", "2",
                             "--temperature", "0"], input=b"Say caf\xe9.", capture_output=True, cwd=tmp_path,
                            env=env, timeout=300)
    err = result.stderr.decode()
    assert result.returncode == 0, err
    assert "tokchat: the prompt on stdin is not valid UTF-8: 1 invalid sequence sent as \ufffd" in err
    assert _stored_reply(env)[2] == "Say caf\ufffd."
