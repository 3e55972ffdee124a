"""OpenVINO's GGUF Q4_1 conversion is lossy, and tokchat says so where it happens.

OpenVINO GenAI's GGUF reader stores a Q4_1 block (``d * q + m``) as 4-bit
weights with a whole-number zero point ``round(-m / d)``, so every weight of a
block moves by up to half a step; on SmolLM2 its greedy next-token picks
agree with llama.cpp's at about 70% (docs/fidelity.md).  Q8_0 is converted
without that loss.  The load notes, the model bar and ``tokchat doctor`` name it.
"""
from __future__ import annotations

import ctypes

from app.cli import main
from app.tui.format import model_bar_text
from backends.base import LoadOptions
from backends.openvino import F32_NOTE, OpenVINOBackend, gguf_caveat

CAVEAT = "OpenVINO: GGUF Q4_1 converted lossily; answers differ from llama.cpp"


def test_loading_q4_1_in_openvino_names_the_loss(smollm_path, tmp_path):
    backend = OpenVINOBackend()
    backend.load(smollm_path, LoadOptions(log_path=tmp_path / "engine.log"))
    try:
        assert backend.info.quantization == "Q4_1"
        assert backend.info.caveat == CAVEAT
        assert any(note.startswith(CAVEAT) and "Q4_0/Q8_0" in note for note in backend.info.notes)
    finally:
        backend.close()
    bar = model_bar_text("SmolLM2", "Q4_1", "openvino", "CPU", "chatml", 8192, backend.info.caveat)
    assert bar.endswith("· ⚠ " + CAVEAT)


def test_on_a_bf16_cpu_the_pipeline_computes_in_f32_and_says_so(smollm_path, tmp_path):
    """OpenVINO's CPU default is bf16 where the CPU has AMX or AVX512-BF16: slower decode, replies apart."""
    import openvino as ov

    default_is_bf16 = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name() == "bf16"
    backend = OpenVINOBackend()
    backend.load(smollm_path, LoadOptions(device="CPU", log_path=tmp_path / "engine.log"))
    try:
        assert (F32_NOTE in backend.info.notes) == default_is_bf16
    finally:
        backend.close()


def test_doctor_names_the_loss_for_q4_1_only(smollm_path, tmp_path, capsys, monkeypatch):
    import llama_cpp

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert main(["doctor", "--model", str(smollm_path)]) == 0
    assert capsys.readouterr().out.rstrip().endswith(f"model {smollm_path.name}: {CAVEAT}")
    q8 = tmp_path / "smollm2-q8_0.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0
    params.allow_requantize = True
    assert llama_cpp.llama_model_quantize(str(smollm_path).encode(), str(q8).encode(), ctypes.byref(params)) == 0
    assert main(["doctor", "--model", str(q8)]) == 0
    out = capsys.readouterr().out
    assert CAVEAT not in out and "Q8_0, no backend known to convert it lossily" in out
    assert gguf_caveat("Q4_0") == gguf_caveat("Q8_0") == ""
