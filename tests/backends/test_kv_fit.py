"""KV-cache types and the plan before loading (issue 47, parts 1 and 2), against llama.cpp's own load report.

The oracle is llama.cpp itself: each real load prints its model, KV and
compute buffers (``read_load_report``); :mod:`backends.fit` must predict them
from the GGUF's tensor infos alone, within 5%, for three real models and each
KV type.  Refusals are checked as the user meets them: a real ``python -m app``.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.process_env import ROOT, child_env

from backends import LoadOptions, open_backend
from backends.base import BackendError
from backends.fit import Memory, largest_context, model_need, need_at, refusal
from backends.kv_types import KvTypeError, parse_kv_type
from backends.model_meta import read_model_meta
from backends.offload import MIB, RESERVE_BYTES, model_sizes, plan_offload_with_draft, read_load_report

pytestmark = pytest.mark.slow


def test_kv_type_names_and_mistakes():
    assert str(parse_kv_type("q8_0")) == "q8_0" and parse_kv_type("Q4_0/F16").v == "f16"
    assert parse_kv_type(None) == parse_kv_type("f16")
    assert parse_kv_type("q8_0").needs_flash_attn and not parse_kv_type("q8_0/f16").needs_flash_attn
    with pytest.raises(KvTypeError, match="use one of f16, q8_0, q4_0"):
        parse_kv_type("q5_1")


def _load_report(path: Path, n_ctx: int, kv: str, log: Path):
    backend = open_backend(path, LoadOptions(n_ctx=n_ctx, kv_type=kv, log_path=log, speculative="off"))
    try:
        notes = list(backend.info.notes)
    finally:
        backend.close()
    return read_load_report(log.read_text()), notes


@pytest.mark.parametrize("name", ["smollm_path", "qwen_path", "gemma_path"])
def test_fit_predicts_what_llama_cpp_reports_at_load_within_5_percent(name, request, tmp_path):
    path = request.getfixturevalue(name)
    meta = read_model_meta(path)
    for n_ctx, kv in ((4096, "f16"), (16384, "q8_0"), (16384, "q4_0")):
        report, notes = _load_report(path, n_ctx, kv, tmp_path / f"{n_ctx}-{kv}.log")
        need = model_need(path, meta, n_ctx, parse_kv_type(kv))
        real_kv = report.total_mib("KV") * MIB
        real_total = (report.total_mib("model") + report.total_mib("KV") + report.total_mib("compute")) * MIB
        assert abs(need.kv - real_kv) <= 0.05 * real_kv, (kv, need.kv, real_kv)
        assert abs(need.total - real_total) <= 0.05 * real_total, (kv, need, report.buffers)
        # the load note counts the cache at its real size and type
        assert any(f"KV cache {kv} {report.total_mib('KV'):,.0f} MiB" in n for n in notes), notes
        if kv != "f16":
            assert f"flash attention on: the {kv} V cache needs it" in notes


def test_a_quantized_cache_holds_more_context_in_the_same_memory(qwen_path):
    """The plan's largest context per type, in a fixed 4 GiB, and a real load at the q4_0 figure's KV size."""
    meta = read_model_meta(qwen_path)
    free = 4 << 30
    largest = {kv: largest_context(need_at(qwen_path, meta, parse_kv_type(kv)), free) for kv in ("f16", "q8_0", "q4_0")}
    assert largest["f16"] < largest["q8_0"] < largest["q4_0"]
    # the KV cache alone shrinks by its bytes per value: 2 -> 34/32 -> 18/32
    f16, q8, q4 = (model_need(qwen_path, meta, 8192, parse_kv_type(k)).kv for k in ("f16", "q8_0", "q4_0"))
    assert f16 / q8 == pytest.approx(2 / (34 / 32)) and f16 / q4 == pytest.approx(2 / (18 / 32))
    assert largest["q8_0"] / largest["f16"] > 1.6 and largest["q4_0"] / largest["f16"] > 2.8


def test_a_quantized_v_with_flash_attention_off_is_one_line(smollm_path, tmp_path):
    with pytest.raises(BackendError, match="a quantized V cache needs flash attention"):
        open_backend(smollm_path, LoadOptions(n_ctx=512, kv_type="q8_0", flash_attn="off",
                                              log_path=tmp_path / "e.log", speculative="off"))


def test_refusal_names_the_parts_the_free_memory_and_contexts_that_fit(smollm_path):
    meta = read_model_meta(smollm_path)
    memory = Memory(ram=2 << 30, gpus=[1 << 30])
    line = refusal(smollm_path, meta, 1_000_000, parse_kv_type("f16"), memory)
    assert line is not None and "\n" not in line
    assert line.startswith("--ctx 1000000 needs a KV cache of about 23.0 GB for smollm2.gguf (f16)")
    assert "RAM 2.1 GB + GPU0 1.1 GB" in line and "lower --ctx to" in line
    fits = int(line.split("lower --ctx to ")[1].split(" ")[0].replace(",", ""))
    assert model_need(smollm_path, meta, fits, parse_kv_type("f16")).total <= memory.total
    assert model_need(smollm_path, meta, fits + 256, parse_kv_type("f16")).total > memory.total
    assert "--kv-type q8_0" in line and "--kv-type q4_0" in line
    assert refusal(smollm_path, meta, 4096, parse_kv_type("f16"), memory) is None


def test_a_ctx_that_cannot_fit_is_refused_before_any_engine_starts(smollm_path, tmp_path):
    env = child_env(tmp_path)
    done = subprocess.run([sys.executable, "-m", "app", "-m", str(smollm_path), "--prompt", "Hi", "--ctx",
                           "16000000", "--kv-type", "q4_0", "--no-history"], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("tokchat: --ctx 16000000 needs a KV cache of about") and "(q4_0)" in line
    assert "lower --ctx to" in line and "the engine said" not in line
    # llama.cpp never read the model: no load is in the engine log (an engine process may have been started
    # early, idle, while the model was resolved; it writes its log but loads nothing)
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "xdg").rglob("*.log"))
    assert "load_tensors" not in logs and "llama_model_loader" not in logs


def test_the_default_offload_with_a_draft_model_never_exceeds_free_vram(qwen15_path, qwen_path):
    """GPU facts faked (only the hardware): real sizes of Qwen2.5-Coder-1.5B and its 0.5B draft."""
    main, draft = model_sizes(qwen15_path), model_sizes(qwen_path)
    kv_main = model_need(qwen15_path, read_model_meta(qwen15_path), 8192).kv // len(main.blocks)
    kv_draft = model_need(qwen_path, read_model_meta(qwen_path), 8192).kv // len(draft.blocks)
    draft_bytes = draft.total + kv_draft * len(draft.blocks)
    for free_mib in (700, 1200, 1800, 2400, 3000, 6000):
        free = free_mib * MIB
        plan = plan_offload_with_draft(main, kv_main, free, draft, kv_draft)
        assert plan.draft_gpu_layers in (0, -1)
        if plan.main.layers_on_gpu == 0 and plan.draft_gpu_layers == 0:
            assert free < draft_bytes + RESERVE_BYTES  # not even the draft fits beside the reserve: all on the CPU
            continue
        assert plan.main.need_bytes + plan.draft_bytes <= free, free_mib
        if plan.draft_gpu_layers == -1:
            assert plan.draft_bytes == draft_bytes
    everything = plan_offload_with_draft(main, kv_main, 8000 * MIB, draft, kv_draft)
    assert everything.main.all_on_gpu and everything.draft_gpu_layers == -1


def test_tokchat_fit_prints_the_plan_and_json(qwen15_path, qwen_path, tmp_path):
    env = child_env(tmp_path)
    args = [sys.executable, "-m", "app", "fit", str(qwen15_path), "--ctx", "32768", "--draft-model", str(qwen_path)]
    shown = subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "qwen2.5-coder-1.5b.gguf at --ctx 32,768, KV cache f16" in shown.stdout
    assert "draft" in shown.stdout and "qwen2.5-coder-0.5b.gguf" in shown.stdout
    for kv in ("f16", "q8_0", "q4_0"):
        assert f"--kv-type {kv}" in shown.stdout
    data = json.loads(subprocess.run([*args, "--json"], capture_output=True, text=True, env=env, cwd=ROOT,
                                     timeout=120).stdout)
    meta = read_model_meta(qwen15_path)
    assert data["kv"] == model_need(qwen15_path, meta, 32768).kv
    assert data["need"] == data["weights"] + data["repacked"] + data["kv"] + data["compute"] + data["draft"]["total"]
    per = data["per_kv_type"]
    assert per["f16"]["largest_ctx"] < per["q8_0"]["largest_ctx"] < per["q4_0"]["largest_ctx"]
