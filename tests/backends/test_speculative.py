"""Speculative decoding (issue 22) on real models: lossless, counted, cache-exact.

The oracle for every reply is the same llama.cpp backend with speculation
off, loaded beside it on the same GGUF (Qwen2.5-Coder-0.5B).  llama.cpp's
CPU matmul rounds a batch of 4 or more ids differently from one id
(repacked Q4_K gemm against gemv: logits differ by up to ~0.4 here), so a
near-tie between the two best ids can tip the other way when verified in a
batch, as it does in llama.cpp's own speculation.  The equality check
allows exactly that and nothing else: ids equal up to the first difference,
and there the two candidates within rounding of each other under the
sampling chain's own penalty.  The
acceptance rule is tested statistically on a slice of the model's real
next-id distribution (chi-square against the target, with a wrong rule as
the control that the test can fail).  The ``--server`` path reads the
speculation numbers of a real ``llama-server --spec-type ngram-mod``.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from support.remote_servers import LlamaServer

from backends.base import DraftCounts, GenerationStats, LoadOptions, SamplingParams
from backends.speculative import AutoPolicy, DrafterConfig, NgramDrafter, Speculator, accept_draft
from support.speculation_runs import assert_same_or_kernel_tie, chat, IM_END, KERNEL_ROUNDING, run, run_with_stats  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def rewrite_request() -> str:
    source = (ROOT / "backends" / "cpu.py").read_text()
    return f"Rewrite this Python file without its docstrings:\n\n```python\n{source}```"


# -- the drafter, the rule and the policy alone ---------------------------------------------------------------

def test_drafter_proposes_what_followed_the_latest_match():
    drafter = NgramDrafter([1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 6], DrafterConfig(sizes=(3, 2), max_draft=4, min_draft=1))
    drafter.extend([1, 2, 3])
    assert drafter.draft() == [7, 8, 6, 1]  # the latest earlier "1 2 3" was followed by 7 8 6
    assert drafter.draft(limit=2) == [7, 8]
    drafter.extend([42])
    assert drafter.draft() == []  # "3 42" and "2 3 42" never occurred before


def test_drafter_prefers_the_longest_match_and_never_matches_itself():
    # "5 6" last occurred before 0; "4 5 6" occurred before 7: the longer match wins
    drafter = NgramDrafter([4, 5, 6, 7, 7, 1, 5, 6, 0, 2, 4, 5, 6],
                           DrafterConfig(sizes=(3, 2), max_draft=3, min_draft=1))
    assert drafter.draft() == [7, 7, 1]
    lone = NgramDrafter([1, 2, 3], DrafterConfig(sizes=(2,), max_draft=3, min_draft=1))
    assert lone.draft() == []  # the trailing "2 3" is the context itself, not an earlier occurrence


def test_drafter_respects_the_minimum_draft():
    drafter = NgramDrafter([1, 2, 3, 1, 2], DrafterConfig(sizes=(2,), max_draft=8, min_draft=2))
    assert drafter.draft() == [3, 1, 2, 3, 1, 2, 3, 1]  # "1 2" was followed by "3 1 2": round the loop
    assert drafter.draft(room=1) == []
    assert drafter.draft(limit=1) == []


def test_accept_draft_counts_the_agreed_prefix():
    assert accept_draft([5, 6, 7], [5, 6, 9, 1]) == 2
    assert accept_draft([5, 6], [5, 6, 3]) == 2
    assert accept_draft([5], [4, 1]) == 0


def test_auto_gives_up_on_failing_drafts_and_ngram_does_not():
    auto, ngram = AutoPolicy("auto", fail_streak=3), AutoPolicy("ngram", fail_streak=3)
    for policy in (auto, ngram):
        policy.record(4, 4)
        policy.record(4, 0)
        policy.record(4, 0)
        assert policy.active
        policy.record(4, 0)
    assert not auto.active and ngram.active
    assert (auto.drafted, auto.accepted) == (16, 4)
    low = AutoPolicy("auto", fail_streak=100, min_drafted=20, min_rate=0.5)
    for _ in range(5):
        low.record(4, 1)
    assert not low.active  # 5 of 20 kept: under half
    assert not AutoPolicy("off").active


def test_draft_length_grows_on_whole_drafts_and_shrinks_on_failures():
    policy = AutoPolicy("ngram", config=DrafterConfig(max_draft=32, min_draft=2, start_draft=8))
    assert policy.limit == 8
    policy.record(8, 8)
    policy.record(16, 16)
    assert policy.limit == 32
    policy.record(32, 32)
    assert policy.limit == 32  # capped
    policy.record(32, 5)
    assert policy.limit == 8  # a quarter: on a CPU a drafted id that is thrown away costs half a step
    for _ in range(5):
        policy.record(2, 0)
    assert policy.limit == 2  # never below the minimum draft
    with pytest.raises(ValueError, match="auto, off, ngram, draft"):
        AutoPolicy("sometimes")


class ScriptedModel:
    """A draft model that proposes ``script`` (cut to the limit it is given, and to its own ``max_draft``)."""

    def __init__(self, script: list[int], max_draft: int = 16) -> None:
        self.script = script
        self.max_draft = max_draft
        self.ids: list[int] = []
        self.limits: list[int] = []

    def extend(self, ids) -> None:
        self.ids.extend(ids)

    def draft(self, limit: int) -> list[int]:
        self.limits.append(limit)
        return self.script[:min(limit, self.max_draft)]


def test_one_speculator_owns_the_reply_counts_and_both_sources():
    """Lookup first, the draft model where lookup finds nothing; the counts over both; ``off`` counts nothing."""
    model = ScriptedModel([50, 51, 52])
    spec = Speculator("auto", [1, 2, 3, 4, 9, 1, 2, 3], config=DrafterConfig(sizes=(3,), min_draft=2), model=model,
                      clock=lambda: 0.0)
    spec.speed.plain_ids = spec.speed.plain_steps  # auto's plain yardstick is taken
    assert spec.counts() == DraftCounts(0, 0)
    assert spec.draft(4, room=10) == [9, 1, 2, 3, 4, 9, 1, 2]  # lookup: "2 3 4" was followed by 9 1 2 3 ...
    assert spec.counts([9]) == DraftCounts(8, 1)  # the batch under way counts from its first id
    spec.verified([9, 1, 7])
    assert spec.counts() == DraftCounts(8, 2) and model.limits == []  # lookup drafted: the model was not asked
    assert spec.draft(7, room=10) == [50, 51, 52]  # "1 7" never occurred: the draft model
    spec.verified([50, 51, 52, 53])
    assert spec.counts() == DraftCounts(11, 5)
    assert model.ids == spec.ngram.ids[-7:] == [4, 9, 1, 7, 50, 51, 52]  # both sources see every kept id
    off = Speculator("off", [1, 2, 3, 1, 2], model=ScriptedModel([5, 6]))
    assert off.draft(3, room=10) == [] and off.counts() is None


def test_the_draft_model_drafts_its_own_length_not_lookups():
    """The draft model's length is its own ``max_draft`` (capped by the room), whatever prompt lookup's
    adaptive length is; lookup drafts alone move that length."""
    model = ScriptedModel(list(range(100, 140)), max_draft=16)
    spec = Speculator("draft", [1, 2, 3], model=model, clock=lambda: 0.0)
    assert spec.ngram is None and spec.policy is None  # draft: the draft model only
    assert spec.draft(4, room=40) == list(range(100, 116))
    assert model.limits == [40]
    spec.verified([100, 7])
    assert spec.draft(7, room=5) == list(range(100, 105))  # a failed draft does not shorten the next one


def test_auto_giving_up_on_lookup_leaves_the_draft_model_to_the_speed_check():
    """Whether the draft model is asked is the speed check's alone: lookup drafts that fail turn lookup's chance
    matches off, not the draft model (it used to be silenced with them)."""
    model = ScriptedModel([60, 61])
    spec = Speculator("auto", [5, 6, 7, 5, 6, 7], config=DrafterConfig(sizes=(1,), min_draft=2), model=model,
                      clock=lambda: 0.0)
    spec.speed.plain_ids = spec.speed.plain_steps  # auto's plain yardstick is taken
    for _ in range(4):  # four lookup drafts, nothing kept
        assert spec.draft(5, room=8)
        spec.verified([99])
    assert not spec.policy.active and model.limits == []  # auto gave up on chance matches
    assert spec.draft(42, room=8) == [60, 61]  # the draft model still drafts: the speed check says it may
    spec.verified([60, 3])
    spec.speed.model_pays = False  # what the speed check decides once the draft model's steps are slower
    assert spec.draft(43, room=8) == []


# -- the acceptance rule against the target distribution --------------------------------------------------------

def chi_square_sf_even(x: float, df: int) -> float:
    """P(X >= x) for a chi-square variable with an even number of degrees of freedom (closed form)."""
    m = df // 2
    half = x / 2
    return math.exp(-half) * sum(half**i / math.factorial(i) for i in range(m))


def chi_square(counts: np.ndarray, p: np.ndarray) -> float:
    expected = p * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.fixture(scope="module")
def real_slices(qwen_path):
    """Two real next-id distributions of Qwen2.5-Coder-0.5B over the same 7 ids (its top 7 after one prompt)."""
    from backends.cpu import llama_default_threads
    from backends.llama_engine import EngineParams, LlamaEngine
    from tokenizer import load_tokenizer

    tokenizer = load_tokenizer(qwen_path)
    engine = LlamaEngine(qwen_path, EngineParams(n_ctx=512, n_threads=llama_default_threads()))
    try:
        def logits(text: str) -> np.ndarray:
            engine.truncate(0)
            engine.decode(chat(tokenizer, text))
            pointer = engine._lib.llama_get_logits_ith(engine.ctx, -1)
            return np.ctypeslib.as_array(pointer, shape=(engine.n_vocab,)).astype(np.float64)

        target = logits("Name a colour.")
        other = logits("Name a fruit.")
    finally:
        engine.close()
    ids = np.argsort(target)[-7:]

    def softmax(x: np.ndarray) -> np.ndarray:
        e = np.exp(x - x.max())
        return e / e.sum()

    # temperature 2 flattens the slice so that every id is drawn often enough for the test
    return softmax(target[ids] / 2), softmax(other[ids] / 2)


def test_sampling_first_is_the_one_hot_rule(real_slices):
    """What the engine does (draw y from p, keep the draft x iff y == x) emits ids distributed as the rule does."""
    p, _ = real_slices
    rng = np.random.default_rng(7)
    x = 3
    counts = np.zeros(len(p))
    kept = 0
    for _ in range(30000):
        y = int(rng.choice(len(p), p=p))
        kept += y == x
        counts[y] += 1
    assert chi_square_sf_even(chi_square(counts, p), len(p) - 1) > 1e-3
    wrong = np.zeros(len(p))  # the control: keeping the draft id whatever the model drew gives x, not p
    wrong[x] = 30000
    assert chi_square_sf_even(chi_square(wrong, p), len(p) - 1) < 1e-6  # the test tells a wrong rule apart
    # x kept with probability p[x]: within 5 standard deviations
    assert abs(kept / 30000 - p[x]) < 5 * math.sqrt(p[x] * (1 - p[x]) / 30000)


# -- the engine: greedy and seeded replies unchanged, counts, cache, cancel ----------------------------------------

@pytest.fixture(scope="module")
def pair(qwen_path, tmp_path_factory):
    """The llama.cpp backend on Qwen2.5-Coder-0.5B twice, in this process: speculation off, and ngram."""
    from backends.llama_cpp import LlamaCppBackend

    logs = tmp_path_factory.mktemp("spec-logs")
    loaded = {}
    for mode in ("off", "ngram"):
        backend = LlamaCppBackend()
        backend.load(qwen_path, LoadOptions(n_ctx=4096, speculative=mode, log_path=logs / f"{mode}.log"))
        loaded[mode] = backend
    yield loaded
    for backend in loaded.values():
        backend.close()


@pytest.fixture(scope="module")
def qwen_tok(qwen_path):
    from tokenizer import load_tokenizer

    return load_tokenizer(qwen_path)


PROMPTS = {
    "code rewrite": rewrite_request(),
    "repeat a list": "Repeat this list exactly, one item a line: apple, pear, plum, fig, kiwi, lime, date, "
                     "grape, mango, peach, melon, lemon, cherry, quince.",
    "fresh prose": "Write a short story about a lighthouse keeper.",
    "json rename": "Return this JSON exactly as it is, except that the field \"email\" is renamed to \"contact\" "
                   "in every record. Reply with the JSON only.\n\n```json\n" + json.dumps(
                       [{"id": 100 + i, "name": name, "email": f"{name.lower()}@example.org", "active": i % 2 == 0}
                        for i, name in enumerate(("Ada", "Alan", "Grace", "Edsger", "Barbara", "Donald"))],
                       indent=2) + "\n```",
    "typo fix": "Fix the spelling mistakes in this text and return the whole text, corrected:\n\nThe keeper "
                "climbed the ninety-nine steps to the lamp room every evening, trimed the wick, wound the "
                "clockwork that turned the lens, and wrote a line in the log: the wether, the ships that "
                "passed, and anything else worth remembering. Most nights there was nothing to write exept "
                "the wind, and the sea against the rocks below, which never stoped.",
}


@pytest.mark.parametrize("name", list(PROMPTS))
def test_greedy_reply_is_id_for_id_the_reply_without_speculation(pair, qwen_tok, name):
    prompt = chat(qwen_tok, PROMPTS[name])
    stops = {qwen_tok.encode(IM_END, special=True)[0]}
    sampling = SamplingParams(temperature=0, max_tokens=80)
    plain, plain_stats = run_with_stats(pair["off"], prompt, sampling, stops)
    fast, fast_stats = run_with_stats(pair["ngram"], prompt, sampling, stops)
    counts = fast_stats.draft
    assert_same_or_kernel_tie(pair["off"], prompt, plain, fast, sampling)
    assert isinstance(counts, DraftCounts) and plain_stats.draft is None
    assert 0 <= counts.accepted <= counts.drafted
    assert counts.accepted <= len(fast)
    if name != "fresh prose":
        assert counts.accepted > len(fast) // 3  # a copy: most ids come from drafts


def test_seeded_sampled_reply_is_reproducible_and_drafted(pair, qwen_tok):
    """temperature > 0: the chain draws once per emitted id, so a seed gives one reply; drafts are still kept.

    (Equality with the reply without speculation would hold but for kernel rounding, which moves a
    draw that falls near a boundary of the distribution; the rule itself is tested above.)
    """
    prompt = chat(qwen_tok, PROMPTS["code rewrite"])
    stops = {qwen_tok.encode(IM_END, special=True)[0]}
    sampling = SamplingParams(temperature=0.8, max_tokens=60, seed=1234)
    backend = pair["ngram"]
    run(backend, prompt, SamplingParams(temperature=0, max_tokens=1), stops)  # the prompt's cache, the same every run
    first, stats = run_with_stats(backend, prompt, sampling, stops)
    counts = stats.draft
    again, again_stats = run_with_stats(backend, prompt, sampling, stops)
    assert again == first
    assert again_stats.draft == counts and counts.accepted > 0
    assert backend._engine.tokens == prompt + first[:-1]


def test_multi_turn_reuses_the_cache_exactly(pair, qwen_tok):
    from backends.base import common_prefix_length

    stops = {qwen_tok.encode(IM_END, special=True)[0]}
    sampling = SamplingParams(temperature=0, max_tokens=80)
    off, ngram = pair["off"], pair["ngram"]
    first = chat(qwen_tok, PROMPTS["code rewrite"])
    plain1, fast1 = run(off, first, sampling, stops), run(ngram, first, sampling, stops)
    assert_same_or_kernel_tie(off, first, plain1, fast1, sampling)
    # the cache holds the prompt and every emitted id but the last, as without speculation
    assert ngram._engine.tokens == first + fast1[:-1]
    text = qwen_tok.decode([t for t in fast1 if t not in stops])
    second = chat(qwen_tok, PROMPTS["code rewrite"], text, "Now the same file, but keep only the imports.")
    (plain2, plain_stats), (fast2, fast_stats) = (run_with_stats(off, second, sampling, stops),
                                                  run_with_stats(ngram, second, sampling, stops))
    assert_same_or_kernel_tie(off, second, plain2, fast2, sampling)
    reused = min(common_prefix_length(first + fast1[:-1], second), len(second) - 1)
    assert fast_stats.prompt_evaluated == len(second) - reused
    if plain1 == fast1:
        assert plain_stats.prompt_evaluated == fast_stats.prompt_evaluated
    assert ngram._engine.tokens == second + fast2[:-1]


def test_cancel_stops_and_leaves_an_exact_cache(pair, qwen_tok):
    prompt = chat(qwen_tok, PROMPTS["code rewrite"])
    stops = {qwen_tok.encode(IM_END, special=True)[0]}
    sampling = SamplingParams(temperature=0, max_tokens=120)
    backend = pair["ngram"]
    run(backend, prompt, SamplingParams(temperature=0, max_tokens=1), stops)  # the prompt's cache, the same every run
    full = run(backend, prompt, sampling, stops)
    got = []
    for token in backend.generate(prompt, sampling, stops):
        got.append(token)
        if len(got) == 10:
            backend.cancel()
    assert got == full[:10]
    assert backend._worker.wait_idle(30)
    cached = backend._engine.tokens
    # the engine stopped within one verified batch, its cache a prefix of prompt + reply, nothing drafted left over
    assert len(prompt) + 9 <= len(cached) < len(prompt) + len(full) - 1
    assert cached == (prompt + full)[: len(cached)]
    assert run(backend, prompt, sampling, stops) == full


def test_counts_cross_the_engine_process(qwen_path, qwen_tok, tmp_path):
    from backends.engine_client import HostedBackend

    hosted = HostedBackend("llama.cpp")
    hosted.load(qwen_path, LoadOptions(n_ctx=2048, speculative="auto", log_path=tmp_path / "engine.log"))
    try:
        prompt = chat(qwen_tok, PROMPTS["repeat a list"])
        reply, stats = run_with_stats(hosted, prompt, SamplingParams(temperature=0, max_tokens=40), set())
        counts = stats.draft
        assert isinstance(counts, DraftCounts)
        assert 0 < counts.accepted <= counts.drafted and counts.accepted <= len(reply)
    finally:
        hosted.close()


def test_draft_mode_without_a_draft_model_is_one_clear_error(qwen_path, tmp_path):
    from backends.base import BackendError
    from backends.llama_cpp import LlamaCppBackend

    with pytest.raises(BackendError, match="needs a draft model: --draft-model"):
        LlamaCppBackend().load(qwen_path, LoadOptions(speculative="draft", log_path=tmp_path / "e.log"))
    with pytest.raises(BackendError, match="auto, off, ngram, draft"):
        LlamaCppBackend().load(qwen_path, LoadOptions(speculative="maybe", log_path=tmp_path / "e.log"))


# -- --server: llama-server's own numbers -------------------------------------------------------------------------

def test_remote_llama_server_speculation_numbers(qwen_path, qwen_tok, tmp_path):
    from backends.remote import RemoteSettings
    from backends.remote_connect import connect

    server = LlamaServer(qwen_path, tmp_path, ctx=2048,
                         extra=("--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "8",
                                "--spec-ngram-mod-n-min", "4", "--spec-ngram-mod-n-max", "16")).start()
    try:
        backend = connect(RemoteSettings(url=server.url), qwen_tok, str(qwen_path))
        try:
            prompt = chat(qwen_tok, PROMPTS["code rewrite"])
            reply, stats = run_with_stats(backend, prompt, SamplingParams(temperature=0, max_tokens=60), set())
            counts = stats.draft
            assert isinstance(counts, DraftCounts)
            assert 0 < counts.accepted <= counts.drafted and counts.accepted <= len(reply)
        finally:
            backend.close()
    finally:
        server.stop()


def test_remote_without_speculation_reports_none():
    from backends.remote_llamacpp import LlamaCppStream

    stream = LlamaCppStream(None)
    # the shape of a final event of a llama-server without --spec-type (no draft_n in its timings)
    stream.feed({"content": "", "tokens": [], "stop": True, "stop_type": "limit", "tokens_predicted": 4,
                 "timings": {"cache_n": 0, "prompt_n": 12, "predicted_n": 4, "predicted_per_second": 20.0}})
    assert stream.counts.draft is None
    stream.feed({"content": "", "tokens": [], "stop": True, "tokens_predicted": 4,
                 "timings": {"predicted_n": 4, "draft_n": 9, "draft_n_accepted": 3}})
    assert stream.counts.draft == DraftCounts(9, 3)


def test_a_long_match_is_a_copy_drafted_long_and_even_after_auto_gave_up():
    """A 24-id match drafts up to ``long_draft`` ids whatever the current length; a 6-id match only the length."""
    config = DrafterConfig()
    story = list(range(1000, 1100))  # a run the reply is about to repeat
    drafter = NgramDrafter(story + list(range(2000, 2010)) + story[:24], config)
    assert drafter.draft(limit=16) == story[24:24 + config.long_draft]
    assert drafter.draft(limit=16, room=10) == story[24:34]  # never past the context's or the reply's room
    assert drafter.draft(limit=16, long_only=True) == story[24:24 + config.long_draft]
    chance = NgramDrafter(story + list(range(2000, 2010)) + story[:6], config)
    assert chance.draft(limit=16) == story[6:22]  # a 6-id match: the current length only
    assert chance.draft(limit=16, long_only=True) == []  # after auto gave up: chance matches are not drafted


def test_a_match_that_runs_into_the_suffix_goes_round_the_loop():
    """A reply stuck in a loop of period p: the draft repeats the loop past the context's end (as ngram-mod's
    chained lookups do), not just the p ids that follow the match."""
    loop = [7, 8, 9, 10, 11]
    drafter = NgramDrafter([1, 2] + loop * 3, DrafterConfig(sizes=(6,), max_draft=12, min_draft=2))
    assert drafter.draft() == (loop * 3)[:12]
    assert drafter.draft(room=7) == (loop * 2)[:7]
    assert drafter.draft(limit=3) == [7, 8, 9]


#: the drafter alone, with the lookups the engine uses but small enough to read
EDIT_CONFIG = DrafterConfig(sizes=(12, 6), max_draft=8, min_draft=2, long_match=12, long_draft=8,
                            resync_after=6, resync_window=4, resync_min=3)


def test_a_copy_left_for_an_edit_is_picked_up_after_it():
    """A copy with one id replaced (a typo fixed, a field renamed): once the reply's next id is found just past
    the edit in the source, the draft goes on from there, without waiting for a 6-id match."""
    source = list(range(100, 140))
    drafter = NgramDrafter(source + [0] + source[:12], EDIT_CONFIG)
    assert drafter.draft() == source[12:20]  # a 12-id match: the copy
    drafter.extend(source[12:15] + [999])  # three ids kept, then the reply's own id where the source has 115
    assert drafter.draft() == []  # 999 is not in the source past the edit
    drafter.extend([116])  # the reply is back on the source: 116 came after the replaced 115
    assert drafter.draft() == source[17:25]
    drafter.extend(source[17:20] + [888, 777])  # an edit of two ids in place of 120, 121
    drafter.extend([122])
    assert drafter.draft() == source[23:31]


def test_resync_needs_a_copy_that_was_followed_and_an_edit_nearby():
    source = list(range(100, 140))
    chance = NgramDrafter(source + [0] + source[:12], EDIT_CONFIG)
    assert chance.draft() == source[12:20]
    chance.extend([112, 113, 999, 115])  # only two ids kept: under resync_min, a chance match
    assert chance.draft() == []
    far = NgramDrafter(source + [0] + source[:12], EDIT_CONFIG)
    assert far.draft() == source[12:20]
    far.extend(source[12:16] + [999, 125])  # 125 is 10 ids past the edit: out of the window
    assert far.draft() == []
    gone = NgramDrafter(source + [0] + source[:12], EDIT_CONFIG)
    assert gone.draft() == source[12:20]
    gone.extend(source[12:16] + [990, 991, 992, 993, 994, 117])  # five ids its own way: the copy is forgotten
    assert gone.draft() == []
    gone.extend([118, 119])
    assert gone.draft() == []  # still forgotten, though 118 119 follow in the source (no 6-id match yet)
    assert NgramDrafter(source, EDIT_CONFIG).draft(long_only=True) == []  # nothing to resync, no long match
