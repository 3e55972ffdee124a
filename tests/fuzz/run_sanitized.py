"""Run tests against the tokenizer's C accelerator built with ASan and UBSan.

    .venv/bin/python tests/fuzz/run_sanitized.py                  # tests/tokenizer, tests/hardening, tests/fuzz
    .venv/bin/python tests/fuzz/run_sanitized.py tests/tokenizer -x -q   # any pytest arguments
    .venv/bin/python tests/fuzz/run_sanitized.py -x                # options only: added to each default run

The sanitized extension is built from setup.py with ``TOKCHAT_SANITIZE=1``
(:mod:`build_accel`) into a separate folder (``--build-dir``, default ``/tmp/tokchat-sanitized``);
the venv's own extension is left alone.  The tests then run in an
interpreter that preloads libasan, sends every ``PyMem_Malloc`` to the system
allocator (``PYTHONMALLOC=malloc``, so ASan sees the C code's small buffers
too) and puts the sanitized ``_accel`` first on ``tokenizer.__path__``.  The
first ASan or UBSan report aborts the run with a non-zero status (86 ASan,
87 UBSan) and is printed at the end (it is also kept under ``--build-dir``).
Programs the tests start (the engine, the CLI) get none of this: only the
test process is sanitized, so an engine killed on purpose still dies of its
signal.

Why not ``LD_PRELOAD`` alone on the normal build: an uninstrumented
extension is invisible to ASan; only code compiled with ``-fsanitize``
reports its out-of-bounds accesses.
"""
from __future__ import annotations

import argparse
from ctypes.util import find_library
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_accel import build  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
#: one pytest run per folder (the sanitized interpreter starts once per run).
#: ``tokchat doctor`` probes the OpenVINO backend in-process, and OpenVINO dlopens a library with
#: RTLD_DEEPBIND, which ASan refuses (google/sanitizers#611): those tests run in the normal suite only.
DEFAULT_RUNS = [["tests/tokenizer", "-k", "not doctor"], ["tests/hardening"], ["tests/fuzz"]]

# what the child interpreter runs: the sanitized extension first, then pytest
_BOOT = """
import os, sys, tokenizer
# this process has ASan loaded; the programs tests start (the engine, the CLI) run as usual, unsanitized
for name in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "PYTHONMALLOC"):
    os.environ.pop(name, None)
tokenizer.__path__.insert(0, {lib!r})
from tokenizer import _accel
assert _accel.__file__.startswith({lib!r}), _accel.__file__
print("sanitized accelerator:", _accel.__file__, flush=True)
import pytest
sys.exit(pytest.main(sys.argv[1:]))
"""


def runtime(name: str, cc: str) -> str:
    """The path of a sanitizer runtime (``libasan.so``) as the compiler knows it."""
    out = subprocess.run([cc, f"-print-file-name={name}"], capture_output=True, text=True, check=True).stdout.strip()
    if not os.path.isabs(out) or not os.path.exists(out):
        raise SystemExit(f"{cc} does not know {name}: install the compiler's sanitizer runtime (gcc: libasan8)")
    return out


def sanitized_env(cc: str, reports: Path) -> dict[str, str]:
    env = dict(os.environ)
    # reports go to files too: pytest's output capture would swallow a report printed mid-test
    log = f"log_path={reports}/report"
    env.update(
        # libstdc++ too: ASan resolves __cxa_throw at start-up, and C++ libraries some tests load
        # (openvino) throw exceptions that would otherwise hit a CHECK in its interceptor
        LD_PRELOAD=f"{runtime('libasan.so', cc)} {find_library('stdc++') or 'libstdc++.so.6'}",
        # Python itself leaks by design at exit; the C code's leaks are not what this run looks for
        ASAN_OPTIONS=f"detect_leaks=0:halt_on_error=1:abort_on_error=0:exitcode=86:{log}",
        UBSAN_OPTIONS=f"print_stacktrace=1:halt_on_error=1:exitcode=87:{log}",
        PYTHONMALLOC="malloc",
    )
    env.pop("TOKCHAT_NO_ACCEL", None)
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build-dir", type=Path, default=Path("/tmp/tokchat-sanitized"))
    parser.add_argument("--no-build", action="store_true", help="reuse the extension already in --build-dir")
    args, pytest_args = parser.parse_known_args(argv)
    cc = os.environ.get("CC", "gcc")
    if shutil.which(cc) is None:
        raise SystemExit(f"no C compiler {cc!r}: the sanitized build needs gcc or clang")
    lib = args.build_dir / "tokenizer" if args.no_build else build(args.build_dir.resolve(), sanitize="1")
    reports = args.build_dir.resolve() / "reports"
    shutil.rmtree(reports, ignore_errors=True)
    reports.mkdir(parents=True)
    boot, env = _BOOT.format(lib=str(lib)), sanitized_env(cc, reports)
    # arguments that name a test path replace the default runs; options alone (-x, -k ...) go to each of them
    paths = any((ROOT / a.split("::")[0]).exists() for a in pytest_args if not a.startswith("-"))
    runs = [pytest_args] if paths else [[*r, "-q", "-p", "no:cacheprovider", *pytest_args] for r in DEFAULT_RUNS]
    # in one process: xdist's workers would start without the boot above, so with the unsanitized extension
    runs = [[*run, "-n", "0"] for run in runs]
    worst = 0
    for run in runs:
        code = subprocess.run([sys.executable, "-c", boot, *run], cwd=ROOT, env=env).returncode
        print(f"run_sanitized: pytest {' '.join(run)} -> exit {code}", flush=True)
        worst = worst or code
    for report in sorted(reports.iterdir()):
        print(f"--- sanitizer report {report}:\n{report.read_text(errors='replace')}", flush=True)
    return worst


if __name__ == "__main__":
    sys.exit(main())
