"""Pack what the GPU check needs on a machine with no network into ``.gpu/`` (well under 64 MiB).

* ``llama-src.tar.gz``: the pinned llama-cpp-python sdist without what no
  build reads (vocab GGUFs, docs, tests, the web UI's sources): 76 MB -> ~12 MB;
* ``gguf-py/``: llama.cpp's own GGUF writer, to make the model there;
* ``ggml-vocab-qwen2.gguf``: the real Qwen2 vocabulary, merges and chat template;
* ``wheels/``: tokchat's pure-Python dependencies the GPU image lacks, for
  Python 3.12, and llama-cpp-python's bindings built with ``LLAMA_BUILD=OFF``.

    python3 bench/gpu_prepare.py          # then: bench/gpu_check.sh OUT on the GPU machine

``.gpu/`` is ignored by git (``.gitignore``) and travels to the GPU machine as a carried path.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.engine_build import _SKIPPED_PARTS, ENGINE, ENGINE_VERSION, bindings_wheel, download_sdist  # noqa: E402

KIT = ROOT / ".gpu"
#: what the "cuda" image lacks of tokchat's run-time dependencies (its package list in the device notes;
#: diskcache is llama-cpp-python's: the first H100 run lost its checks without it)
WHEELS = ("textual", "platformdirs", "tomlkit", "diskcache", "linkify-it-py", "uc-micro-py", "mdit-py-plugins")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def strip_sdist(archive: Path, out: Path) -> None:
    with tarfile.open(archive) as src, tarfile.open(out, "w:gz") as dst:
        for member in src.getmembers():
            rel = member.name.split("/", 1)[-1]
            if any(rel.startswith(p) for p in _SKIPPED_PARTS):
                continue
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)


def main() -> int:
    KIT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        archive = download_sdist(Path(tmp))
        strip_sdist(archive, KIT / "llama-src.tar.gz")
        with tarfile.open(archive) as tf:
            prefix = f"{archive.name.removesuffix('.tar.gz')}/vendor/llama.cpp/"
            for member in tf.getmembers():
                rel = member.name.removeprefix(prefix)
                if member.isfile() and (rel.startswith("gguf-py/gguf/") or rel == "models/ggml-vocab-qwen2.gguf"):
                    target = KIT / (Path(rel).name if rel.startswith("models/") else rel)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with tf.extractfile(member) as fh, target.open("wb") as out:  # type: ignore[union-attr]
                        shutil.copyfileobj(fh, out)
        wheels = KIT / "wheels"
        if wheels.exists():
            shutil.rmtree(wheels)
        wheels.mkdir()
        shutil.copy2(bindings_wheel(archive, Path(tmp) / "bindings"), wheels)
    platforms = [a for p in PLATFORMS for a in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", *platforms, "-d", str(wheels), *WHEELS],
                   check=True)
    size = sum(p.stat().st_size for p in KIT.rglob("*") if p.is_file())
    print(f"{KIT}: {size / 2**20:.1f} MiB ({ENGINE} {ENGINE_VERSION} sources, gguf-py, vocab, "
          f"{len(list(wheels.iterdir()))} wheels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
