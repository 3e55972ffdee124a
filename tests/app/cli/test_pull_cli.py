"""``tokchat pull`` / ``--model hf:...`` / ``tokchat rm`` as a user runs them, against the hub stand-in.

Each command is a real subprocess (``python -m app``) with HF_ENDPOINT on
the loopback stand-in, or on a closed loopback port for "no network".
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.hub_standin import SMOLLM_FILE, SMOLLM_REPO, serving_smollm, sha256_of
from app.models.hub import CHUNK_BYTES

ROOT = Path(__file__).resolve().parents[3]
REPO, FILE = SMOLLM_REPO, SMOLLM_FILE


@pytest.fixture
def standin(tmp_path, monkeypatch, smollm_path):
    with serving_smollm(smollm_path, tmp_path / "hf", monkeypatch) as server:
        monkeypatch.setenv("TOKCHAT_CONFIG_DIR", str(tmp_path / "config"))
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
        monkeypatch.setenv("COLUMNS", "120")
        yield server


def tokchat(*args: str, stdin: str = "", **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, env=dict(os.environ), input=stdin,
                          capture_output=True, text=True, timeout=300, **kwargs)


def closed_port() -> str:
    """An address where nothing listens (connection refused at once): the hub without network."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def cache_file(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "hf" / "hub").rglob(FILE))


def test_pull_says_what_and_why_then_shows_a_progress_bar(standin, tmp_path, smollm_path):
    done = tokchat("pull", f"hf:{REPO}:Q4_1")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == f"hf:{REPO}:Q4_1: {FILE} (Q4_1, as asked)"
    assert lines[1].startswith(f"downloading 98.4 MB into {tmp_path / 'hf' / 'hub'} (") and lines[1].endswith(" free)")
    # the Rich bar's last frame: file, bytes done/total, speed, time left
    assert any(FILE in line and "98.4/98.4 MB" in line and "/s" in line for line in lines), done.stderr
    assert lines[-1] == f"done: sha256 checked; `tokchat --model hf:{REPO}:Q4_1` opens it"
    (path,) = cache_file(tmp_path)
    assert sha256_of(path) == sha256_of(smollm_path)

    again = tokchat("pull", f"hf:{REPO}:Q4_1")
    assert again.returncode == 0 and "is already downloaded" in again.stderr
    assert len(standin.gets(FILE)) == 1


def test_list_shows_files_sizes_quantizations_and_the_choice(standin, smollm_path, qwen_path):
    standin.add_file(REPO, "SmolLM2-135M-Instruct-Q8_0.gguf", qwen_path)
    listed = tokchat("pull", f"hf:{REPO}", "--list")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()]
    assert rows[0] == ["QUANT", "SIZE", "FILE"]
    assert rows[1] == ["*", "Q8_0", f"{qwen_path.stat().st_size / 1e6:.1f}", "MB", "SmolLM2-135M-Instruct-Q8_0.gguf"]
    assert rows[2] == ["Q4_1", "98.4", "MB", FILE]
    assert listed.stdout.splitlines()[-1].startswith(
        "* SmolLM2-135M-Instruct-Q8_0.gguf: Q8_0, the best quantization up to Q8_0 that fits in")
    assert standin.gets(".gguf") == []  # listing downloads nothing


def test_ctrl_c_stops_the_download_and_the_next_pull_resumes(standin, tmp_path, smollm_path):
    hosted = standin.file(REPO, FILE)
    hosted.hold_after = 30_000_000
    # as from a terminal: SIGINT at its default in the child, whatever an earlier test in this worker left
    # (an ignored SIGINT is inherited across exec, and Python then installs no KeyboardInterrupt handler)
    proc = subprocess.Popen([sys.executable, "-m", "app", "pull", f"hf:{REPO}/{FILE}"], cwd=ROOT,
                            env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    blobs = tmp_path / "hf" / "hub" / ("models--" + REPO.replace("/", "--")) / "blobs"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        partial = list(blobs.glob("*.incomplete")) if blobs.is_dir() else []
        # the server has sent all it will (it holds the connection open after 30 MB): Ctrl-C must still
        # be taken at once, with the download blocked in a read that no byte will end
        if partial and partial[0].stat().st_size >= hosted.hold_after - CHUNK_BYTES:
            break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("the download never reached the point where the server holds it")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    hosted.release.set()
    assert proc.returncode == 2
    assert err.splitlines()[-1] == (f"tokchat: hf:{REPO}/{FILE}: download stopped; the partial file is kept and "
                                    f"`tokchat pull hf:{REPO}/{FILE}` resumes it")
    kept = partial[0].stat().st_size
    hosted.hold_after = None

    resumed = tokchat("pull", f"hf:{REPO}/{FILE}")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming after {kept / 1e6:.1f} MB" in resumed.stderr
    assert standin.gets(FILE)[-1].range == f"bytes={kept}-"
    (path,) = cache_file(tmp_path)
    assert sha256_of(path) == sha256_of(smollm_path)


def test_offline_answers_from_the_cache_or_says_in_one_line_what_is_missing(standin, monkeypatch, tmp_path):
    ref = f"hf:{REPO}:Q4_1"
    # nothing cached, hub unreachable: one line, no retries, no warnings
    monkeypatch.setenv("HF_ENDPOINT", closed_port())
    start = time.monotonic()
    missing = tokchat("--model", ref, "--prompt", "hi", "--max-tokens", "2")
    elapsed = time.monotonic() - start
    print(f"offline answer (not cached, endpoint refused): {elapsed:.2f} s")
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.splitlines() == [
        f"tokchat: {ref}: the hub at {os.environ['HF_ENDPOINT']} could not be reached (ConnectError); check the "
        "network, or use a model already downloaded (`tokchat models`)"]
    offline = tokchat("--model", ref, "--prompt", "hi", "--offline")
    assert offline.returncode == 2
    assert offline.stderr.splitlines() == [
        f"tokchat: {ref} is not in the Hugging Face cache {tmp_path / 'hf' / 'hub'} and the hub is offline "
        f"(HF_HUB_OFFLINE or --offline): pull it once with network: `tokchat pull {ref}`"]

    # cached: the unreachable hub is never asked, and the chat runs
    monkeypatch.setenv("HF_ENDPOINT", standin.endpoint)
    assert tokchat("pull", ref).returncode == 0
    monkeypatch.setenv("HF_ENDPOINT", closed_port())
    for extra in ([], ["--offline"]):
        start = time.monotonic()
        chat = tokchat("--model", ref, "--prompt", "Say hi", "--max-tokens", "3", "--temperature", "0",
                       "--no-history", *extra)
        print(f"cached model, hub unreachable {extra}: whole headless run {time.monotonic() - start:.2f} s")
        assert chat.returncode == 0, chat.stderr
        assert chat.stdout.strip()
        assert not [line for line in chat.stderr.lower().splitlines()
                    if "hub" in line or "retry" in line or "warn" in line or "127.0.0.1" in line], chat.stderr
    pulled = tokchat("pull", ref)
    assert pulled.returncode == 0
    assert pulled.stderr.strip().startswith(f"{ref}: the hub could not be reached; the cached copy stays usable: ")


def test_first_use_of_model_pulls_with_progress_then_chats(standin, tmp_path):
    chat = tokchat("--model", f"hf:{REPO}:Q4_1", "--prompt", "Say hi", "--max-tokens", "3", "--temperature", "0",
                   "--no-history")
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout.strip()
    assert chat.stderr.splitlines()[0] == f"hf:{REPO}:Q4_1: {FILE} (Q4_1, as asked)"
    assert "98.4/98.4 MB" in chat.stderr
    assert len(cache_file(tmp_path)) == 1


def test_rm_asks_first_and_deletes_only_that_model(standin, tmp_path, smollm_path):
    assert tokchat("pull", f"hf:{REPO}/{FILE}").returncode == 0
    kept = tokchat("rm", f"hf:{REPO}/{FILE}", stdin="n\n")
    assert kept.returncode == 1 and kept.stderr.endswith("nothing deleted\n")
    assert f"Delete hf:{REPO}/{FILE} (98.4 MB)? [y/N]" in kept.stderr
    assert len(cache_file(tmp_path)) == 1
    gone = tokchat("rm", f"hf:{REPO}/{FILE}", stdin="y\n")
    assert gone.returncode == 0 and gone.stderr.rstrip().endswith("deleted hf:" + REPO + "/" + FILE
                                                                    + " (98.4 MB): 98.4 MB freed")
    assert cache_file(tmp_path) == []
    assert not list((tmp_path / "hf" / "hub").rglob("blobs/*"))
    missing = tokchat("rm", f"hf:{REPO}/{FILE}", "--yes")
    assert missing.returncode == 2 and "not in the Hugging Face cache" in missing.stderr
    outside = tokchat("rm", str(smollm_path), "--yes")
    assert outside.returncode == 2 and "tokchat deletes only models it downloaded" in outside.stderr


def test_a_preset_names_its_repo_and_quantization(standin, tmp_path, smollm_path, monkeypatch):
    """``tokchat --model NAME`` on a fresh machine: the preset's [hub] table says what to fetch."""
    presets = tmp_path / "config" / "models"
    presets.mkdir(parents=True)
    (presets / "tiny.toml").write_text('[match]\narchitectures = ["llama"]\nnames = ["smollm2"]\n\n'
                                       f'[hub]\nrepo = "{REPO}"\nquantization = "Q4_1"\n')
    listed = tokchat("pull", "tiny", "--list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[-1] == f"* {FILE}: Q4_1, the default of preset tiny"
    chat = tokchat("--model", "tiny", "--prompt", "Say hi", "--max-tokens", "3", "--no-history")
    assert chat.returncode == 0, chat.stderr
    assert chat.stderr.splitlines()[0] == f"hf:{REPO}:Q4_1: {FILE} (Q4_1, the default of preset tiny)"
    # offline by environment: the preset answers from the cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    again = tokchat("pull", "tiny")
    assert again.returncode == 0
    (path,) = cache_file(tmp_path)
    assert again.stderr.strip() == f"hf:{REPO}:Q4_1: in the cache (offline): {path}"
    cached = tokchat("pull", f"hf:{REPO}", "--list")
    assert cached.returncode == 0, cached.stderr
    assert cached.stdout.splitlines() == [
        "   QUANT  SIZE     FILE", f"*  Q4_1   98.4 MB  {FILE}", f"* {FILE}: what --model would open",
        "(offline: only the files in the cache are listed)"]
