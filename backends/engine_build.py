"""llama.cpp compiled once per machine and accelerator: the engine's libraries, llama-server and the RPC worker.

Standard library only: ``dev.py`` runs this before any virtual environment
holds tokchat, and ``tests/support/assets.py`` and ``bench/gpu_check.sh`` reuse it.

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
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, TextIO

from backends.accelerator import Accelerator
from backends.cpu import build_fingerprint
from backends.engine_patches import apply_all, patches_digest
from backends.pins import ENGINE, ENGINE_VERSION

#: what the chat loads: the engine's libraries (libllama and the ggml libraries and backends it links)
ENGINE_TARGETS = ("llama",)
#: what tokchat runs: the engine's libraries and the two executables the remote backends' tests start
TARGETS = (*ENGINE_TARGETS, "llama-server", "ggml-rpc-server")
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
_EXTRACT_OPTIONS: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}

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


def read_build_info(folder: Path) -> dict[str, Any] | None:
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
    # pip's own progress bar (bytes) on a terminal; quiet in a log, where it would be one line per update
    shown = ["--progress-bar", "on"] if sys.stderr.isatty() else ["--quiet"]
    subprocess.run([python, "-m", "pip", "--disable-pip-version-check", "download", *shown, "--no-deps",
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


class BuildProgress:
    """ninja's ``[N/M]`` lines as progress: steps done of the total, time so far and an estimate of the time left
    that learns from the steps already done; one updating line on a terminal, a plain line every tenth (and at
    least every minute) in a CI log."""

    def __init__(self, what: str, out: TextIO | None = None, now: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self.out = out if out is not None else sys.stderr
        self.tty = bool(getattr(self.out, "isatty", lambda: False)())
        self.now = now
        self.started = now()
        self.shown_at = -1e9
        self.shown_tenth = -1
        self.width = 0

    def line(self, done: int, total: int) -> str:
        elapsed = self.now() - self.started
        text = f"{self.what}: {done}/{total} steps, {_duration(elapsed)}"
        # the estimate once a twentieth of the steps (or 20) are done: the first steps configure, not compile
        if 0 < done < total and (done >= 20 or done * 20 >= total):
            text += f", about {_duration(elapsed / done * (total - done))} left"
        return text

    def step(self, done: int, total: int) -> None:
        now = self.now()
        if self.tty:
            if now - self.shown_at < 0.5 and done < total:
                return
            text = self.line(done, total)
            self.out.write("\r" + text.ljust(self.width))
            self.width = len(text)
        else:
            tenth = done * 10 // max(total, 1)
            if tenth == self.shown_tenth and now - self.shown_at < 60:
                return
            self.shown_tenth = tenth
            self.out.write(self.line(done, total) + "\n")
        self.shown_at = now
        self.out.flush()

    def close(self) -> None:
        if self.tty and self.width:
            self.out.write("\n")
            self.out.flush()


_NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\]")


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def _run_with_progress(cmd: list[str], env: dict[str, str], log: Path, progress: BuildProgress) -> None:
    """:func:`_run_logged` that also reads ninja's ``[N/M]`` lines into ``progress`` as they come."""
    with log.open("a") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", bufsize=1)
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                fh.write(line)
                match = _NINJA_STEP.match(line)
                if match:
                    progress.step(int(match.group(1)), int(match.group(2)))
        finally:
            code = proc.wait()
            progress.close()
    if code != 0:
        sys.stderr.write(log.read_text(errors="replace")[-6000:])
        raise RuntimeError(f"llama.cpp build step failed ({code}): {' '.join(cmd[:4])} ...; "
                           f"the whole log is {log}")


def cmake_options(accelerator: Accelerator) -> list[str]:
    return [*BASE_CMAKE_OPTIONS, *accelerator.cmake_flags]


def compile_tree(src: Path, build: Path, accelerator: Accelerator, *, targets: tuple[str, ...] = TARGETS,
                 jobs: int | None = None, log: Path, progress: BuildProgress | None = None) -> None:
    """Configure (once: a kept tree is only built further) and build ``targets`` of llama.cpp at ``src``
    (already patched) in ``build``."""
    cmake = _tool("cmake")
    env = dict(os.environ, PATH=f"{Path(_tool('ninja')).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if not (build / "build.ninja").exists():
        _run_logged([cmake, "-S", str(src), "-B", str(build), "-G", "Ninja", *cmake_options(accelerator)], env, log)
    _run_with_progress([cmake, "--build", str(build), "-j", str(jobs or os.cpu_count() or 2), "--target", *targets],
                       env, log, progress or BuildProgress("compiling"))


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
                 jobs: int | None = None, extra_targets: tuple[str, ...] = (),
                 targets: tuple[str, ...] = TARGETS) -> Path:
    """This machine's llama.cpp build with ``targets`` (and ``extra_targets``), compiled now where missing.

    ``source``: an sdist archive (or an unpacked sdist folder) to build from
    instead of downloading the pinned one (the GPU check brings its own).
    ``targets``: ``ENGINE_TARGETS`` for the chat alone (``dev.py run``), :data:`TARGETS` with the executables
    the tests use.  The CMake tree is kept beside the folder (``.tree-<key>``): a target asked for later is
    built in it from the same objects, so the libraries are never compiled twice.
    """
    folder = build_dir(accelerator)
    wanted = tuple(dict.fromkeys((*targets, *extra_targets)))
    info = read_build_info(folder)
    if info is not None and all(_has_target(folder, info, t) for t in wanted):
        return folder
    have = tuple(info.get("targets", TARGETS)) if info is not None else ()
    wanted = tuple(dict.fromkeys((*have, *wanted)))  # what the folder had stays in it
    check_compiler(accelerator)  # before a 76 MB download and a CMake run that would fail on it
    cache_root().mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    tree = cache_root() / f".tree-{folder.name}"
    work = tree
    tree.mkdir(parents=True, exist_ok=True)
    root = _sources(tree, source, say)
    llama = root / "vendor" / "llama.cpp"
    fresh = not (tree / "build" / "build.ninja").exists()
    if fresh:
        for changed in apply_all(llama):
            say(f"patched {changed.relative_to(root)}")
    everything = {"cpu": "5 to 14 min on 2 cores (5 on an idle Intel Xeon, 6 on an idle AMD EPYC, 13.6 under load), "
                         "2 on 16",
                  "cuda": "3 to 6 min on 16 cores, for this GPU only", "hip": "several minutes, for this GPU only",
                  "metal": "a few minutes"}
    engine_only = set(wanted) <= set(ENGINE_TARGETS)
    # measured 2026-11-29 on an idle 2-vCPU Intel Xeon: the libraries' 82 steps in under 2 min, all 218 in about 5
    how_long = ("about 2 min on 2 idle cores, longer under load" if engine_only and accelerator.kind == "cpu"
                else everything[accelerator.kind])
    parts = ("the engine's libraries" if engine_only else
             "the engine's libraries, " + ", ".join(t for t in wanted if t not in ENGINE_TARGETS))
    if fresh:
        say(f"compiling llama.cpp once for {accelerator.label}: {parts} ({how_long}; once per machine) ...")
    else:
        say(f"building {parts} in the kept llama.cpp tree ({tree.name}): only what is not built yet ...")
    log = work / "build.log"
    compile_tree(llama, work / "build", accelerator, targets=wanted, jobs=jobs, log=log,
                 progress=BuildProgress("compiling llama.cpp"))
    staging = folder.with_name(folder.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)
    files = collect(work / "build", staging, wanted)
    shutil.copy2(log, staging / "build.log")
    info = {
        "key": folder.name,
        "engine": f"{ENGINE} {ENGINE_VERSION}",
        "accelerator": accelerator.tag,
        "accelerator_label": accelerator.label,
        "patches": patches_digest(),
        "cmake_options": cmake_options(accelerator),
        "targets": list(wanted),
        "files": files,
        "seconds": round(time.monotonic() - started) + (info or {}).get("seconds", 0),
        "libllama_sha256": _sha256(next(staging / f for f in files if f.startswith("libllama."))),
    }
    (staging / "build.json").write_text(json.dumps(info, indent=1) + "\n")
    if folder.exists():
        shutil.rmtree(folder)
    staging.replace(folder)
    say(f"llama.cpp built in {took(started)}: {folder}")
    return folder


def check_compiler(accelerator: Accelerator) -> None:
    """Raise RuntimeError (the caller falls back to the CPU build) when the GPU compiler does not run at all."""
    if not accelerator.compiler:
        return
    try:
        done = subprocess.run([accelerator.compiler, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise RuntimeError(f"{accelerator.compiler} --version could not run: {exc}") from exc
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise RuntimeError(f"{accelerator.compiler} --version failed ({done.returncode})"
                           + (f": {said[-1]}" if said else ""))


def _has_target(folder: Path, info: dict[str, Any], target: str) -> bool:
    """A library target is in the folder when libllama is; an executable when its file is."""
    if target in ENGINE_TARGETS:
        return True  # read_build_info found a finished build: it has the libraries
    return (folder / target).exists()


def _sources(tree: Path, source: Path | None, say: Say) -> Path:
    """The unpacked sdist in the kept tree (downloaded once; the bindings' wheel made from it)."""
    unpacked = tree / "src"
    roots = [p for p in unpacked.iterdir() if (p / "vendor" / "llama.cpp").is_dir()] if unpacked.is_dir() else []
    if len(roots) == 1 and (tree / ".unpacked").exists():
        return roots[0]
    if unpacked.exists():
        shutil.rmtree(unpacked)
    if (tree / "build").exists():
        shutil.rmtree(tree / "build")  # a tree without its sources is rebuilt whole
    downloaded = source is None
    if source is None:
        say(f"downloading the {ENGINE} {ENGINE_VERSION} sources (76 MB, about a minute) ...")
        source = download_sdist(tree / "download")
    root = unpack_sdist(source, unpacked) if source.is_file() else source
    if downloaded:  # the bindings' pure wheel from these sources (seconds): installing it downloads nothing
        bindings_wheel(root, bindings_dir())
        shutil.rmtree(tree / "download", ignore_errors=True)
    (tree / ".unpacked").write_text("ok\n")
    return root


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
    info = read_build_info(folder)
    assert info is not None  # the build wrote it
    say(f"the engine uses {folder.name} ({info['accelerator_label']})")
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
    parser.add_argument("--engine-only", action="store_true",
                        help="the engine's libraries alone (the chat); llama-server and the RPC worker come later "
                        "from the same kept tree when the tests ask for them")
    args = parser.parse_args(argv)
    say: Say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    try:
        accelerator = choose()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if accelerator.missing:
        say(f"note: {accelerator.missing}; building for the CPU meanwhile")
    try:
        targets = ENGINE_TARGETS if args.engine_only else TARGETS
        folder = ensure_build(accelerator, source=args.source, jobs=args.jobs, extra_targets=tuple(args.extra),
                              say=say, targets=targets)
    except RuntimeError as exc:
        if accelerator.kind == "cpu" or os.environ.get("TOKCHAT_ACCELERATOR"):
            print(f"error: {exc}", file=sys.stderr)  # the build log's tail is above it
            return 1
        # a GPU toolkit that cannot build llama.cpp must not leave the user without a chat
        say(f"note: the {accelerator.label} build failed ({exc}); building for the CPU meanwhile, and the chat "
            "will say the GPU is unused")
        try:
            folder = ensure_build(Accelerator("cpu"), source=args.source, jobs=args.jobs,
                                  extra_targets=tuple(args.extra), say=say, targets=targets)
        except RuntimeError as again:
            print(f"error: {again}", file=sys.stderr)
            return 1
    if args.install:
        install_engine(folder, args.source, say)
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
