"""The remote backend against a real ``llama-server`` on loopback (and one split over two RPC workers).

The oracle for every reply is the local llama.cpp backend on the same GGUF (greedy), or
the server's own non-streamed ``return_tokens`` answer.  Servers are built from the
llama.cpp in llama-cpp-python's sdist (``tests/support/assets.py``), started per test on free
ports and always stopped.
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from support.remote_servers import LlamaServer, RpcWorker

from app.settings.options import ChatOptions
from app.chat.open import open_chat
from app.conversation.session import ChatSession
from backends.base import BackendError, Generation, LoadOptions, SamplingParams
from backends.remote import RemoteSettings
from backends.remote_connect import VocabularyMismatch, connect
from backends.remote_llamacpp import LlamaCppAdapter
from tokenizer import load_tokenizer

pytestmark = pytest.mark.slow

# greedy with the default repetition penalty (1.1 over the last 64 ids of prompt and reply): llama-server
# accepts every prompt id into its sampler (server-context.cpp), and so does our local backend
GREEDY = SamplingParams(temperature=0.0, max_tokens=20, seed=7)
QUESTIONS = ("What is the capital of France?", "And of Italy?")


class Recording:
    """A backend wrapper that keeps every generated id, per turn."""

    def __init__(self, backend) -> None:
        self._backend = backend
        self.turns: list[list[int]] = []

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def generate(self, prompt_ids, sampling, stop_ids, on_progress=None):
        ids: list[int] = []
        self.turns.append(ids)
        generation = self._backend.generate(prompt_ids, sampling, stop_ids, on_progress)

        def recorded():
            try:
                for token in generation:
                    ids.append(token)
                    yield token
            finally:
                generation.close()  # the server's numbers are read when the stream ends

        return Generation(recorded(), generation.stats)


def remote_session(url: str, model: Path | None, sampling=GREEDY, **settings) -> ChatSession:
    options = ChatOptions(model=str(model) if model else None, server=RemoteSettings(url=url, **settings),
                          sampling=sampling)
    session = open_chat(options).session
    session.backend = Recording(session.backend)
    return session


def local_session(model: Path, tmp_path: Path, sampling=GREEDY, ctx: int = 512, repack: bool = True) -> ChatSession:
    from backends.llama_cpp import LlamaCppBackend

    backend = LlamaCppBackend()
    backend.load(model, LoadOptions(n_ctx=ctx, n_threads=1, repack=repack, log_path=tmp_path / "local.log"))
    return open_chat(ChatOptions(model=str(model), sampling=sampling, ctx=ctx), backend=Recording(backend)).session


def chat(session: ChatSession, text: str):
    events = list(session.send(text))
    assert [e.kind for e in events if e.kind == "error"] == [], [e.text for e in events]
    return events[-1].stats


@pytest.fixture
def server_factory(tmp_path):
    started: list = []

    def start(model: Path, **kwargs) -> LlamaServer:
        server = LlamaServer(model, tmp_path, **kwargs)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


# -- same ids as local ---------------------------------------------------------------------

@pytest.mark.parametrize("model_fixture", ["smollm_path", "qwen_path"])
def test_greedy_replies_equal_the_local_backend_id_for_id(request, model_fixture, server_factory, tmp_path):
    model = request.getfixturevalue(model_fixture)
    server = server_factory(model)
    remote = remote_session(server.url, None)  # no --model: the tokenizer comes from what the server serves
    local = local_session(model, tmp_path)
    try:
        for question in QUESTIONS:
            r, l_ = chat(remote, question), chat(local, question)
            assert r.verified and r.backend == "remote"
            assert (r.completion_tokens, r.prompt_tokens, r.finish_reason) == (
                l_.completion_tokens, l_.prompt_tokens, l_.finish_reason)
        assert remote.backend.turns == local.backend.turns
        assert all(remote.backend.turns)
        assert remote.messages[-1].content == local.messages[-1].content
    finally:
        remote.backend.close()
        local.backend.close()


def test_multi_turn_prompt_reuse_comes_from_the_servers_numbers(smollm_path, server_factory):
    server = server_factory(smollm_path)
    session = remote_session(server.url, smollm_path)
    try:
        first = chat(session, QUESTIONS[0])
        assert first.new_prompt_tokens == first.prompt_tokens  # a fresh slot evaluates everything
        turn1 = len(session.last_prompt.ids)
        parsers = []  # the server's own numbers, as its stream parser read them
        adapter = session.backend.adapter
        make_parser = adapter.parser
        adapter.parser = lambda prompt: parsers.append(make_parser(prompt)) or parsers[-1]
        second = chat(session, QUESTIONS[1])
        counts = parsers[-1].counts
        assert second.verified
        assert counts.prompt_tokens == second.prompt_tokens == len(session.last_prompt.ids)
        assert counts.cached_tokens + counts.evaluated_tokens == second.prompt_tokens
        assert second.new_prompt_tokens == counts.evaluated_tokens
        assert counts.cached_tokens >= turn1  # turn 1's prompt (and its reply) stayed in the slot
        assert second.new_prompt_tokens < second.prompt_tokens - turn1
    finally:
        session.backend.close()


# -- multi-byte output: ids held back by the stream ------------------------------------------

class ForcedText(LlamaCppAdapter):
    """llama-server's own grammar sampler forces a reply text, so the model must emit its bytes."""

    def __init__(self, text: str, held_back) -> None:
        super().__init__(slot=0, held_back=held_back)
        self.grammar = 'root ::= "' + text + '"'

    def completion(self, prompt, sampling, stop_ids, seed):
        request = super().completion(prompt, sampling, stop_ids, seed)
        # no prompt cache: llama-server's README warns that a cached prompt can change the logits
        # (other batch sizes), and the forced text leaves near-ties between tokenizations of its bytes
        request.body.update(grammar=self.grammar, cache_prompt=False)
        return request

    def recovery(self, prompt, sampling, seed, n):
        request = super().recovery(prompt, sampling, seed, n)
        request.body.update(grammar=self.grammar, cache_prompt=False)
        return request


def _non_streamed_ids(backend, prompt, sampling, seed) -> list[int]:
    request = backend.adapter.completion(prompt, sampling, (), seed)
    request.body.update(stream=False, return_tokens=True)
    return backend.adapter.recovered_ids(backend.request_json(request))


def _ends_inside_a_character(tokenizer, ids) -> bool:
    try:
        tokenizer.decode_bytes(ids).decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def test_multibyte_output_loses_no_ids_in_the_stream(smollm_path, server_factory):
    text = "日本語のテキスト 🙂👍🏽 中文字符"
    server = server_factory(smollm_path)
    tokenizer = load_tokenizer(smollm_path)
    backend = connect(RemoteSettings(url=server.url), tokenizer, str(smollm_path))
    try:
        backend.adapter = ForcedText(text, backend.adapter.held_back)
        prompt = tokenizer.encode("<|im_start|>user\nSay something<|im_end|>\n<|im_start|>assistant\n", special=True)
        sampling = replace(GREEDY, max_tokens=64)
        oracle = _non_streamed_ids(backend, prompt, sampling, seed=1)
        assert tokenizer.decode(oracle).startswith(text)
        assert any(_ends_inside_a_character(tokenizer, oracle[:n]) for n in range(1, len(oracle)))

        generation = backend.generate(prompt, replace(sampling, seed=1), tokenizer.eog_ids)
        got = list(generation)
        assert got == oracle
        assert generation.stats.verified and generation.stats.counted == len(got)

        # a reply cut inside a character: the stream never carries the last ids; they are fetched again
        cut = next(n for n in range(len(oracle), 0, -1) if _ends_inside_a_character(tokenizer, oracle[:n]))
        generation = backend.generate(prompt, replace(sampling, seed=1, max_tokens=cut), tokenizer.eog_ids)
        got = list(generation)
        assert got == oracle[:cut]
        assert generation.stats.verified and "fetched again" in generation.stats.note

        # without our vocabulary the held-back ids cannot be rebuilt: the turn says so instead of miscounting
        backend.adapter = ForcedText(text, None)
        generation = backend.generate(prompt, replace(sampling, seed=1), tokenizer.eog_ids)
        got = list(generation)
        assert len(got) < len(oracle) and not generation.stats.verified
        assert "could not be recovered" in generation.stats.note
        assert f"the server counted {len(oracle)} generated ids" in generation.stats.note
    finally:
        backend.close()


def wait_idle(server: LlamaServer, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while server.slots()[0]["is_processing"] and time.monotonic() < deadline:
        time.sleep(0.05)


# -- cancel ------------------------------------------------------------------------------------

def test_cancel_closes_the_stream_and_the_server_stops_generating(smollm_path, server_factory):
    server = server_factory(smollm_path)
    session = remote_session(server.url, smollm_path, sampling=replace(GREEDY, max_tokens=400))
    try:
        events = session.send("Count from 1 to 200, one number per line.")
        shown = 0
        for event in events:
            if event.kind == "content":
                shown += 1
                if shown == 3:
                    session.cancel()
        stats = session.messages[-1].stats
        assert stats.finish_reason == "cancelled" and 0 < stats.completion_tokens < 400
        wait_idle(server)
        slot = server.slots()[0]
        assert not slot["is_processing"]
        assert slot["next_token"][0]["n_decoded"] < 100  # it stopped long before the 400 asked for
        # and the chat goes on
        assert chat(session, "Say hi.").verified
    finally:
        session.backend.close()


# -- faults: one line each, the partial reply kept, the chat continues ---------------------------

def test_server_down_at_start_is_one_line(smollm_path):
    from support.remote_servers import free_port

    with pytest.raises(BackendError, match=r"cannot reach the server at http://127\.0\.0\.1:\d+ .*is it running"):
        remote_session(f"http://127.0.0.1:{free_port()}", smollm_path)


def test_server_killed_mid_reply_keeps_the_partial_reply_and_chat_resumes(smollm_path, server_factory):
    server = server_factory(smollm_path)
    session = remote_session(server.url, smollm_path, sampling=replace(GREEDY, max_tokens=300))
    try:
        events = []
        for event in session.send("Count from 1 to 200, one number per line."):
            events.append(event)
            if sum(e.kind == "content" for e in events) == 5 and server.proc.poll() is None:
                server.kill()
        errors = [e.text for e in events if e.kind == "error"]
        assert len(errors) == 1 and "broke mid-reply" in errors[0] and "\n" not in errors[0]
        reply = session.messages[-1]
        assert reply.finish_reason == "error" and reply.content and reply.stats.completion_tokens >= 5

        errors = [e.text for e in session.send("Still there?") if e.kind == "error"]
        assert len(errors) == 1 and "cannot reach" in errors[0]

        server_factory(smollm_path, port=server.port)  # back on the same port
        assert chat(session, "Say hi.").verified
        assert [m.role for m in session.messages] == ["user", "assistant"] * 3
    finally:
        session.backend.close()


def test_server_error_json_is_one_line(smollm_path, server_factory):
    server = server_factory(smollm_path)
    session = remote_session(server.url, smollm_path)
    try:
        session.backend.info.context_size = 100_000  # we believe in more context than the server has
        session.context_size = 100_000
        events = list(session.send("word " * 700))
        errors = [e.text for e in events if e.kind == "error"]
        assert len(errors) == 1 and "answered 400" in errors[0], errors
        assert session.messages[-1].finish_reason == "error"
        session.backend.info.context_size = session.context_size = 512
        assert chat(session, "Say hi.").verified
    finally:
        session.backend.close()


def test_slow_server_first_token_and_idle_timeouts(smollm_path, server_factory):
    server = server_factory(smollm_path)
    session = remote_session(server.url, smollm_path, sampling=replace(GREEDY, max_tokens=200),
                             idle_timeout_s=1.0, first_token_timeout_s=1.0)
    try:
        server.pause()  # a hung server: the request is accepted, nothing comes back
        events = list(session.send("Hello"))
        errors = [e.text for e in events if e.kind == "error"]
        assert len(errors) == 1 and "sent nothing for" in errors[0] and "first token" in errors[0]
        server.resume()
        wait_idle(server)  # the abandoned request ends once the server sees its connection closed
        session.backend.settings.first_token_timeout_s = 60.0  # now only the idle timeout is under test

        events = []
        for event in session.send("Count from 1 to 100, one number per line."):
            events.append(event)
            if sum(e.kind == "content" for e in events) == 3:
                server.pause()
        server.resume()
        errors = [e.text for e in events if e.kind == "error"]
        assert len(errors) == 1 and "next token" in errors[0]
        assert session.messages[-1].finish_reason == "error" and session.messages[-1].content
        assert chat(session, "Say hi.").verified
    finally:
        server.resume()
        session.backend.close()


def test_wrong_api_key_is_refused_with_the_fix(smollm_path, server_factory):
    server = server_factory(smollm_path, api_key="s3cret")
    with pytest.raises(BackendError, match="refused the request .*401.*Invalid API Key.*--api-key"):
        remote_session(server.url, smollm_path, api_key="wrong")
    with pytest.raises(BackendError, match="401"):
        remote_session(server.url, smollm_path)
    session = remote_session(server.url, smollm_path, api_key="s3cret")
    try:
        assert chat(session, "Say hi.").verified
    finally:
        session.backend.close()


def test_headless_cli_with_the_key_from_the_environment(smollm_path, server_factory, tmp_path):
    import json
    import os
    import subprocess
    import sys

    server = server_factory(smollm_path, api_key="s3cret")
    env = dict(os.environ, TOKCHAT_API_KEY="s3cret", TOKCHAT_CONFIG_DIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "app", "--server", server.url, "--prompt", "Say hi.", "--temperature", "0",
         "--max-tokens", "8", "--stats", "--no-history"],
        capture_output=True, text=True, env=env, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stderr.strip().splitlines()[-1])
    assert stats["backend"] == "remote" and stats["verified"] is True and 0 < stats["completion_tokens"] <= 8
    assert done.stdout.strip()
    assert "vocabulary check passed" in done.stderr


def test_a_server_serving_another_model_is_refused(smollm_path, qwen_path, server_factory):
    server = server_factory(qwen_path)
    with pytest.raises(VocabularyMismatch) as caught:
        remote_session(server.url, smollm_path)
    message = str(caught.value)
    assert "\n" not in message and "qwen" in message.lower() and "smollm2.gguf" in message
    assert "151936" in message and "49152" in message
    # trusted anyway: connects (the user asked for it)
    session = remote_session(server.url, smollm_path, trust_server_vocab=True)
    session.backend.close()


# -- distributed: one model split over two RPC workers ----------------------------------------

def test_split_over_two_rpc_workers_gives_the_same_greedy_ids(smollm_path, server_factory, tmp_path, monkeypatch):
    import re

    # the workers hold the cache, so they attend every batch with flash attention; tokchat's build attends short
    # batches on the CPU by matrix products (backends/patches/cpu-small-batch-attention.patch): the local engine
    # here is told to do as the workers do
    monkeypatch.setenv("TOKCHAT_CPU_FLASH_ATTN", "all")
    workers = [RpcWorker(tmp_path).start() for _ in range(2)]
    try:
        server = server_factory(smollm_path, rpc=[w.endpoint for w in workers], extra=("-lv", "4"))
        log = server.log.read_text()
        for worker in workers:  # the model's weights really live on both workers
            sizes = re.findall(rf"load_tensors: RPC\d\[{re.escape(worker.endpoint)}\] model buffer size = +([\d.]+) MiB",
                               log)
            assert sizes and float(sizes[0]) > 10, log[-3000:]
        remote = remote_session(server.url, smollm_path)
        # an RPC worker computes with ggml's plain CPU kernels: no repacked weights, so no AMX kernel on a CPU
        # that has it (whose int8 matmuls part from the plain ones' greedy ids after a few tokens)
        local = local_session(smollm_path, tmp_path, repack=False)
        try:
            for question in QUESTIONS:
                assert chat(remote, question).verified
                chat(local, question)
            assert remote.backend.turns == local.backend.turns and all(remote.backend.turns)
        finally:
            remote.backend.close()
            local.backend.close()
            server.stop()  # before its workers: llama-server asks them for memory figures on exit
    finally:
        for worker in workers:
            worker.stop()


def test_doctor_reports_the_server(smollm_path, server_factory, capsys):
    from app.cli import main

    server = server_factory(smollm_path)
    assert main(["doctor", "--server", server.url]) == 0
    out = capsys.readouterr().out
    assert "llamacpp" in out and "smollm2.gguf" in out and "49152 tokens" in out and "ids are ours" in out
    assert main(["doctor", "--server", server.url, "--json"]) == 0
    assert httpx.get(server.url + "/health").status_code == 200


def test_a_vocab_only_gguf_is_enough_for_the_tokenizer(qwen_path, llamacpp_models_dir, server_factory):
    server = server_factory(qwen_path)
    vocab_only = llamacpp_models_dir / "ggml-vocab-qwen2.gguf"  # no weights: tokenizer and metadata only
    session = remote_session(server.url, vocab_only)
    try:
        assert "vocabulary check passed: the server's ids are ours" in session.backend.info.notes
        stats = chat(session, "What is 2+2?")
        assert stats.verified and stats.completion_tokens > 0
    finally:
        session.backend.close()
