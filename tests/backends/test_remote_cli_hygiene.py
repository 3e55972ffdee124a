"""Real tokchat processes against a real ``llama-server`` behind :class:`scripted_proxy.ScriptedProxy` (issue 44).

What a demanding user met at a server that says something unusual: a model path that is not on
this machine (C5), a reply holding escape sequences on a real terminal (C4), a redirect, flags that
mean nothing for a server (C11).  Each run is ``python -m app`` with its own folders under ``tmp_path``.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.process_env import child_env
from support.pty_run import RAW_CONTROLS, on_terminal
from support.remote_servers import LlamaServer
from support.scripted_proxy import Reply, ScriptedProxy, token_stream

from tokenizer import load_tokenizer

ROOT = Path(__file__).resolve().parents[2]
GUARD_S = 180
#: the model path a server on another machine names (issue 44, C5): one "/" once the leading one goes
ELSEWHERE = "/models/Qwen2.5 7B Instruct.gguf"
#: what a model or a server may emit: a window title, a clear-screen, a bell, a one-byte CSI
HOSTILE_REPLY = "Hi \x1b]0;PWNED\x07\x1b[2J there \x9b2J done"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def upstream(smollm_path: Path, tmp_path_factory: pytest.TempPathFactory):
    server = LlamaServer(smollm_path, tmp_path_factory.mktemp("upstream")).start()
    yield server
    server.stop()


def tokchat(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=GUARD_S)


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    return lines[0]


def props_naming(path: str):
    def script(_body: dict, upstream) -> Reply:
        return Reply(body={**upstream(), "model_path": path})
    return script


def test_a_model_path_not_on_this_machine_is_one_line_asking_for_model(upstream, tmp_path):
    """C5: ``/models/Qwen2.5 7B Instruct.gguf`` was taken for a Hugging Face repo id (HFValidationError)."""
    env = child_env(tmp_path)
    with ScriptedProxy(upstream.url, {"/props": props_naming(ELSEWHERE)}) as proxy:
        chat = tokchat(env, "--server", proxy.url, "--prompt", "hi", "--max-tokens", "4")
        doctor = tokchat(env, "doctor", "--server", proxy.url)
    assert chat.returncode == 2 and chat.stdout == "", chat.stderr
    line = one_line(chat.stderr)
    assert ELSEWHERE in line and "--model" in line and "HFValidation" not in line, line
    assert "Traceback" not in doctor.stderr and doctor.returncode == 1, doctor.stderr
    ids_row = next(row for row in doctor.stdout.splitlines() if row.startswith("ids"))
    assert ELSEWHERE in ids_row and "--model" in ids_row, doctor.stdout


@pytest.fixture(scope="module")
def smollm(smollm_path: Path):
    return load_tokenizer(smollm_path)


def reply_of(tokenizer, text: str, then: list[dict] | None = None):
    """A ``/completion`` script streaming ``text``'s ids (then ``then``'s events instead of the stop event)."""
    ids = tokenizer.encode(text)

    def script(body: dict, _upstream) -> Reply:
        events = token_stream(ids, [tokenizer.decode([t]) for t in ids], len(body["prompt"]))
        return Reply(events=events if then is None else events[:-1] + then)
    return script


def test_a_reply_holding_escape_sequences_reaches_a_terminal_inert_and_a_pipe_exact(upstream, smollm, tmp_path):
    """C4: a reply on stdout was written raw (the window retitled, the screen cleared)."""
    env = child_env(tmp_path)
    with ScriptedProxy(upstream.url, {"/completion": reply_of(smollm, HOSTILE_REPLY)}) as proxy:
        args = ("--server", proxy.url, "--prompt", "hi", "--max-tokens", "64", "--no-history")
        run = on_terminal(env, *args)
        piped = tokchat(env, *args)
    assert run.returncode == 0, run.screen
    assert not any(c in run.screen for c in RAW_CONTROLS), repr(run.screen)
    assert "Hi \\x1b]0;PWNED\\x07\\x1b[2J there \\x9b2J done\n" in run.screen  # shown, as text
    assert piped.returncode == 0 and piped.stdout == HOSTILE_REPLY + "\n", (piped.stdout, piped.stderr)


def test_a_server_error_mid_reply_is_one_inert_line_of_its_own_on_a_shared_terminal(upstream, smollm, tmp_path):
    """C4 and C11: the server's error text reached the terminal raw, glued to the partial reply
    (``Hellotokchat: ...``) when stdout and stderr are one terminal."""
    env = child_env(tmp_path)
    error = {"error": {"code": 500, "message": "boom \x1b]0;PWNED\x07\x1b[2J", "type": "server_error"}}
    with ScriptedProxy(upstream.url, {"/completion": reply_of(smollm, "Hello", then=[error])}) as proxy:
        args = ("--server", proxy.url, "--prompt", "hi", "--max-tokens", "64", "--no-history")
        run = on_terminal(env, *args)
        piped = tokchat(env, *args)
    assert run.returncode == 2, run.screen
    assert not any(c in run.screen for c in RAW_CONTROLS), repr(run.screen)
    lines = run.screen.splitlines()
    assert "Hello" in lines, run.screen  # the partial reply, its line ended before the error's
    error_line = next(line for line in lines if line.startswith("tokchat: ") and "boom" in line)
    assert "boom \\x1b]0;PWNED\\x07\\x1b[2J" in error_line, error_line
    # a pipe keeps the reply's bytes: no newline is added for a terminal that is not there
    assert piped.returncode == 2 and piped.stdout == "Hello\n", (piped.stdout, piped.stderr)
    assert "boom \x1b]0;PWNED\x07\x1b[2J" in piped.stderr


def test_a_redirect_is_named_not_taken_for_an_unknown_server(upstream, tmp_path):
    """C11: a 302 on every path was reported as "none of llama-server, vLLM or SGLang"."""
    moved = "https://gpu.example:8443"

    def redirect(path: str):
        return lambda _body, _upstream: Reply(302, headers={"Location": moved + path})
    paths = ("/health", "/props", "/get_model_info", "/version", "/v1/models")
    with ScriptedProxy(upstream.url, {p: redirect(p) for p in paths}) as proxy:
        chat = tokchat(child_env(tmp_path), "--server", proxy.url, "--prompt", "hi", "--max-tokens", "4")
    assert chat.returncode == 2, chat.stderr
    line = one_line(chat.stderr)
    assert "none of llama-server" not in line, line
    assert f"redirects /health to {moved}/health (HTTP 302)" in line and f"pass --server {moved}" in line, line


def test_local_engine_flags_given_with_a_server_are_named_as_unused(upstream, smollm_path, tmp_path):
    """C11: ``--draft-model``, ``--speculative`` and ``--gpu-layers`` were silently ignored with ``--server``."""
    run = tokchat(child_env(tmp_path), "--server", upstream.url, "--gpu-layers", "5", "--speculative", "draft",
                  "--draft-model", str(smollm_path), "--prompt", "hi", "--max-tokens", "2", "--no-history")
    assert run.returncode == 0, run.stderr
    said = [line for line in run.stderr.splitlines() if "do nothing with --server" in line]
    assert len(said) == 1, run.stderr
    assert "--gpu-layers, --speculative and --draft-model set the local engine" in said[0], said


def test_a_resume_finds_its_cache_on_a_server_with_four_slots(smollm_path, tmp_path):
    """C11: against llama-server's default of 4 slots, a headless ``--resume`` landed on a slot picked at
    random and evaluated its whole prompt again (66 of 66 ids; 14 with ``-np 1``).  Each resume here is a
    new process; with the slot picked at random, four resumes in a row would all find the cache 1 time in 256."""
    server = LlamaServer(smollm_path, tmp_path, ctx=2048, extra=("-np", "4")).start()
    try:
        assert len(server.slots()) == 4
        env = child_env(tmp_path)

        def turn(*args: str) -> dict:
            run = tokchat(env, "--server", server.url, "--temperature", "0", "--max-tokens", "8", "--stats", *args)
            assert run.returncode == 0, run.stderr
            return json.loads(run.stderr.splitlines()[-1])

        first = turn("--prompt", "Tell me about the sea.")
        assert first["new_prompt_tokens"] == first["prompt_tokens"]
        for n in range(4):
            stats = turn("--resume", "1", "--prompt", f"And then, part {n}?")
            # only the new message and the template's glue around it are evaluated: the rest is the slot's cache
            assert stats["new_prompt_tokens"] < stats["prompt_tokens"] // 2, (n, stats)
    finally:
        server.stop()
