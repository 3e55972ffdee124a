"""llama.cpp compiled once per machine and accelerator: the engine's libraries, llama-server and the RPC worker.

Standard library only: ``dev.py`` runs this before any virtual environment
holds tokchat, and ``tests/assets.py`` and ``bench/gpu_check.sh`` reuse it.

One CMake tree, configured from the pinned llama-cpp-python sdist's
``vendor/llama.cpp`` with tokchat's patches (``backends/patches/``), builds
the shared libraries the engine loads (``libllama``, ``libggml*``),
``llama-server`` and ``ggml-rpc-server``; nothing else (no examples, no
tests, no web UI).  The server links the same ``libllama.so`` the engine
loads (RPATH ``$ORIGIN``), so both are one build by construction.

Everything lands flat in one folder of the cache,
``~/.cache/tokchat/engine/<key>/``, keyed by the llama-cpp-python version,
the CPU's features (``-march=native``), the accelerator and its
architecture (``backends/accelerator.py``) and the patches' digest; its
``build.json`` says what it is.  A folder whose key differs is another
build: a stale one is never reused, it is rebuilt beside it.

The Python bindings (llama-cpp-python's ``llama_cpp`` package) are built
from the same sdist with ``LLAMA_BUILD=OFF`` (a pure-Python wheel, a few
seconds); ``dev.py`` installs that wheel and copies this folder's libraries
into its ``llama_cpp/lib``, which is where the bindings look.

Measured on 2 idle AMD EPYC cores: one build of everything takes about as
long as the engine wheel alone used to (the server was a second compile of
the same sources, 5 to 15 minutes more).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable

from backends.accelerator import Accelerator
from backends.cpu import build_fingerprint
from backends.engine_patches import apply_all, patches_digest
from backends.pins import ENGINE, ENGINE_VERSION

#: what tokchat runs: the engine's libraries come with ``llama``; the other two are executables
TARGETS = ("llama", "llama-server", "ggml-rpc-server")
#: the options of the one build (RPATH $ORIGIN: every file of the folder finds its neighbours)
BASE_CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON",
    "-DCMAKE_BUILD_RPATH_USE_ORIGIN=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DGGML_RPC=ON",
)
#: parts of the sdist no build needs (the vocab GGUFs are 75 MB, the git history 38 MB)
_SKIPPED_PARTS = (".git/", "examples/", "vendor/llama.cpp/models/", "vendor/llama.cpp/docs/", "vendor/llama.cpp/tests/",
                  "vendor/llama.cpp/benches/", "vendor/llama.cpp/media/", "vendor/llama.cpp/tools/ui/src/",
                  "vendor/llama.cpp/tools/ui/tests/", "vendor/llama.cpp/gguf-py/tests/")
#: tarfile's safe extraction filter where this Python has it (3.10.12+, 3.11.4+)
_EXTRACT_OPTIONS: dict = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}

Say = Callable[[str], None]


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tokchat" / "engine"


def build_key(accelerator: Accelerator) -> str:
    """The name of the build this machine needs: version, CPU features, accelerator, patches."""
    return f"{ENGINE_VERSION}-cpu{build_fingerprint()}-{accelerator.tag}-patches{patches_digest()}"


def build_dir(accelerator: Accelerator) -> Path:
    return cache_root() / build_key(accelerator)


def bindings_dir() -> Path:
    """Where the bindings' pure wheel is kept (one per llama-cpp-python version: no compiled code in it)."""
    return cache_root() / f"bindings-{ENGINE_VERSION}"


def read_build_info(folder: Path) -> dict | None:
    """The folder's ``build.json``, or None when it is missing or not a finished build."""
    try:
        info = json.loads((folder / "build.json").read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and info.get("key") == folder.name else None


def ready(accelerator: Accelerator) -> Path | None:
    """This machine's finished build, or None (missing, or built with other patches or for another CPU)."""
    folder = build_dir(accelerator)
    return folder if read_build_info(folder) is not None else None


def download_sdist(dest: Path, python: str = sys.executable) -> Path:
    """The pinned sdist from the package registry (pip), into ``dest``."""
    subprocess.run([python, "-m", "pip", "--disable-pip-version-check", "download", "--quiet", "--no-deps",
                    "--no-binary", ENGINE, "-d", str(dest), f"{ENGINE}=={ENGINE_VERSION}"], check=True)
    (archive,) = dest.glob("*.tar.gz")
    return archive


def unpack_sdist(archive: Path, dest: Path) -> Path:
    """The sdist's root folder under ``dest``, without the parts no build reads."""
    with tarfile.open(archive) as tf:
        members = [m for m in tf.getmembers()
                   if not any(m.name.split("/", 1)[-1].startswith(p) for p in _SKIPPED_PARTS)]
        tf.extractall(dest, members=members, **_EXTRACT_OPTIONS)
    roots = [p for p in dest.iterdir() if p.is_dir() and (p / "vendor" / "llama.cpp").is_dir()]
    if len(roots) != 1:
        raise RuntimeError(f"{archive.name}: no single llama-cpp-python source tree with vendor/llama.cpp in it")
    return roots[0]


def _tool(name: str) -> str:
    """cmake/ninja from the running Python's folder (a venv's pip packages), else from PATH."""
    local = Path(sys.executable).parent / name
    found = str(local) if local.exists() else shutil.which(name)
    if not found:
        raise RuntimeError(f"{name} not found; install it with: python3 -m pip install {name}")
    return found


def _run_logged(cmd: list[str], env: dict[str, str], log: Path) -> None:
    """Run a build step into ``log``; on failure the log's tail is shown (ninja reports errors on stdout)."""
    with log.open("a") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        done = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        sys.stderr.write(log.read_text(errors="replace")[-6000:])
        raise RuntimeError(f"llama.cpp build step failed ({done.returncode}): {' '.join(cmd[:4])} ...; "
                           f"the whole log is {log}")


def cmake_options(accelerator: Accelerator) -> list[str]:
    return [*BASE_CMAKE_OPTIONS, *accelerator.cmake_flags]


def compile_tree(src: Path, build: Path, accelerator: Accelerator, *, targets: tuple[str, ...] = TARGETS,
                 jobs: int | None = None, log: Path) -> None:
    """Configure and build ``targets`` of llama.cpp at ``src`` (already patched) in ``build``."""
    cmake = _tool("cmake")
    env = dict(os.environ, PATH=f"{Path(_tool('ninja')).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    _run_logged([cmake, "-S", str(src), "-B", str(build), "-G", "Ninja", *cmake_options(accelerator)], env, log)
    _run_logged([cmake, "--build", str(build), "-j", str(jobs or os.cpu_count() or 2), "--target", *targets],
                env, log)


def collect(build: Path, folder: Path, targets: tuple[str, ...]) -> list[str]:
    """Copy the shared libraries and the executables of ``targets`` out of the build tree, flat."""
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for path in sorted((build / "bin").iterdir()):
        is_lib = ".so" in path.name or path.suffix in (".dylib", ".dll")
        if (is_lib or path.name in targets) and path.is_file():
            shutil.copy2(path, folder / path.name)
            names.append(path.name)
    if not any(n.startswith("libllama.") for n in names):
        raise RuntimeError(f"the build made no libllama in {build / 'bin'}")
    return names


def ensure_build(accelerator: Accelerator, *, say: Say = print, source: Path | None = None,
                 jobs: int | None = None, extra_targets: tuple[str, ...] = ()) -> Path:
    """This machine's llama.cpp build, compiled now unless a finished one with the same key exists.

    ``source``: an sdist archive (or an unpacked sdist folder) to build from
    instead of downloading the pinned one (the GPU check brings its own).
    ``extra_targets``: more executables into the same folder (``llama-quantize``).
    """
    folder = build_dir(accelerator)
    if read_build_info(folder) is not None and all((folder / t).exists() for t in extra_targets):
        return folder
    targets = (*TARGETS, *extra_targets)
    cache_root().mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=cache_root(), prefix=".build-") as tmp:
        work = Path(tmp)
        downloaded = source is None
        if source is None:
            say(f"downloading the {ENGINE} {ENGINE_VERSION} sources (76 MB, about a minute) ...")
            source = download_sdist(work / "download")
        root = unpack_sdist(source, work / "src") if source.is_file() else source
        if downloaded:  # the bindings' pure wheel from these sources (seconds): installing it downloads nothing
            bindings_wheel(root, bindings_dir())
        llama = root / "vendor" / "llama.cpp"
        for changed in apply_all(llama):
            say(f"patched {changed.relative_to(root)}")
        how_long = {"cpu": "about 6 min on 2 idle cores, 2 on 16", "cuda": "3 to 6 min on 16 cores, for this GPU "
                    "only", "hip": "several minutes, for this GPU only", "metal": "a few minutes"}[accelerator.kind]
        say(f"compiling llama.cpp once for {accelerator.label}: the engine's libraries, llama-server and the RPC "
            f"worker ({how_long}; once per machine) ...")
        log = work / "build.log"
        compile_tree(llama, work / "build", accelerator, targets=targets, jobs=jobs, log=log)
        staging = folder.with_name(folder.name + ".partial")
        if staging.exists():
            shutil.rmtree(staging)
        files = collect(work / "build", staging, targets)
        shutil.copy2(log, staging / "build.log")
        info = {
            "key": folder.name,
            "engine": f"{ENGINE} {ENGINE_VERSION}",
            "accelerator": accelerator.tag,
            "accelerator_label": accelerator.label,
            "patches": patches_digest(),
            "cmake_options": cmake_options(accelerator),
            "files": files,
            "seconds": round(time.monotonic() - started),
            "libllama_sha256": _sha256(next(staging / f for f in files if f.startswith("libllama."))),
        }
        (staging / "build.json").write_text(json.dumps(info, indent=1) + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        staging.replace(folder)
    say(f"llama.cpp built in {took(started)}: {folder}")
    return folder


def bindings_wheel(source: Path | None, dest: Path, python: str = sys.executable) -> Path:
    """llama-cpp-python's Python package alone (``LLAMA_BUILD=OFF``: no compile), as a wheel in ``dest``."""
    wheels = sorted(dest.glob("llama_cpp_python-*.whl"))
    if wheels:
        return wheels[0]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if source is None:
            source = download_sdist(work / "download", python)
        root = unpack_sdist(source, work / "src") if source.is_file() else source
        env = dict(os.environ, CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF")
        staging = dest.with_name(dest.name + ".partial")
        staging.mkdir(parents=True, exist_ok=True)
        subprocess.run([python, "-m", "pip", "--disable-pip-version-check", "wheel", "--quiet", "--no-deps",
                        "-w", str(staging), str(root)], check=True, env=env)
        if dest.exists():
            shutil.rmtree(dest)
        staging.replace(dest)
    return next(dest.glob("llama_cpp_python-*.whl"))


def install_libraries(folder: Path, package_dir: Path) -> None:
    """Put the build's shared libraries where the bindings load them (``llama_cpp/lib``)."""
    lib = package_dir / "lib"
    if lib.exists():
        shutil.rmtree(lib)
    lib.mkdir(parents=True)
    for path in folder.iterdir():
        if ".so" in path.name or path.suffix in (".dylib", ".dll"):
            shutil.copy2(path, lib / path.name)
    shutil.copy2(folder / "build.json", lib / "build.json")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def took(start: float) -> str:
    """``3 min 5 s`` / ``42 s`` since ``time.monotonic()`` was ``start`` (dev.py says it too)."""
    seconds = int(time.monotonic() - start)
    return f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"


def install_engine(folder: Path, source: Path | None, say: Say = print) -> Path:
    """Install the bindings into the running Python (a venv) with ``folder``'s libraries; their folder."""
    import importlib.util

    wheel = bindings_wheel(source, bindings_dir())
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "install", "--quiet",
                    "--force-reinstall", "--no-deps", str(wheel)], check=True)
    importlib.invalidate_caches()
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{wheel.name} installed no llama_cpp package")
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    install_libraries(folder, package_dir)
    say(f"the engine uses {folder.name} ({read_build_info(folder)['accelerator_label']})")
    return package_dir / "lib"


def main(argv: list[str] | None = None) -> int:
    """``python -m backends.engine_build [--install] [--source SDIST] [--extra TARGET ...]``.

    Builds this machine's llama.cpp unless it is built; ``--install`` also
    installs the bindings with its libraries into the running Python.  The
    last line printed is the build's folder.
    """
    import argparse

    from backends.accelerator import choose

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, help="an sdist archive or folder instead of the registry's")
    parser.add_argument("--extra", action="append", default=[], help="another executable target to build")
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--install", action="store_true", help="install the bindings and libraries here")
    args = parser.parse_args(argv)
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    try:
        accelerator = choose()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if accelerator.missing:
        say(f"note: {accelerator.missing}; building for the CPU meanwhile")
    try:
        folder = ensure_build(accelerator, source=args.source, jobs=args.jobs, extra_targets=tuple(args.extra),
                              say=say)
    except RuntimeError as exc:
        if accelerator.kind == "cpu" or os.environ.get("TOKCHAT_ACCELERATOR"):
            print(f"error: {exc}", file=sys.stderr)  # the build log's tail is above it
            return 1
        # a GPU toolkit that cannot build llama.cpp must not leave the user without a chat
        say(f"note: the {accelerator.label} build failed ({exc}); building for the CPU meanwhile, and the chat "
            "will say the GPU is unused")
        try:
            folder = ensure_build(Accelerator("cpu"), source=args.source, jobs=args.jobs,
                                  extra_targets=tuple(args.extra), say=say)
        except RuntimeError as again:
            print(f"error: {again}", file=sys.stderr)
            return 1
    if args.install:
        install_engine(folder, args.source, say)
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
