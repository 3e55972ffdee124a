"""Getting a model: tokchat's pull against huggingface_hub's own ``hf_hub_download``, on the hub stand-in.

The real hub cannot be reached here, so both run against tests/support/hub_standin.py
on loopback (HF_ENDPOINT), serving SmolLM2-135M Q4_1 (98 MB):

* **download**: ``hf_hub_download`` into a fresh cache against tokchat's
  ``app.models.hub.plan_pull`` + ``download`` (the listing request, ``http_get`` with a
  resumable partial file, the sha256 check, ``hf_hub_download`` for the link),
  alternating, fresh cache every round; medians.  Loopback is far faster than
  any network, so this shows tokchat's overhead, not a real download time.
* **no network, model not cached** (HF_ENDPOINT on a closed loopback port):
  ``tokchat --model hf:... --prompt hi`` as a whole process against
  ``hf_hub_download`` of the same file in one process (the library's retries
  with back-off, which is what users of ``--model hf:`` met before, issue 12);
  one round each, as the library's wait is long.
* **no network, model cached**: ``tokchat pull REF --offline`` and
  ``tokchat pull REF`` against the closed port, as whole processes.

    .venv/bin/python bench/bench_pull.py [--rounds 3] [--skip-hf-offline]
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from support.assets import asset_path  # noqa: E402
from support.hub_standin import HubStandin  # noqa: E402

REPO = "tokchat-test/SmolLM2-135M-Instruct-GGUF"
FILE = "SmolLM2-135M-Instruct-Q4_1.gguf"


def closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def set_env(endpoint: str, home: Path) -> None:
    os.environ.update(HF_ENDPOINT=endpoint, HF_HOME=str(home), HF_HUB_OFFLINE="0", HF_HUB_DISABLE_TELEMETRY="1",
                      HF_HUB_DISABLE_PROGRESS_BARS="1")
    os.environ.pop("HF_HUB_CACHE", None)


def time_hf(home: Path) -> float:
    from huggingface_hub import hf_hub_download

    start = time.perf_counter()
    hf_hub_download(REPO, FILE, cache_dir=home / "hub", endpoint=os.environ["HF_ENDPOINT"])
    return time.perf_counter() - start


def time_tokchat(home: Path) -> float:
    from app.models.hub import download, plan_pull
    from app.models.hub_ref import parse_ref

    start = time.perf_counter()
    download(plan_pull(parse_ref(f"hf:{REPO}/{FILE}")))
    return time.perf_counter() - start


def run_process(*args: str) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ), timeout=600)
    return time.perf_counter() - start, done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-hf-offline", action="store_true", help="skip the library's long retry wait")
    args = parser.parse_args()

    model = asset_path("smollm2.gguf")
    size_mb = model.stat().st_size / 1e6
    server = HubStandin()
    server.add_file(REPO, FILE, model)
    server.start()
    work = Path(tempfile.mkdtemp(prefix="bench-pull-"))
    os.environ["TOKCHAT_CONFIG_DIR"] = str(work / "config")
    os.environ["TOKCHAT_DATA_DIR"] = str(work / "data")
    try:
        times: dict[str, list[float]] = {"hf_hub_download": [], "tokchat pull": []}
        for i in range(args.rounds):
            order = [("hf_hub_download", time_hf), ("tokchat pull", time_tokchat)]
            for name, fn in order if i % 2 == 0 else order[::-1]:
                home = work / f"hf-{name.replace(' ', '-')}-{i}"
                set_env(server.endpoint, home)
                times[name].append(fn(home))
                shutil.rmtree(home)
        hf, ours = statistics.median(times["hf_hub_download"]), statistics.median(times["tokchat pull"])
        print(f"**Download over loopback** ({size_mb:.1f} MB, median of {args.rounds}, fresh cache each round)\n")
        print("| | seconds | MB/s | vs hf_hub_download |\n|---|---:|---:|---:|")
        print(f"| hf_hub_download | {hf:.2f} | {size_mb / hf:.0f} | 1.00 |")
        print(f"| tokchat pull (+ sha256 check, resumable) | {ours:.2f} | {size_mb / ours:.0f} | {ours / hf:.2f} |\n")

        ref = f"hf:{REPO}:Q4_1"
        set_env(closed_port(), work / "hf-offline")
        rows = []
        wall, done = run_process("--model", ref, "--prompt", "hi", "--max-tokens", "2", "--no-history")
        rows.append(("tokchat --model (whole process), not cached", wall, len(done.stderr.splitlines())))
        if not args.skip_hf_offline:
            from huggingface_hub import hf_hub_download

            start = time.perf_counter()
            try:
                hf_hub_download(REPO, FILE, cache_dir=work / "hf-offline" / "hub", endpoint=os.environ["HF_ENDPOINT"])
            except Exception:  # the library's answer after its retries: what we time
                rows.append(("hf_hub_download (in process), not cached", time.perf_counter() - start, None))
        set_env(server.endpoint, work / "hf-cached")
        run_process("pull", ref)
        set_env(closed_port(), work / "hf-cached")
        for extra in (["--offline"], []):
            wall, done = run_process("pull", ref, *extra)
            rows.append((f"tokchat pull {' '.join(extra) or '(hub unreachable)'}, cached", wall,
                         len(done.stderr.splitlines())))
        print("**No network** (HF_ENDPOINT on a closed loopback port)\n")
        print("| what | seconds | stderr lines |\n|---|---:|---:|")
        for name, wall, lines in rows:
            print(f"| {name} | {wall:.2f} | {'-' if lines is None else lines} |")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
