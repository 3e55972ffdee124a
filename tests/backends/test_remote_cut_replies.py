"""A reply the server cuts, or that tokchat is killed in, is stored and reported as cut (issue 44, C1 and
"a SIGKILL at any moment of any reply path"; issue 48, item 1).

Real ``python -m app`` processes against a real ``llama-server`` behind :class:`scripted_proxy.ScriptedProxy`,
whose streamed reply is scripted to end after three ids the way each server kind says so: SGLang's
``finish_reason {"type": "abort"}``, vLLM's ``finish_reason: "abort"``, llama-server's ``stop_type: "limit"``
(its own ``-n``).  Everything else (the connect, a later continue) is the real server's.  The history is
read back from the run's own SQLite file.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.killed_run import kill_once_saved, last_message
from support.process_env import child_env
from support.remote_servers import LlamaServer
from support.scripted_proxy import Reply, ScriptedProxy, token_stream

from app.history.store import ChatStore
from tokenizer import load_tokenizer

ROOT = Path(__file__).resolve().parents[2]
TEXT = "Once upon a time"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def upstream(smollm_path: Path, tmp_path_factory: pytest.TempPathFactory):
    server = LlamaServer(smollm_path, tmp_path_factory.mktemp("upstream")).start()
    yield server
    server.stop()


def tokchat(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=180)


def llamacpp_limit(ids: list[int], pieces: list[str]):
    """llama-server's stream ending at its own ``-n``: ``stop_type "limit"`` after ``ids``."""
    def script(body: dict, _upstream) -> Reply:
        events = token_stream(ids, pieces, len(body["prompt"]))
        events[-1]["stop_type"] = "limit"
        return Reply(events=events)
    return script


def sglang_abort(ids: list[int], pieces: list[str]):
    """SGLang's ``/generate`` stream (cumulative ``output_ids``) ending in ``finish_reason {"type": "abort"}``."""
    def script(body: dict, _upstream) -> Reply:
        n_prompt = len(body["input_ids"])
        events = []
        for n in range(1, len(ids) + 1):
            finish = {"type": "abort", "message": "request aborted by the scheduler"} if n == len(ids) else None
            events.append({"text": "".join(pieces[:n]), "output_ids": ids[:n],
                           "meta_info": {"id": "r", "prompt_tokens": n_prompt, "completion_tokens": n,
                                         "cached_tokens": 0, "finish_reason": finish}})
        return Reply(events=events)
    return script


def vllm_abort(ids: list[int], pieces: list[str]):
    """vLLM's ``/v1/completions`` stream ending in ``finish_reason: "abort"``."""
    def script(body: dict, _upstream) -> Reply:
        n_prompt = len(body["prompt"])
        events = [{"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
                   "choices": [{"index": 0, "text": piece, "logprobs": None, "token_ids": [tid],
                                "finish_reason": "abort" if n == len(ids) else None, "stop_reason": None}],
                   "usage": {"prompt_tokens": n_prompt, "completion_tokens": n, "total_tokens": n_prompt + n}}
                  for n, (tid, piece) in enumerate(zip(ids, pieces), start=1)]
        return Reply(events=events)
    return script


#: kind -> (the streamed path, its script, the other paths scripted so that a llama-server passes for it,
#: the finish reason stored, what the line quotes of the server)
KINDS = {
    "llamacpp": ("/completion", llamacpp_limit, {}, "length", 'stop_type "limit"'),
    "sglang": ("/generate", sglang_abort, {"/get_model_info": "model_path", "/get_server_info": "context_length"},
               "error", 'finish_reason "abort": request aborted by the scheduler'),
    "vllm": ("/v1/completions", vllm_abort, {"/v1/models": "models"}, "error", 'finish_reason "abort"'),
}


def info_script(what: str, model: Path):
    def script(_body: dict, _upstream) -> Reply:
        if what == "model_path":
            return Reply(body={"model_path": str(model)})
        if what == "context_length":
            return Reply(body={"version": "0.4.0", "context_length": 2048})
        return Reply(body={"object": "list", "data": [{"id": "smollm", "root": str(model), "max_model_len": 2048}]})
    return script


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_reply_the_server_cuts_is_one_line_exit_2_stored_as_cut_and_continuable(kind, upstream, smollm_path,
                                                                                 tmp_path):
    """C1: after three ids the run printed them, exited 0 with no notice, ``--stats`` said "stop", the history
    stored "stop", and ``--resume 1 --continue`` was refused ("the last reply ended on its own")."""
    tokenizer = load_tokenizer(smollm_path)
    ids = tokenizer.encode(TEXT)[:3]
    pieces = [tokenizer.decode([t]) for t in ids]
    path, streamed, others, stored, said = KINDS[kind]
    scripts = {path: streamed(ids, pieces), **{p: info_script(w, smollm_path) for p, w in others.items()}}
    if kind != "llamacpp":
        scripts["/props"] = lambda _body, _upstream: Reply(status=404, body={"error": {"message": "not found"}})
    env = child_env(tmp_path)
    with ScriptedProxy(upstream.url, scripts) as proxy:
        common = ("--server", proxy.url, "--server-kind", kind, "--model", str(smollm_path), "--trust-server-vocab",
                  "--temperature", "0")
        run = tokchat(env, *common, "--prompt", "Tell me a story", "--max-tokens", "64", "--stats")
        assert "Traceback" not in run.stderr, run.stderr
        assert run.stdout == tokenizer.decode(ids) + "\n", (run.stdout, run.stderr)
        # the connect's own notices (the server, the vocabulary check skipped), then one line, then the stats
        lines = [line for line in run.stderr.strip().splitlines()
                 if not line.startswith(("tokchat: remote: ", "tokchat: vocabulary check skipped"))]
        assert run.returncode == 2 and len(lines) == 2, run.stderr
        assert lines[0].startswith(f"tokchat: the server at {proxy.url} ") and said in lines[0], lines[0]
        assert "after 3 ids" in lines[0] and "continued" in lines[0], lines[0]
        stats = json.loads(lines[1])
        assert (stats["finish_reason"], stats["completion_tokens"]) == (stored, 3)
        with ChatStore(Path(env["TOKCHAT_DATA_DIR"]) / "history.sqlite3", readonly=True) as store:
            reply = store.load(1).messages[-1]
        assert (reply.content, reply.finish_reason, reply.completion_tokens) == (tokenizer.decode(ids), stored, 3)
        del proxy.scripts[path]  # the server goes on with it (llama-server's own; the others' path is not there)
        go_on = tokchat(env, *common, "--resume", "1", "--continue", "--max-tokens", "4")
    assert "ended on its own" not in go_on.stderr, go_on.stderr  # continuable
    if kind == "llamacpp":
        assert go_on.returncode == 0, go_on.stderr
        with ChatStore(Path(env["TOKCHAT_DATA_DIR"]) / "history.sqlite3", readonly=True) as store:
            grown = store.load(1).messages[-1]
        assert grown.content.startswith(reply.content) and grown.completion_tokens == 3 + 4
        assert [p["completion_tokens"] for p in grown.stats["parts"]] == [3, 4]


@pytest.mark.parametrize("path", ["first reply", "continue"])
def test_a_sigkill_mid_remote_reply_keeps_what_was_printed_marked_cut(path, upstream, smollm_path, tmp_path):
    """The real llama-server generates; tokchat is killed with SIGKILL once part of the reply is saved."""
    env = child_env(tmp_path)
    common = ["--server", upstream.url, "--temperature", "0", "--repeat-penalty", "1"]
    story = "Write a very long story about a dragon who learns to cook, with many chapters."
    before = ""
    if path == "continue":
        first = tokchat(env, *common, "--prompt", story, "--max-tokens", "16")
        assert first.returncode == 0, first.stderr
        before = last_message(env).content
        printed = before + kill_once_saved([*common, "--resume", "1", "--continue", "--max-tokens", "2000"], env,
                                           ROOT, before)
    else:
        printed = kill_once_saved([*common, "--prompt", story, "--max-tokens", "2000"], env, ROOT)
    cut = last_message(env)
    assert cut.finish_reason == "interrupted" and cut.stats is None
    assert printed.startswith(cut.content) and len(cut.content) > len(before) + 30
    print(f"{path}: {len(printed)} characters printed, {len(cut.content)} stored")
