"""Draft-model speculation on a real pair of one vocabulary: Qwen2.5-Coder-0.5B drafting for the 1.5B.

Real parts: both GGUFs (test assets), llama.cpp in this process and in the
engine process, tokchat's tokenizer reading both vocabularies.  The oracle for
every reply is the same engine without speculation.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.process_env import child_env
from support.speculation_runs import IM_END, assert_same_or_kernel_tie, chat, run, run_with_stats

from backends.base import BackendError, DraftCounts, LoadOptions, SamplingParams
from backends.draft_model import DraftModelConfig, ModelDrafter, vocab_difference


@pytest.fixture(scope="module")
def engines(qwen15_path, qwen_path, tmp_path_factory):
    """The 1.5B without speculation, and with the 0.5B as its draft model (``speculative = "draft"``)."""
    from backends.llama_cpp import LlamaCppBackend

    logs = tmp_path_factory.mktemp("draft-logs")
    plain, drafted = LlamaCppBackend(), LlamaCppBackend()
    plain.load(qwen15_path, LoadOptions(n_ctx=2048, speculative="off", log_path=logs / "off.log"))
    drafted.load(qwen15_path, LoadOptions(n_ctx=2048, speculative="draft", draft_model=qwen_path,
                                          log_path=logs / "draft.log"))
    yield {"off": plain, "draft": drafted}
    plain.close()
    drafted.close()


@pytest.fixture(scope="module")
def tok(qwen15_path):
    from tokenizer import load_tokenizer

    return load_tokenizer(qwen15_path)


QUESTION = "Write a Python function that checks whether a number is prime, with a docstring."


@pytest.mark.slow
def test_a_greedy_reply_with_a_draft_model_is_the_reply_without_it(engines, tok):
    prompt = chat(tok, QUESTION)
    stops = {tok.encode(IM_END, special=True)[0]}
    sampling = SamplingParams(temperature=0, max_tokens=64, repeat_penalty=1.0)
    plain = run(engines["off"], prompt, sampling, stops)
    fast, stats = run_with_stats(engines["draft"], prompt, sampling, stops)
    assert_same_or_kernel_tie(engines["off"], prompt, plain, fast, sampling)
    counts = stats.draft
    assert isinstance(counts, DraftCounts) and counts.drafted > 0
    assert 0 < counts.accepted <= min(counts.drafted, len(fast))
    assert any(note.startswith("draft model qwen2.5-coder-0.5b.gguf") and "MiB of weights" in note
               for note in engines["draft"].info.notes)


@pytest.mark.slow
def test_a_seeded_sampled_reply_is_reproducible_and_the_cache_exact(engines, tok):
    """temperature > 0: greedy drafts are one-hot, so the chain draws once per kept id (the module docstring)."""
    backend = engines["draft"]
    prompt = chat(tok, QUESTION)
    stops = {tok.encode(IM_END, special=True)[0]}
    sampling = SamplingParams(temperature=0.8, max_tokens=48, seed=7)
    first, stats = run_with_stats(backend, prompt, sampling, stops)
    counts = stats.draft
    again, again_stats = run_with_stats(backend, prompt, sampling, stops)
    assert again == first and again_stats.draft == counts
    assert counts.accepted > 0
    assert backend._engine.tokens == prompt + first[:-1]


def test_the_drafter_stops_where_the_draft_model_doubts(engines, tok):
    """p_min: with a bar no probability reaches, nothing is drafted; with none, the full length is."""
    draft_engine = engines["draft"]._draft_engine
    context = chat(tok, QUESTION)

    def propose(config: DraftModelConfig) -> list[int]:
        return engines["draft"]._worker.call(lambda: ModelDrafter(draft_engine, context, config).draft(8))

    assert propose(DraftModelConfig(max_draft=16, p_min=1.01)) == []
    eager = propose(DraftModelConfig(max_draft=16, p_min=0.0))
    assert len(eager) == 8
    assert propose(DraftModelConfig(max_draft=3, p_min=0.0)) == eager[:3]  # the same greedy path, cut shorter


def test_the_draft_model_drafts_its_configured_length(engines, tok):
    """The reply's Speculator asks the real draft model for the room left, and the draft model's own
    ``max_draft`` cuts it (it used to be prompt lookup's adaptive length, 8 ids at a reply's start)."""
    from backends.speculative import Speculator

    backend = engines["draft"]
    context = chat(tok, QUESTION)
    config = DraftModelConfig(max_draft=12, p_min=0.0)

    def first_draft() -> list[int]:
        model = ModelDrafter(backend._draft_engine, context[:-1], config)
        return Speculator("draft", context[:-1], model=model).draft(context[-1], room=100)

    assert len(backend._worker.call(first_draft)) == 12


def test_a_draft_model_of_another_vocabulary_is_refused_in_one_line(qwen_path, smollm_path, tmp_path):
    from backends.llama_cpp import LlamaCppBackend

    assert vocab_difference(qwen_path, qwen_path) is None
    line = vocab_difference(qwen_path, smollm_path)
    assert line is not None and "\n" not in line and "cannot draft for qwen2.5-coder-0.5b.gguf" in line
    with pytest.raises(BackendError) as refused:
        LlamaCppBackend().load(qwen_path, LoadOptions(n_ctx=512, speculative="draft", draft_model=smollm_path,
                                                      log_path=tmp_path / "e.log"))
    assert str(refused.value) == line


@pytest.mark.parametrize("content", ["not a gguf", "truncated"])
def test_a_draft_model_file_that_cannot_be_read_is_one_line_naming_it(qwen_path, tmp_path, content):
    """The user's path (the engine process): a draft model that is no GGUF, or a GGUF cut short, is named in one
    line; it used to kill the engine while loading and blame the main model ("died of SIGABRT while loading
    qwen2.5-coder-0.5b.gguf")."""
    draft = tmp_path / "draft.gguf"
    draft.write_bytes(b"root:x:0:0:root:/root:/bin/bash\n" if content == "not a gguf"
                      else qwen_path.read_bytes()[:4096])
    done = subprocess.run(
        [sys.executable, "-m", "app", "--model", str(qwen_path), "--draft-model", str(draft), "--speculative", "auto",
         "--prompt", "Say hi", "--max-tokens", "4", "--ctx", "512", "--no-history"],
        capture_output=True, text=True, env=child_env(tmp_path), cwd=tmp_path, timeout=300)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if "draft.gguf" in line]
    assert len(lines) == 1 and "could not read the draft model draft.gguf: bad GGUF file" in lines[0], done.stderr
    assert "died" not in done.stderr and "Traceback" not in done.stderr


def test_doctor_says_whether_the_draft_model_fits_and_what_it_holds(qwen_path, smollm_path, tmp_path):
    """``tokchat doctor`` with a draft model: the vocabulary check the engine makes, and its memory, which llama.cpp's
    own load note (a real load at the same context) confirms.  The 0.5B drafts for itself here: the figures are
    the draft's, and the smaller load keeps the test short."""
    import re

    def tokchat(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True,
                              env=child_env(tmp_path), cwd=tmp_path, timeout=300)

    doctor = tokchat("doctor", "--model", str(qwen_path), "--draft-model", str(qwen_path))
    assert doctor.returncode == 0, doctor.stderr
    line = next(x for x in doctor.stdout.splitlines() if x.startswith("draft model"))
    assert line.startswith("draft model qwen2.5-coder-0.5b.gguf: same vocabulary as qwen2.5-coder-0.5b.gguf; about ")
    assert "drafts where auto's timing finds it pays" in line  # speculative = auto, the default
    ours = re.search(r"about (\d+) MiB of weights \+ (\d+) MiB of KV cache at ([\d,]+) ids", line)
    chat = tokchat("--model", str(qwen_path), "--draft-model", str(qwen_path), "--prompt", "Hi",
                   "--max-tokens", "1", "--no-history")
    assert chat.returncode == 0, chat.stderr
    assert f"n_ctx {ours.group(3).replace(',', '')}" in chat.stderr  # the same context as doctor assumed
    theirs = re.search(r"draft model qwen2.5-coder-0.5b.gguf: .*\((\d+) MiB of weights \+ (\d+) MiB of KV",
                       chat.stderr)
    assert ours.group(2) == theirs.group(2)  # the KV cache as llama.cpp allocated it
    assert abs(int(ours.group(1)) - int(theirs.group(1))) <= 0.1 * int(theirs.group(1))  # tensors vs its buffer
    other = tokchat("doctor", "--model", str(qwen_path), "--draft-model", str(smollm_path))
    assert ("draft model: smollm2.gguf cannot draft for qwen2.5-coder-0.5b.gguf: their vocabularies have 49152 and "
            "151936 tokens") in other.stdout


@pytest.mark.slow
def test_headless_with_a_draft_model_counts_its_drafts(qwen15_path, qwen_path, tmp_path):
    """The user's path: flags, settings, the engine process, the stats line."""
    done = subprocess.run(
        [sys.executable, "-m", "app", "--model", str(qwen15_path), "--draft-model", str(qwen_path),
         "--speculative", "draft", "--prompt", QUESTION, "--max-tokens", "32", "--temperature", "0",
         "--ctx", "1024", "--stats", "--no-history"],
        capture_output=True, text=True, env=child_env(tmp_path), cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    stats = json.loads([line for line in done.stderr.splitlines() if line.startswith("{")][-1])
    assert stats["drafted_tokens"] > 0 and 0 < stats["accepted_tokens"] <= stats["drafted_tokens"]
    assert "draft model qwen2.5-coder-0.5b.gguf" in done.stderr


# -- auto sets a draft model aside where it does not pay (SpeedCheck) ----------------------------------------------

def test_the_speed_check_sets_the_draft_model_aside_only_where_its_steps_are_slower():
    from backends.speculative import SpeedCheck

    check = SpeedCheck(plain_steps=2, min_steps=3)
    assert not check.may_ask_model()  # plain steps first: the yardstick
    for _ in range(2):
        check.record(0.10, 1, asked_model=False, drafted=False)  # 10 ids/s plain
    assert check.may_ask_model()
    check.record(0.01, 30, asked_model=False, drafted=True)  # a lookup draft counts for neither side
    assert (check.plain_ids, check.model_steps) == (2, 0)
    check.record(0.30, 2, asked_model=True, drafted=True)  # 6.7 ids/s, but not enough steps to judge yet
    check.record(0.20, 1, asked_model=True, drafted=False)  # asked, drafted nothing: the ask still cost
    assert check.may_ask_model()
    check.record(0.30, 4, asked_model=True, drafted=True)  # 7 ids in 0.8 s: 8.75 ids/s < 10
    assert not check.may_ask_model()

    paying = SpeedCheck(plain_steps=1, min_steps=2)
    paying.record(0.10, 1, asked_model=False, drafted=False)
    for _ in range(20):
        paying.record(0.20, 5, asked_model=True, drafted=True)  # 25 ids/s
    assert paying.may_ask_model()


class CostClock:
    """A clock that reads cost instead of time: each main-model decode 1, each draft-model decode ``draft_cost``.

    Deterministic where wall time is not: the test says how dear a draft step
    is, and the backend's own check decides.  ``asks`` counts the steps that
    asked the draft model (each ask cuts its cache back once; so does the
    prompt's evaluation, once per reply).
    """

    def __init__(self, backend, monkeypatch, draft_cost: float) -> None:
        self.now = 0.0
        self.asks = 0
        main, draft = backend._engine, backend._draft_engine
        monkeypatch.setattr(main, "decode", self._costing(main.decode, 1.0))
        monkeypatch.setattr(draft, "decode", self._costing(draft.decode, draft_cost))
        truncate = draft.truncate

        def counted(n: int) -> None:
            self.asks += 1
            truncate(n)

        monkeypatch.setattr(draft, "truncate", counted)
        monkeypatch.setattr(backend, "clock", lambda: self.now)

    def _costing(self, decode, cost: float):
        def costed(*args, **kwargs):
            self.now += cost
            return decode(*args, **kwargs)

        return costed


@pytest.mark.slow
@pytest.mark.parametrize("draft_cost, set_aside", [(3.0, True), (0.0, False)])
def test_auto_sets_a_draft_model_aside_when_its_steps_emit_fewer_ids(engines, tok, monkeypatch, draft_cost,
                                                                       set_aside):
    """The real pair under ``auto``: a dear draft model is asked in ``min_steps`` steps and then no more; a free
    one goes on being asked; either way the reply is the reply without speculation."""
    from backends.speculative import SpeedCheck

    backend = engines["draft"]
    monkeypatch.setattr(backend, "speculative", "auto")
    clock = CostClock(backend, monkeypatch, draft_cost)
    prompt = chat(tok, "Tell me a short story about a cat who learns to sail.")
    sampling = SamplingParams(temperature=0, max_tokens=40, repeat_penalty=1.0)
    fast = run(backend, prompt, sampling, set())
    plain = run(engines["off"], prompt, sampling, set())
    assert_same_or_kernel_tie(engines["off"], prompt, plain, fast, sampling)
    asks = clock.asks - 1  # the prompt's evaluation
    if set_aside:
        assert asks == SpeedCheck().min_steps
    else:
        assert asks > 2 * SpeedCheck().min_steps


@pytest.mark.slow
def test_the_draft_model_reads_the_prompt_with_the_main_model(engines, tok):
    """In the prompt's evaluation, in the same progress, not at its first draft inside the reply (where its
    catch-up cost seconds of reply time and made ``auto`` judge the draft model by a prompt's cost)."""
    from backends.base import common_prefix_length

    backend = engines["draft"]
    prompt = chat(tok, "Name three rivers in Europe.")
    new_ids = [len(prompt) - min(common_prefix_length(engine.tokens, prompt), len(prompt) - 1)
               for engine in (backend._engine, backend._draft_engine)]
    shown = []
    generation = backend.generate(prompt, SamplingParams(temperature=0, max_tokens=1), set(),
                                  on_progress=shown.append)
    assert len(list(generation)) == 1  # one id: no step asked the draft model
    assert backend._draft_engine.tokens == prompt
    assert shown[-1].done == shown[-1].total == sum(new_ids)  # both models' ids in one progress
    assert generation.stats.prompt_evaluated == new_ids[0]  # the count of the prompt is the main model's
