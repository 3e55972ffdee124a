"""Through ``--server``, a long prompt's progress is llama-server's own report (``return_progress``).

A real ``llama-server`` (built by tests/support/assets.py from the pinned sources) evaluates a
600-id prompt in batches of 128; every ``prompt_progress`` event it sends is recorded
from the stream, and the generation's ``stats.progress`` (what the TUI shows) must be the
server's numbers, the reused cache left out, ending at the whole prompt.
"""
from __future__ import annotations

import pytest
from support.remote_servers import LlamaServer

from backends.base import SamplingParams
from backends.remote import RemoteSettings
from backends.remote_connect import connect
from backends.remote_llamacpp import LlamaCppStream

pytestmark = pytest.mark.slow


class RecordingStream(LlamaCppStream):
    """The real parser, keeping every progress report and what the backend showed after it."""

    seen: list[tuple[int, int, float]] = []

    def feed(self, event):
        ids = super().feed(event)
        if "prompt_progress" in event:
            RecordingStream.seen.append(self.counts.progress)
        return ids


def test_a_long_prompt_reports_the_servers_own_progress(smollm_path, tmp_path):
    from tokenizer import load_tokenizer

    # batches of 128 ids: the server reports after each, so a prompt of 600 ids makes five reports
    server = LlamaServer(smollm_path, tmp_path, ctx=2048, extra=("-b", "128", "-ub", "128")).start()
    try:
        tokenizer = load_tokenizer(smollm_path)
        backend = connect(RemoteSettings(url=server.url), tokenizer, str(smollm_path))
        backend.adapter.parser = lambda prompt: RecordingStream(backend.adapter.held_back)
        RecordingStream.seen = []
        prompt = tokenizer.encode("The tide was high at dawn and the boats went out. " * 80)[:600]
        assert len(prompt) == 600
        greedy = SamplingParams(temperature=0, max_tokens=2)
        generation = backend.generate(prompt, greedy, set())
        ids = list(generation)
        # progress events carry a placeholder id ([0]) that is not part of the reply: the oracle is the
        # server's own non-streamed answer
        oracle = backend.adapter.recovered_ids(
            backend.request_json(backend.adapter.recovery(prompt, greedy, 0, 2), generation=True))
        assert ids == oracle and len(ids) == 2
        seen = RecordingStream.seen
        assert len(seen) >= 3, f"expected a report per 128-id batch, got {seen}"
        assert all(total == 600 for _, total, _ in seen)  # a fresh slot: nothing cached
        done = [d for d, _, _ in seen]
        assert done == sorted(done) and done[0] < 600 and done[-1] == 600
        assert generation.stats.progress is not None
        assert (generation.stats.progress.done, generation.stats.progress.total) == (600, 600)
        assert generation.stats.prompt_evaluated == 600

        # the same prompt again with one more sentence: the cached part is left out of the count
        RecordingStream.seen = []
        longer = prompt + tokenizer.encode(" And then the sun rose.")
        again = backend.generate(longer, greedy, set())
        list(again)
        new = again.stats.prompt_evaluated  # the server's own count: the prompt less its cached part
        assert 0 < new <= len(longer) - 500
        assert RecordingStream.seen and RecordingStream.seen[-1][:2] == (new, new)
        assert (again.stats.progress.done, again.stats.progress.total) == (new, new)
    finally:
        server.stop()
