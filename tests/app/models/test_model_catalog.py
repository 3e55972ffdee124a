"""``tokchat models`` / the /model picker's list: every place models live, recently used first."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app.models.catalog import catalog, human_age
from app.history.store import ChatStore
from support.assets import cache_dir
from support.gguf_split import cached_split

ROOT = Path(__file__).resolve().parents[3]
REPO = "tokchat-test/SmolLM2-135M-Instruct-GGUF"
SPLIT_REPO = "tokchat-test/SmolLM2-135M-Instruct-split-GGUF"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def cache_repo(hub: Path, repo_id: str, files: dict[str, Path]) -> Path:
    """Put files into an HF cache the way huggingface_hub lays it out (blobs, snapshot links, refs/main)."""
    storage = hub / ("models--" + repo_id.replace("/", "--"))
    snapshot = storage / "snapshots" / COMMIT
    for i, (name, source) in enumerate(files.items()):
        blob = storage / "blobs" / f"{i:064x}"
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.symlink_to(source)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (storage / "refs").mkdir(exist_ok=True)
    (storage / "refs" / "main").write_text(COMMIT)
    return snapshot


@pytest.fixture
def machine(tmp_path, monkeypatch, smollm_path, gemma_path):
    """An HF cache (a single GGUF and a 3-part split), a models dir, and a history with two models used."""
    hub = tmp_path / "hf" / "hub"
    single = cache_repo(hub, REPO, {"SmolLM2-135M-Instruct-Q4_1.gguf": smollm_path})
    parts = cached_split(smollm_path, cache_dir(), "SmolLM2-135M-Instruct-Q4_1", 40_000_000)
    split = cache_repo(hub, SPLIT_REPO, {f"Q4_1/{p.name}": p for p in parts})
    models_dir = tmp_path / "models"
    models_dir.mkdir()
    (models_dir / "gemma-3-270m.gguf").symlink_to(gemma_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("TOKCHAT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("TOKCHAT_CONFIG_DIR", str(tmp_path / "config"))
    (tmp_path / "data").mkdir()
    with ChatStore(tmp_path / "data" / "history.sqlite3") as store:
        store.new_conversation(models_dir / "gemma-3-270m.gguf", "gemma")  # used first ...
        store.new_conversation(split / "Q4_1" / parts[0].name, "chatml")  # ... the split model last
    return {"dir": models_dir, "single": single, "split": split, "parts": parts}


def test_catalog_orders_recent_first_and_lists_a_split_once(machine, smollm_path):
    entries, problems = catalog([machine["dir"]])
    assert problems == []
    args = [e.model_arg for e in entries]
    first = f"hf:{SPLIT_REPO}/Q4_1/SmolLM2-135M-Instruct-Q4_1-00001-of-00003.gguf"
    assert args[:2] == [first, str(machine["dir"] / "gemma-3-270m.gguf")]
    assert set(args[2:]) == {"(default)", f"hf:{REPO}/SmolLM2-135M-Instruct-Q4_1.gguf"}
    assert not any("00002-of" in a or "00003-of" in a for a in args)  # parts 2 and 3 are part of part 1
    split = entries[0]
    assert split.info.size_bytes == sum(p.stat().st_size for p in machine["parts"])
    assert (split.info.architecture, split.info.quantization) == ("llama", "Q4_1")
    assert entries[0].last_used > entries[1].last_used and entries[2].last_used is None
    assert entries[1].info.context_length == 32768 and entries[1].info.architecture == "gemma3"


def test_models_command_table_and_json(machine):
    env = {**os.environ}
    table = subprocess.run([sys.executable, "-m", "app", "models", "--dir", str(machine["dir"])], cwd=ROOT, env=env,
                           capture_output=True, text=True)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAME", "ARCH", "QUANT", "SIZE", "CTX", "USED", "--model"]
    assert lines[1].split()[-3:] == ["just", "now",
                                     f"hf:{SPLIT_REPO}/Q4_1/SmolLM2-135M-Instruct-Q4_1-00001-of-00003.gguf"]
    size = machine["dir"].joinpath("gemma-3-270m.gguf").stat().st_size / 1e6
    assert re.search(rf"\sgemma3\s+Q4_K_M\s+{size:.1f} MB\s+32k\s+\d+ min ago|\sgemma3\s+Q4_K_M\s+{size:.1f} MB\s+32k"
                     r"\s+just now", lines[2]), lines[2]
    rows = [json.loads(line) for line in subprocess.run(
        [sys.executable, "-m", "app", "models", "--json", "--dir", str(machine["dir"])], cwd=ROOT, env=env,
        capture_output=True, text=True).stdout.splitlines()]
    assert [r["model"] for r in rows[:2]] == [lines[1].split()[-1], lines[2].split()[-1]]
    assert rows[1]["context_length"] == 32768 and isinstance(rows[1]["last_used"], float)
    assert rows[-1]["last_used"] is None


def test_human_age():
    assert [human_age(None), human_age(100, 130), human_age(0, 600), human_age(0, 7300), human_age(0, 200000)] == \
        ["-", "just now", "10 min ago", "2 h ago", "2 d ago"]
