"""Pulling models with the real huggingface_hub client against the local hub stand-in.

The stand-in (tests/support/hub_standin.py) serves the test-asset GGUFs under the
hub's URL scheme on loopback; HF_ENDPOINT points the real client at it.
Nothing here reaches the internet.
"""
from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest

from app.models import hub
from app.models.hub_cache import cached_model, remove_model
from app.models.hub_ref import HubRef, parse_ref
from support.assets import cache_dir
from support.gguf_split import cached_split
from support.hub_standin import SMOLLM_FILE, SMOLLM_REPO, serving_smollm, sha256_of

REPO, FILE = SMOLLM_REPO, SMOLLM_FILE
SPLIT_REPO = "tokchat-test/SmolLM2-135M-Instruct-split-GGUF"
SPLIT_STEM = "SmolLM2-135M-Instruct-Q4_1"


@pytest.fixture
def standin(tmp_path, monkeypatch, smollm_path):
    with serving_smollm(smollm_path, tmp_path / "hf", monkeypatch) as server:
        yield server


@pytest.fixture(scope="session")
def split_parts(smollm_path) -> list[Path]:
    """SmolLM2 in llama.cpp's split format (3 parts), built once and cached with the test assets."""
    return cached_split(smollm_path, cache_dir(), SPLIT_STEM, 40_000_000)


def test_pull_downloads_verifies_and_links_like_hf_hub_download(standin, smollm_path):
    seen: list[hub.Progress] = []
    path = hub.resolve(f"hf:{REPO}/{FILE}", progress=seen.append)
    assert path.name == FILE and path.is_symlink()
    assert sha256_of(path) == sha256_of(smollm_path)
    cache = hub.hub_settings().cache
    # the layout huggingface_hub itself reads: its own offline lookup finds the file
    from huggingface_hub import try_to_load_from_cache

    assert Path(try_to_load_from_cache(REPO, FILE, cache_dir=cache)) == path
    # progress counted every byte, then the sha256 check ran over the whole file
    size = smollm_path.stat().st_size
    downloads = [p.done for p in seen if p.phase == "download"]
    assert downloads == sorted(downloads) and downloads[-1] == size
    assert [p for p in seen if p.phase == "verify"][-1].done == size
    assert {p.total for p in seen} == {size}


def test_the_standin_answers_the_listing_apis_as_the_hub_does(standin, smollm_path, split_parts):
    """huggingface_hub's own listing calls parse what the stand-in serves (model info and tree)."""
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile, RepoFolder

    for part in split_parts:
        standin.add_file(REPO, f"split/{part.name}", part)
    api = HfApi(endpoint=standin.endpoint)
    info = api.model_info(REPO, files_metadata=True)
    assert info.sha == standin.repos[REPO].commit
    by_name = {s.rfilename: s for s in info.siblings}
    assert by_name[FILE].size == smollm_path.stat().st_size and by_name[FILE].lfs.sha256 == sha256_of(smollm_path)
    top = list(api.list_repo_tree(REPO))
    assert {type(e).__name__: e.path for e in top} == {"RepoFile": FILE, "RepoFolder": "split"}
    deep = [e for e in api.list_repo_tree(REPO, recursive=True) if isinstance(e, RepoFile)]
    assert sorted(e.path for e in deep) == sorted([FILE] + [f"split/{p.name}" for p in split_parts])
    assert {e.path: e.lfs.sha256 for e in deep}[f"split/{split_parts[1].name}"] == sha256_of(split_parts[1])
    assert all(not isinstance(e, RepoFolder) for e in deep)


def test_second_resolve_is_served_from_the_cache_without_a_request(standin):
    first = hub.resolve(f"hf:{REPO}/{FILE}")
    count = len(standin.requests)
    assert hub.resolve(f"hf:{REPO}:Q4_1") == first
    assert hub.resolve(f"hf:{REPO}") == first
    assert len(standin.requests) == count


def test_listing_and_choice(standin, smollm_path, qwen_path):
    standin.add_file(REPO, "big/SmolLM2-135M-Instruct-F16.gguf", qwen_path)
    standin.add_file(REPO, "SmolLM2-135M-Instruct-Q8_0.gguf", qwen_path)
    standin.add_file(REPO, "mmproj-SmolLM2-F16.gguf", smollm_path)
    plan = hub.plan_pull(parse_ref(f"hf:{REPO}"), memory=8_000_000_000)
    assert [(g.path, g.quant) for g in plan.choices] == [
        ("big/SmolLM2-135M-Instruct-F16.gguf", "F16"), ("SmolLM2-135M-Instruct-Q8_0.gguf", "Q8_0"),
        (FILE, "Q4_1")]
    assert plan.choices[1].size == qwen_path.stat().st_size
    # F16 is never taken automatically; Q8_0 fits in 75% of 8 GB
    assert plan.gguf.quant == "Q8_0" and "best quantization up to Q8_0 that fits in 6.0 GB" in plan.reason
    # too little memory for Q8_0: the next best that fits
    small = hub.plan_pull(parse_ref(f"hf:{REPO}"), memory=qwen_path.stat().st_size)
    assert small.gguf.path == FILE
    asked = hub.plan_pull(parse_ref(f"hf:{REPO}:q4_1"))
    assert asked.gguf.path == FILE and asked.reason == "Q4_1, as asked"
    with pytest.raises(hub.HubError, match=r"no Q5_K_M file in the repo \(it has: F16, Q8_0, Q4_1\)"):
        hub.plan_pull(parse_ref(f"hf:{REPO}:Q5_K_M"))


def test_unknown_repo_and_file_are_one_line(standin):
    with pytest.raises(hub.HubError, match="no such repo on http://127.0.0.1"):
        hub.resolve("hf:nobody/nothing-GGUF:Q4_K_M")
    with pytest.raises(hub.HubError, match="no such GGUF in the repo"):
        hub.resolve(f"hf:{REPO}/missing.gguf")


def test_a_cut_connection_is_resumed_with_a_range_request(standin, smollm_path):
    standin.file(REPO, FILE).cut_after = 30_000_000
    path = hub.resolve(f"hf:{REPO}/{FILE}")
    assert sha256_of(path) == sha256_of(smollm_path)
    gets = standin.gets(FILE)
    assert [g.range for g in gets][0] is None and len(gets) == 2
    start = int(gets[1].range.removeprefix("bytes=").rstrip("-"))
    assert 0 < start <= 30_000_000


def test_cancel_keeps_the_partial_file_and_the_next_pull_resumes_it(standin, smollm_path):
    cancel = threading.Event()

    def progress(p: hub.Progress) -> None:
        if p.done >= 20_000_000:
            cancel.set()

    ref = parse_ref(f"hf:{REPO}/{FILE}")
    with pytest.raises(hub.DownloadCancelled):
        hub.download(hub.plan_pull(ref), progress=progress, cancel=cancel)
    sha = sha256_of(smollm_path)
    partial = hub.storage_dir(hub.hub_settings().cache, REPO) / "blobs" / (sha + ".incomplete")
    kept = partial.stat().st_size
    assert 20_000_000 <= kept < smollm_path.stat().st_size
    assert cached_model(ref, hub.hub_settings().cache) is None

    plan = hub.plan_pull(ref)
    assert plan.have == {FILE: kept} and plan.needed == smollm_path.stat().st_size - kept
    path = hub.download(plan)
    assert sha256_of(path) == sha and not partial.exists()
    assert standin.gets(FILE)[-1].range == f"bytes={kept}-"


def test_sha256_mismatch_is_refused_and_nothing_is_kept(standin, smollm_path):
    wrong = hashlib.sha256(b"not the file").hexdigest()
    standin.add_file(REPO, FILE, smollm_path, sha256=wrong)
    with pytest.raises(hub.ChecksumMismatch, match="does not match the hub's sha256"):
        hub.resolve(f"hf:{REPO}/{FILE}")
    storage = hub.storage_dir(hub.hub_settings().cache, REPO)
    assert not any((storage / "blobs").iterdir())
    assert not list((storage / "snapshots").rglob("*.gguf")) if (storage / "snapshots").exists() else True


def test_disk_space_is_checked_before_a_byte_is_downloaded(standin, smollm_path):
    standin.add_file(REPO, "SmolLM2-135M-Instruct-F32.gguf", smollm_path, size=10**18)
    with pytest.raises(hub.NotEnoughSpace) as info:
        hub.resolve(f"hf:{REPO}:F32")
    assert "needs 1000000000.0 GB but only" in str(info.value) and "HF_HUB_CACHE" in str(info.value)
    assert standin.gets("F32.gguf") == []


def test_split_gguf_is_fetched_whole_and_loaded_from_part_one(standin, split_parts, smollm_path):
    for part in split_parts:
        standin.add_file(SPLIT_REPO, f"Q4_1/{part.name}", part)
    path = hub.resolve(f"hf:{SPLIT_REPO}:Q4_1")
    assert path.name == f"{SPLIT_STEM}-00001-of-00003.gguf"
    assert sorted(p.name for p in path.parent.iterdir()) == [p.name for p in split_parts]
    for part in split_parts:
        assert sha256_of(path.parent / part.name) == sha256_of(part)
    # naming part 2 still loads part 1; the cache answers without the network
    count = len(standin.requests)
    assert cached_model(parse_ref(f"hf:{SPLIT_REPO}/Q4_1/{SPLIT_STEM}-00002-of-00003.gguf"),
                        hub.hub_settings().cache) == path
    assert len(standin.requests) == count

    from backends import LoadOptions, SamplingParams, open_backend
    from tokenizer import load_tokenizer

    # part 1 carries the vocabulary; llama.cpp finds parts 2 and 3 beside it and answers as the
    # unsplit file does (greedy, same prompt)
    tokenizer = load_tokenizer(path)
    prompt = tokenizer.encode("The capital of France is")
    assert prompt == load_tokenizer(smollm_path).encode("The capital of France is")
    replies = []
    for model in (path, smollm_path):
        backend = open_backend(model, LoadOptions(backend="cpu", n_ctx=128))
        try:
            replies.append(list(backend.generate(prompt, SamplingParams(temperature=0, max_tokens=6), [])))
        finally:
            backend.close()
    assert replies[0] == replies[1] and len(replies[0]) == 6


def test_remove_deletes_links_and_blobs_of_every_part(standin, split_parts, smollm_path):
    for part in split_parts:
        standin.add_file(SPLIT_REPO, part.name, part)
    path = hub.resolve(f"hf:{SPLIT_REPO}:Q4_1")
    cache = hub.hub_settings().cache
    removal = remove_model(path, cache)
    assert len(removal.links) == 3 and len(removal.blobs) == 3
    assert removal.freed == sum(p.stat().st_size for p in split_parts)
    assert cached_model(HubRef(SPLIT_REPO, quant="Q4_1"), cache) is None
