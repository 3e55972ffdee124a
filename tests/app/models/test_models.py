"""Model resolution and listing against a real, pre-populated Hugging Face cache (no network)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.models.hub_ref import ModelNotFound
from app.models.resolution import describe_model, list_models, parse_hf, resolve_model

ROOT = Path(__file__).resolve().parents[3]
REPO = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
FILE = "SmolLM2-135M-Instruct-Q4_1.gguf"
REVISION = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hf_home(tmp_path, monkeypatch, smollm_path) -> Path:
    """An HF_HOME whose hub cache holds the SmolLM2 GGUF the way hf_hub_download stores it:
    blobs/<etag>, snapshots/<revision>/<file> -> ../../blobs/<etag>, refs/main = <revision>."""
    home = tmp_path / "hf"
    repo = home / "hub" / ("models--" + REPO.replace("/", "--"))
    blob = repo / "blobs" / "a7c3e0b1d2f4a5b6c7d8e9f00112233445566778"
    blob.parent.mkdir(parents=True)
    blob.symlink_to(smollm_path)
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    (snapshot / FILE).symlink_to(Path("..") / ".." / "blobs" / blob.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return home


def test_hf_reference_resolves_offline_from_the_cache(hf_home, smollm_path):
    path = resolve_model(f"hf:{REPO}/{FILE}")
    assert path.parent.parent.parent == hf_home / "hub" / ("models--" + REPO.replace("/", "--"))
    assert path.name == FILE and path.read_bytes()[:4] == b"GGUF"
    assert path.resolve() == smollm_path.resolve()


def test_hf_file_not_in_the_cache_says_how_to_get_it(hf_home):
    with pytest.raises(ModelNotFound) as info:
        resolve_model(f"hf:{REPO}/SmolLM2-135M-Instruct-Q8_0.gguf")
    message = str(info.value)
    assert "not in the Hugging Face cache" in message and "HF_HUB_OFFLINE" in message
    assert f"tokchat pull hf:{REPO}/SmolLM2-135M-Instruct-Q8_0.gguf" in message


def test_hf_reference_syntax():
    assert parse_hf("hf:org/repo/sub/dir/model.gguf") == ("org/repo", "sub/dir/model.gguf")
    with pytest.raises(ModelNotFound, match="expected hf:ORG/REPO/FILE.gguf"):
        parse_hf("hf:org/model.gguf")


def test_local_paths(tmp_path, smollm_path):
    assert resolve_model(str(smollm_path)) == smollm_path
    with pytest.raises(ModelNotFound, match="model not found: .*missing.gguf"):
        resolve_model(str(tmp_path / "missing.gguf"))
    with pytest.raises(ModelNotFound, match="is a directory but not an MLX model"):
        resolve_model(str(tmp_path))


def test_mlx_directory_is_resolved_and_described(tmp_path):
    mlx = tmp_path / "Qwen2.5-0.5B-Instruct-4bit"
    mlx.mkdir()
    (mlx / "config.json").write_text(json.dumps({"model_type": "qwen2", "max_position_embeddings": 32768,
                                                 "quantization": {"group_size": 64, "bits": 4}}))
    (mlx / "model.safetensors").write_bytes(b"\0" * 64)
    assert resolve_model(str(mlx)) == mlx
    info = describe_model(mlx)
    assert (info.kind, info.architecture, info.quantization, info.context_length, info.name) == \
        ("mlx", "qwen2", "4-bit (group 64)", 32768, "Qwen2.5-0.5B-Instruct-4bit")


def test_gguf_description_comes_from_the_header(qwen_path):
    info = describe_model(qwen_path)
    assert (info.kind, info.architecture, info.quantization, info.context_length) == \
        ("gguf", "qwen2", "Q4_K_M", 32768)
    assert info.name == "Qwen2.5 Coder 0.5B Instruct AWQ" and info.size_bytes == qwen_path.stat().st_size


def test_list_models_finds_cache_dirs_and_bundled(hf_home, tmp_path, gemma_path):
    models_dir = tmp_path / "models"
    models_dir.mkdir()
    (models_dir / "gemma.gguf").symlink_to(gemma_path)
    (models_dir / "broken.gguf").write_bytes(b"GGUF\x03\0\0\0")
    models, problems = list_models([models_dir])
    by_source = {m.source: m for m in models}
    hf = by_source[f"hf:{REPO}/{FILE}"]
    assert (hf.architecture, hf.quantization, hf.size_bytes) == ("llama", "Q4_1", 98_362_432)
    assert by_source[f"dir {models_dir}"].architecture == "gemma3"
    assert "bundled" in by_source
    assert len(problems) == 1 and problems[0].startswith(f"{models_dir / 'broken.gguf'}: ")
    assert "bad GGUF file at byte 8" in problems[0]


def test_models_and_config_commands_use_the_cache(hf_home, tmp_path):
    env = {**os.environ, "TOKCHAT_CONFIG_DIR": str(tmp_path / "config")}
    out = subprocess.run([sys.executable, "-m", "app", "models", "--json"], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    hf = next(r for r in rows if r["source"].startswith("hf:"))
    assert hf["model"] == f"hf:{REPO}/{FILE}" and hf["quantization"] == "Q4_1"

    table = subprocess.run([sys.executable, "-m", "app", "models"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert table.stdout.splitlines()[0].split() == ["NAME", "ARCH", "QUANT", "SIZE", "CTX", "USED", "--model"]
    assert any(line.endswith(f"hf:{REPO}/{FILE}") and "98.4 MB" in line for line in table.stdout.splitlines())

    show = subprocess.run([sys.executable, "-m", "app", "config", "show", "--model", f"hf:{REPO}/{FILE}"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert show.returncode == 0, show.stderr
    assert "-> preset smollm2" in show.stdout.splitlines()[1]
