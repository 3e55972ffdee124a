"""Reference parsing, quantization tags, split grouping and the file choice (no hub needed)."""
from __future__ import annotations

import pytest

from app.models.gguf_choice import NoSuchQuant, choose, quant_tag, repo_ggufs
from app.models.hub_ref import HubRef, RefError, model_ref, parse_ref
from app.models.presets import load_presets

GB = 1_000_000_000


def test_references():
    assert parse_ref("hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF:q4_k_m") == \
        HubRef("Qwen/Qwen2.5-0.5B-Instruct-GGUF", quant="Q4_K_M")
    assert parse_ref("hf:org/repo/sub/model-Q8_0.gguf") == HubRef("org/repo", "sub/model-Q8_0.gguf")
    assert parse_ref("hf:org/repo") == HubRef("org/repo")
    assert str(parse_ref("hf:org/repo:Q4_K_M")) == "hf:org/repo:Q4_K_M"
    for bad, why in [("hf:repo", "expected hf:ORG/REPO"), ("hf:org/repo/a.gguf:Q4_0", "not both"),
                     ("hf:org/repo:Q4 K", "quantization tag"), ("hf:org/repo/../x.gguf", "bad file path")]:
        with pytest.raises(RefError, match=why):
            parse_ref(bad)


def test_model_values_that_name_the_hub(tmp_path, monkeypatch):
    assert model_ref("qwen2.5") == HubRef("Qwen/Qwen2.5-1.5B-Instruct-GGUF", quant="Q4_K_M", preset="qwen2.5")
    assert model_ref("nonesuch") is None and model_ref("models/x.gguf") is None and model_ref(None) is None
    monkeypatch.chdir(tmp_path)
    (tmp_path / "qwen2.5").write_bytes(b"")  # a file of that name wins over the preset
    assert model_ref("qwen2.5") is None


def test_every_preset_names_a_hub_repo_and_quantization():
    presets = load_presets()
    assert {p.name for p in presets} == {"gemma3", "llama3", "qwen2.5", "qwen3", "smollm2"}
    for preset in presets:
        assert preset.hub_repo.count("/") == 1 and preset.hub_repo.endswith("GGUF"), preset.name
        assert quant_tag(f"x-{preset.hub_quantization}.gguf") == preset.hub_quantization


def test_quantization_tags_from_file_names():
    cases = {"qwen2.5-0.5b-instruct-q4_k_m.gguf": "Q4_K_M", "Llama-3.2-3B-Instruct-IQ4_XS.gguf": "IQ4_XS",
             "gemma-3-1b-it-BF16.gguf": "BF16", "Qwen3-30B-A3B-UD-Q4_K_XL.gguf": "Q4_K_XL",
             "Q8_0/Big-Model-Q8_0-00001-of-00002.gguf": "Q8_0", "model-f16.gguf": "F16",
             "SmolLM2-135M-Instruct.Q4_1.gguf": "Q4_1", "Q5_K_M/model-00001-of-00002.gguf": "Q5_K_M",
             "notes.gguf": ""}
    assert {name: quant_tag(name) for name in cases} == cases


def test_split_parts_are_grouped_and_incomplete_splits_left_out():
    files = [("M-Q8_0-00002-of-00002.gguf", 5 * GB, "b"), ("M-Q8_0-00001-of-00002.gguf", 5 * GB, "a"),
             ("M-Q4_K_M.gguf", 6 * GB, "c"), ("M-F16-00001-of-00003.gguf", 9 * GB, "d"),
             ("mmproj-M-F16.gguf", GB, "e"), ("README.md", 10, "")]
    ggufs = repo_ggufs(files)
    assert [(g.paths, g.size, g.quant) for g in ggufs] == [
        (["M-Q8_0-00001-of-00002.gguf", "M-Q8_0-00002-of-00002.gguf"], 10 * GB, "Q8_0"),
        (["M-Q4_K_M.gguf"], 6 * GB, "Q4_K_M")]
    assert ggufs[0].path == "M-Q8_0-00001-of-00002.gguf" and ggufs[0].parts["M-Q8_0-00002-of-00002.gguf"] == (5 * GB, "b")


def test_choice_explains_itself():
    ggufs = repo_ggufs([(f"m-{q}.gguf", size, "") for q, size in
                        [("F16", 16 * GB), ("Q8_0", 8 * GB), ("Q6_K", 6 * GB), ("Q4_K_M", 4 * GB), ("Q2_K", 3 * GB)]])
    chosen, why = choose(ggufs, memory=12 * GB)
    assert chosen.quant == "Q8_0" and why == ("Q8_0, the best quantization up to Q8_0 that fits in 9.0 GB "
                                             "(75% of the 12.0 GB of memory available)")
    assert choose(ggufs, memory=100 * GB)[0].quant == "Q8_0"  # never F16 on its own
    assert choose(ggufs, memory=6 * GB)[0].quant == "Q4_K_M"
    smallest, why = choose(ggufs, memory=GB)
    assert smallest.quant == "Q2_K" and why.startswith("Q2_K, the smallest file: none fits in 750 MB")
    assert choose(ggufs, preset_quant="Q6_K", preset="qwen3", memory=GB) == \
        (ggufs[2], "Q6_K, the default of preset qwen3")
    assert choose(ggufs, quant="q4_k_m")[1] == "Q4_K_M, as asked"
    with pytest.raises(NoSuchQuant, match=r"no Q5_K_M file in the repo \(it has: F16, Q8_0, Q6_K, Q4_K_M, Q2_K\)"):
        choose(ggufs, quant="Q5_K_M")
    only_f16 = repo_ggufs([("m-F16.gguf", 2 * GB, ""), ("m-F32.gguf", 4 * GB, "")])
    assert choose(only_f16, memory=4 * GB)[0].quant == "F16"
