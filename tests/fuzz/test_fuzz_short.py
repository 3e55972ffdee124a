"""A short coverage-guided fuzz of every target on the committed corpus (the CI run of ``tests/fuzz``).

Each target runs under atheris in its own process (libFuzzer ends the
process when it is done) for a fixed number of executions with a fixed
seed, starting from ``corpus/<target>/``; new inputs go to a scratch folder,
never into the committed corpus.  Any crash, undocumented exception or C vs
Python divergence fails the test and leaves libFuzzer's reproducer in the
test's temporary folder (the failure message names it).  ``bench/fuzz_campaign.py`` is the long campaign.
"""
from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
#: executions per target: the slow targets (a tokenizer load or 16 real vocabularies per process) get fewer
#: (halved when the suite went to a quarter of an hour: about 85 s of one core for all five; the corpus
#: replay in test_fuzz_replay.py keeps every input found so far, and bench/fuzz_campaign.py runs long)
RUNS = {"gguf": 12_500, "gguf_arrays": 75_000, "tokenizer_json": 12_500, "encode": 6_000, "stream": 15_000}

# atheris publishes wheels for these only (pyproject's test extra says the same)
if sys.platform != "linux" or platform.machine() != "x86_64" or sys.version_info >= (3, 14):
    pytest.skip("atheris has no wheel for this platform", allow_module_level=True)


def test_every_target_gets_a_short_fuzz():
    sys.path.insert(0, str(HERE))
    from fuzz_targets import TARGETS

    assert set(RUNS) == set(TARGETS)


#: starts the fuzzer from a small process of its own (see test_the_fuzzer_starts_from_its_own_peak_rss)
FRESH_PARENT = [sys.executable, "-c", "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"]
"""libFuzzer's ``-rss_limit_mb`` reads the process's peak RSS (``ru_maxrss``), and Linux carries into a
program the peak of the address space its ``execve`` replaced.  Started from the pytest worker, that address
space is the worker's (vfork: its peak, 6.4 GB on CI, and every fuzzer was "out of memory" at input 0) or a
copy of it (fork: its current RSS, a model or two).  A small interpreter in between has a fresh address space
of a few MB, and the fuzzer it starts begins from that."""


@pytest.mark.parametrize("target", sorted(RUNS))
def test_short_fuzz(target, tmp_path):
    import atheris  # noqa: F401  (a missing test extra fails here, not as a skip)

    scratch, artifacts = tmp_path / "new", tmp_path / "artifacts"
    scratch.mkdir()
    artifacts.mkdir()
    cmd = [sys.executable, str(HERE / "fuzz.py"), target, str(scratch), str(HERE / "corpus" / target),
           f"-runs={RUNS[target]}", "-seed=1", "-timeout=60", "-rss_limit_mb=6144",
           f"-artifact_prefix={artifacts}/"]
    done = subprocess.run(FRESH_PARENT + cmd, cwd=ROOT, capture_output=True, text=True, errors="replace")
    out = done.stdout + done.stderr
    found = sorted(p.name for p in artifacts.iterdir())
    assert done.returncode == 0 and not found, f"{target}: exit {done.returncode}, reproducers {found} in " \
                                                f"{artifacts}\n{out[-4000:]}"
    ran = re.search(r"^Done (\d+) runs", out, re.M)
    assert ran and int(ran.group(1)) == RUNS[target], out[-2000:]
    cov = re.findall(r"cov: (\d+) ft: (\d+)", out)
    assert cov and int(cov[-1][0]) > 0, "atheris saw no coverage: the tokenizer was not instrumented"


def test_the_fuzzer_starts_from_its_own_peak_rss():
    """The CI failure of all five short fuzzes: the worker's memory became the fuzzer's peak RSS."""
    held = bytearray(800 * 1024 * 1024)
    held[::4096] = b"x" * len(held[::4096])  # touch every page: 800 MB resident, as a loaded model is
    probe = [sys.executable, "-c", "import resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"]

    def peak_mb(cmd: list[str], **how) -> int:
        return int(subprocess.run(cmd, capture_output=True, text=True, check=True, **how).stdout) // 1024

    assert peak_mb(probe) >= 800  # the inheritance this guards against (vfork)
    assert peak_mb(probe, preexec_fn=os.getpid) >= 800  # fork alone copies what is resident
    assert peak_mb(FRESH_PARENT + probe) < 200
    del held
