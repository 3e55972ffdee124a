"""Build ``tokenizer._accel`` from setup.py's declaration, without pyproject.toml's metadata.

    .venv/bin/python tests/fuzz/build_accel.py --inplace            # the venv's (editable) extension
    .venv/bin/python tests/fuzz/build_accel.py --sanitize 1 --out /tmp/asan    # ASan + UBSan copy

``setup.py build_ext`` would also validate pyproject.toml, and the venv's
setuptools may be older than the one pip's isolated build used (an SPDX
``license`` string then fails validation); building the one Extension
through a bare ``Distribution`` avoids that.  Prints the folder that holds
the built ``_accel*.so`` (``<out>/tokenizer``).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_CHILD = """
import runpy, sys
from setuptools import Distribution
ext = runpy.run_path("setup.py", run_name="tokchat_setup")["accel_extension"]()
dist = Distribution({"ext_modules": [ext], "script_name": "setup.py", "name": "tokchat-accel"})
cmd = dist.get_command_obj("build_ext")
out, inplace = sys.argv[1], sys.argv[2] == "1"
cmd.inplace = inplace
cmd.force = True
if not inplace:
    cmd.build_lib = out
    cmd.build_temp = out + "/tmp"
dist.run_command("build_ext")
"""


def build(out: Path | None, sanitize: str = "", quiet: bool = True, coverage: bool = False) -> Path:
    """Compile the extension (into the source tree when ``out`` is None); return the folder of the .so.

    ``coverage``: gcc ``--coverage`` counters (the ``.gcda`` files land next to the objects in ``<out>/tmp``).
    """
    env = {**os.environ, "TOKCHAT_SANITIZE": sanitize, "TOKCHAT_COVERAGE": "1" if coverage else ""}
    args = [sys.executable, "-c", _CHILD, str(out or ""), "0" if out else "1"]
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=quiet, text=True)
    if done.returncode:
        raise SystemExit(f"building tokenizer._accel failed:\n{done.stdout}{done.stderr}")
    lib = (out / "tokenizer") if out else ROOT / "tokenizer"
    if not any(lib.glob("_accel*.so")):
        raise SystemExit(f"the build left no _accel*.so in {lib}")
    return lib


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--inplace", action="store_true", help="next to the sources (the editable install's copy)")
    where.add_argument("--out", type=Path, help="a separate folder")
    parser.add_argument("--sanitize", default="", choices=["", "1"])
    args = parser.parse_args(argv)
    print(build(None if args.inplace else args.out.resolve(), args.sanitize, quiet=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
