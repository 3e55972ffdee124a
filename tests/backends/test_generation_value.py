"""A generation is a value: ``Backend.generate`` returns the ids and the engine's facts about that reply.

Issue 36, item 1.  Per-reply facts (prompt ids evaluated, prompt progress,
draft counts, verification, the finish reason, a restart notice) used to live
in mutable backend attributes that callers probed with ``getattr``; now each
``generate`` call returns a :class:`backends.base.Generation` whose
``stats`` the engine fills as it goes.  Reading a fact that the stats do not
have, or probing one with ``getattr``/``hasattr`` under any name, fails the
type check that ``python3 dev.py test`` runs first (mypy with
typecheck/no_probes.py; tests/test_type_check.py), which replaced a scan for
a list of names here.  The source scans below keep backends free of per-reply
attributes and unprobed; the rest checks every local engine's stats on real
SmolLM2 replies, in process and through the engine process's pipe.
"""
from __future__ import annotations

import ast
import threading
from pathlib import Path

import pytest

from support.engines import ENGINES, load_backend

from backends.base import (
    BackendError, DraftCounts, Generation, GenerationStats, LoadOptions, PromptProgress, SamplingParams,
)
from backends.openvino import BLOCK_SIZE
from backends.scripted import ScriptedBackend

ROOT = Path(__file__).resolve().parents[2]
#: attributes no backend class may keep any more: the facts live in the generation's stats
GONE = {"last_prompt_evaluated", "last_draft_counts", "last_turn_verified", "last_turn_note", "last_counts",
        "prompt_progress", "on_prompt_progress", "take_restart_notice", "_restart_notice", "_last_parser"}
GREEDY = SamplingParams(temperature=0, max_tokens=12, repeat_penalty=1.0)
SYSTEM = ("<|im_start|>system\nYou are a concise assistant. Answer questions about geography "
          "in one short sentence, without lists and without follow-up questions.<|im_end|>\n")
#: OpenVINO's KV block on the CPU: its prefix cache reuses whole blocks
OPENVINO_BLOCK = BLOCK_SIZE["CPU"]
ONE = SamplingParams(temperature=0, max_tokens=1, repeat_penalty=1.0)


def _sources() -> list[Path]:
    return sorted(p for folder in ("app", "backends") for p in (ROOT / folder).rglob("*.py"))


def _probes(tree: ast.AST):
    """Every ``getattr``/``hasattr`` call: (line, the object's source, the attribute name or None)."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2):
            name = node.args[1].value if isinstance(node.args[1], ast.Constant) else None
            yield node.lineno, ast.unparse(node.args[0]), name


def test_no_getattr_or_hasattr_probes_a_backend_object():
    found = []
    for path in _sources():
        for line, target, name in _probes(ast.parse(path.read_text(), str(path))):
            if "backend" in target.rsplit(".", 1)[-1].lower():
                found.append(f"{path.relative_to(ROOT)}:{line}: getattr({target}, {name!r})")
    assert not found, "a backend is used through the Protocol, never probed: " + ", ".join(found)


def test_no_backend_keeps_per_reply_facts_in_attributes():
    found = []
    for path in sorted((ROOT / "backends").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and node.attr in GONE:
                found.append(f"{path.name}:{node.lineno}: .{node.attr} =")
            elif isinstance(node, ast.FunctionDef) and node.name in GONE:
                found.append(f"{path.name}:{node.lineno}: def {node.name}")
    assert not found, "per-reply facts belong to the generation's stats: " + ", ".join(found)


# -- the value itself, on the deterministic scripted backend ----------------------------------------------

def test_a_generation_iterates_its_ids_and_says_why_they_ended():
    backend = ScriptedBackend([5, 6, 7, 8])
    gen = backend.generate([1, 2, 3], SamplingParams(max_tokens=10), {7})
    assert isinstance(gen, Generation) and isinstance(gen.stats, GenerationStats)
    assert gen.stats.finish_reason is None
    assert list(gen) == [5, 6, 7] and gen.stats.finish_reason == "stop"
    assert gen.stats.prompt_evaluated == 3
    length = backend.generate([1, 2, 3, 5, 6, 7], SamplingParams(max_tokens=2), set())
    assert list(length) == [5, 6] and length.stats.finish_reason == "length"
    assert length.stats.prompt_evaluated == 0  # the whole prompt was cached
    assert gen.stats.finish_reason == "stop" and gen.stats.prompt_evaluated == 3  # each reply keeps its own


def test_a_closed_or_failed_generation_says_so():
    backend = ScriptedBackend([5, 6, 7, 8], fail_after=2)
    gen = backend.generate([1], SamplingParams(max_tokens=10), set())
    assert next(gen) == 5
    gen.close()
    assert gen.stats.finish_reason == "cancelled"
    failing = backend.generate([1], SamplingParams(max_tokens=10), set())
    with pytest.raises(BackendError, match="scripted fault"):
        list(failing)
    assert failing.stats.finish_reason == "error"


# -- every local engine, on real SmolLM2 ------------------------------------------------------------------

@pytest.fixture(scope="module", params=ENGINES)
def engine(request, smollm_path, tmp_path_factory):
    """Each engine's own class in this process, one at a time."""
    loaded = load_backend(request.param, smollm_path, tmp_path_factory.mktemp("engine-logs"), hosted=False)
    yield loaded
    loaded.close()


def test_each_engine_counts_a_cold_prompt_whole_and_a_shared_prefix_less(engine, vocab):
    # a reply to another first id first: nothing of the next prompt is in the cache then
    list(engine.generate(vocab.ids("Zebras") + vocab.chat("Hi"), ONE, {vocab.eos}))
    first = vocab.ids(SYSTEM) + vocab.chat("What is the capital of France?")
    assert len(first) > OPENVINO_BLOCK  # OpenVINO reuses whole blocks only
    cold = engine.generate(first, GREEDY, {vocab.eos})
    reply = list(cold)
    assert reply and cold.stats.prompt_evaluated == len(first)
    assert cold.stats.finish_reason in ("stop", "length") and cold.stats.verified and cold.stats.notice == ""
    assert cold.stats.finish_reason == ("stop" if reply[-1] == vocab.eos else "length")
    second = first + reply + vocab.ids("\n") + vocab.chat("And of Spain?")
    warm = engine.generate(second, ONE, {vocab.eos})
    assert len(list(warm)) == 1 and warm.stats.finish_reason == "length"
    new = len(second) - len(first) - len(reply)
    if engine.info.backend == "openvino":  # the estimate of a block-level prefix cache
        assert new < warm.stats.prompt_evaluated <= new + 1 + OPENVINO_BLOCK
    else:  # the reply's last id was never fed back: it is evaluated now
        assert warm.stats.prompt_evaluated == new + 1
    assert cold.stats.prompt_evaluated == len(first)  # the earlier reply's facts are its own


def test_each_engine_reports_a_long_prompts_progress_or_none(engine, vocab):
    """llama.cpp and MLX evaluate in chunks and report each; OpenVINO evaluates in one call and reports none.

    Long enough for three chunks or more of each engine: llama.cpp's are 256 ids, MLX's on the CPU 16 (where it
    evaluates about 6 ids a second on one core, so its prompt is a tenth as long)."""
    repeats = 12 if engine.info.backend == "mlx" else 100
    long_prompt = vocab.ids("<|im_start|>user\n" + "The sea is wide and deep. " * repeats + "<|im_end|>\n")
    long_prompt += vocab.chat("Summarise that.")
    heard: list[PromptProgress] = []
    gen = engine.generate(long_prompt, ONE, set(), on_progress=heard.append)
    assert len(list(gen)) == 1
    if engine.info.backend == "openvino":
        assert heard == [] and gen.stats.progress is None
        return
    assert len(heard) >= 3 and gen.stats.progress == heard[-1]
    assert heard[0].done == 0 and heard[-1].done == heard[-1].total == gen.stats.prompt_evaluated
    assert [p.done for p in heard] == sorted(p.done for p in heard)


def test_each_engine_says_a_cancelled_reply_was_cancelled(engine, vocab):
    gen = engine.generate(vocab.chat("Write a long story about a dragon."),
                          SamplingParams(temperature=0.8, seed=3, max_tokens=300), set())
    got = []
    for token in gen:
        got.append(token)
        if len(got) == 2:
            threading.Thread(target=engine.cancel).start()
    assert 2 <= len(got) < 300 and gen.stats.finish_reason == "cancelled"


# -- speculation and the engine process ---------------------------------------------------------------

#: SmolLM2 copies this greedily: prompt lookup drafts most of the reply
REPEAT = "Copy this text exactly: The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog."


@pytest.mark.parametrize("hosted", [False, True], ids=["in-process", "engine-process"])
def test_llama_cpp_draft_counts_come_with_the_generation(smollm_path, tmp_path, vocab, hosted):
    """Prompt lookup on a reply that copies its prompt: the counts are in this reply's stats (through the
    pipe too), and a reply with speculation off has none."""
    from backends.engine_client import HostedBackend
    from backends.llama_cpp import LlamaCppBackend

    pair = {}
    try:
        for mode in ("ngram", "off"):
            pair[mode] = HostedBackend("llama.cpp") if hosted else LlamaCppBackend()
            pair[mode].load(smollm_path, LoadOptions(n_ctx=2048, speculative=mode,
                                                     log_path=tmp_path / f"{mode}.log"))
        prompt = vocab.chat(REPEAT)
        sampling = SamplingParams(temperature=0, max_tokens=60, repeat_penalty=1.0)
        drafted = pair["ngram"].generate(prompt, sampling, {vocab.eos})
        plain = pair["off"].generate(prompt, sampling, {vocab.eos})
        assert list(drafted) == list(plain)
        counts = drafted.stats.draft
        assert isinstance(counts, DraftCounts) and counts.drafted > 0 and 0 < counts.accepted <= counts.drafted
        assert plain.stats.draft is None
        assert drafted.stats.prompt_evaluated == plain.stats.prompt_evaluated == len(prompt)
    finally:
        for backend in pair.values():
            backend.close()


def test_the_engine_process_maps_its_messages_onto_the_stats(smollm_path, tmp_path, vocab):
    from backends.engine_client import HostedBackend

    backend = HostedBackend("llama.cpp")
    backend.load(smollm_path, LoadOptions(n_ctx=2048, log_path=tmp_path / "engine.log"))
    try:
        long_prompt = vocab.ids("<|im_start|>user\n" + "The sea is wide and deep. " * 100 + "<|im_end|>\n")
        long_prompt += vocab.chat("Summarise that.")
        heard: list[PromptProgress] = []
        gen = backend.generate(long_prompt, SamplingParams(temperature=0, max_tokens=3), set(), on_progress=heard.append)
        assert len(list(gen)) == 3 and gen.stats.finish_reason == "length"
        assert gen.stats.prompt_evaluated == len(long_prompt)
        assert gen.stats.progress is not None and gen.stats.progress.done == gen.stats.progress.total == len(long_prompt)
        assert heard and heard[-1] == gen.stats.progress
        again = backend.generate(long_prompt, ONE, set())
        assert len(list(again)) == 1 and again.stats.prompt_evaluated == 1
    finally:
        backend.close()
