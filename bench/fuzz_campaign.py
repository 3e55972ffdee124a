"""The long fuzz campaign: each target of ``tests/fuzz`` for N executions or M minutes.

    .venv/bin/python bench/fuzz_campaign.py                       # every target, 30 minutes each
    .venv/bin/python bench/fuzz_campaign.py --minutes 8 --targets gguf encode
    .venv/bin/python bench/fuzz_campaign.py --runs 10000000       # the issue's goal: 10 million each
    nice -n 19 .venv/bin/python bench/fuzz_campaign.py --jobs 5 --until 07:55   # all at once, idle CPU only

Each target runs under atheris (``tests/fuzz/fuzz.py``) starting from the
committed corpus; inputs that find new coverage go to a scratch corpus
(``--work``, kept between campaigns so a second one resumes).  A crash or a
C/Python divergence ends that libFuzzer run: its reproducer is copied to
``--work/<target>/findings`` and the target restarts for the time left (at
most ``--max-findings`` times).  Reproducers worth keeping belong in
``tests/fuzz/crashes/<target>/`` with the fix; ``tests/fuzz/test_fuzz_replay.py``
replays them.

``--jobs N`` runs N targets at once (each is one process on one core);
``--until HH:MM`` (machine time) ends every target cleanly at that time
through libFuzzer's ``-max_total_time``, whatever it reached.  On a shared
machine run it under ``nice -n 19`` so it only takes idle CPU: the fuzzers
inherit the niceness, and their CPU time (not the wall time) says how much
fuzzing each target really got.

The fuzzers load a private build of the C accelerator (``--work/accel``,
built from the sources at start, passed as ``TOKCHAT_ACCEL_DIR``), so an
in-place rebuild of the shared extension during the campaign cannot pull
the library from under them.

Prints, per target: executions, wall seconds, CPU seconds of the fuzzer
processes themselves (``wait4``'s rusage), executions per CPU second,
libFuzzer's final ``cov:`` (covered Python branches/edges of
``tokenizer.*``) and ``ft:`` (features), the corpus size and the findings;
the table also goes to ``--work/results.md`` and ``results.json``.  ``--agreement-only`` then
replays the corpora the campaign kept with the current code and counts the
inputs on which C and Python agree.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FUZZ = ROOT / "tests" / "fuzz"
TARGETS = ["gguf", "gguf_arrays", "tokenizer_json", "encode", "stream"]
_STATUS = re.compile(r"^#(\d+)\s+(\w+)\s+cov: (\d+) ft: (\d+) corp: (\d+)/")
_DONE = re.compile(r"^Done (\d+) runs in (\d+) second|^stat::number_of_executed_units: (\d+)")


@dataclass
class Result:
    target: str
    execs: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    cov: int = 0
    ft: int = 0
    corpus: int = 0
    findings: list[str] = field(default_factory=list)


def run_target(target: str, work: Path, seconds: float, runs: int, max_findings: int, log,
               env: dict[str, str] | None = None, timeout: int = 120) -> Result:
    res = Result(target)
    corpus, findings = work / target / "corpus", work / target / "findings"
    corpus.mkdir(parents=True, exist_ok=True)
    findings.mkdir(parents=True, exist_ok=True)
    artifacts = work / target / "artifacts"
    deadline = time.monotonic() + seconds
    while res.execs < runs and time.monotonic() < deadline - 5:
        shutil.rmtree(artifacts, ignore_errors=True)
        artifacts.mkdir()
        left_s, left_runs = int(deadline - time.monotonic()), runs - res.execs
        cmd = [sys.executable, str(FUZZ / "fuzz.py"), target, str(corpus), str(FUZZ / "corpus" / target),
               f"-max_total_time={left_s}", f"-runs={left_runs}", f"-artifact_prefix={artifacts}/",
               f"-timeout={timeout}", "-rss_limit_mb=6144", "-print_final_stats=1"]
        started = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace")
        last_execs = 0
        for line in proc.stdout:
            log.write(line)
            m = _STATUS.match(line)
            if m:
                last_execs = int(m.group(1))
                res.cov, res.ft, res.corpus = int(m.group(3)), int(m.group(4)), int(m.group(5))
            d = _DONE.match(line)
            if d:
                last_execs = int(d.group(1) or d.group(3))
        # wait4, not wait: the rusage of this fuzzer process alone (threads run concurrently)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        res.cpu_seconds += usage.ru_utime + usage.ru_stime
        res.execs += last_execs
        res.seconds += time.monotonic() - started
        crashed = sorted(artifacts.iterdir())
        for art in crashed:
            dest = findings / art.name
            shutil.copy(art, dest)
            res.findings.append(str(dest))
        if proc.returncode == 0 or not crashed or len(res.findings) >= max_findings:
            break
    return res


def agreement(target: str, work: Path) -> tuple[int, int, list[str]]:
    """Replay the campaign's corpus (every input that found new coverage) and the committed one through
    the target with the code as it is now: (inputs, inputs where C and Python agree, disagreements)."""
    sys.path.insert(0, str(FUZZ))
    import fuzz_targets

    files = sorted((work / target / "corpus").glob("*")) + sorted((FUZZ / "corpus" / target).glob("*"))
    bad = []
    for path in files:
        try:
            fuzz_targets.TARGETS[target](path.read_bytes())
        except Exception as exc:  # a divergence or a crash: counted and named, the replay goes on
            bad.append(f"{path}: {type(exc).__name__}: {str(exc)[:200]}")
    return len(files), len(files) - len(bad), bad


def seconds_until(hhmm: str) -> float:
    """Seconds from now to the next ``HH:MM`` of the machine's local clock."""
    now = datetime.datetime.now()
    hour, minute = (int(x) for x in hhmm.split(":"))
    end = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if end <= now:
        end += datetime.timedelta(days=1)
    return (end - now).total_seconds()


def table(results: list[Result], header: str) -> str:
    """The campaign as a Markdown table (docs/hardening.md's)."""
    lines = [header, "",
             "| target | executions | wall | CPU | execs/CPU s | cov | ft | corpus | findings |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        rate = r.execs / r.cpu_seconds if r.cpu_seconds else 0.0
        lines.append(f"| {r.target} | {r.execs:,} | {r.seconds / 60:.1f} min | {r.cpu_seconds / 60:.1f} min | "
                     f"{rate:,.0f} | {r.cov} | {r.ft} | {r.corpus} | {len(r.findings)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", nargs="+", default=TARGETS, choices=TARGETS)
    parser.add_argument("--minutes", type=float, help="per target (default 30, or up to --until)")
    parser.add_argument("--runs", type=int, default=10_000_000, help="executions per target")
    parser.add_argument("--work", type=Path, default=Path("/tmp/tokchat-fuzz-campaign"))
    parser.add_argument("--max-findings", type=int, default=5)
    parser.add_argument("--timeout", type=int, default=120,
                        help="seconds one input may take (libFuzzer's -timeout counts wall time: at nice 19 on a "
                             "busy machine a fuzzer gets about 1.5%% of a core, so keep it generous)")
    parser.add_argument("--jobs", type=int, default=1, help="targets fuzzed at once")
    parser.add_argument("--until", metavar="HH:MM", help="stop every target at this machine time")
    parser.add_argument("--agreement-only", action="store_true",
                        help="only replay the corpora of an earlier campaign and count C/Python agreement")
    args = parser.parse_args(argv)
    if args.agreement_only:
        worst = 0
        for target in args.targets:
            total, agree, bad = agreement(target, args.work)
            print(f"{target:15} C and Python agree on {agree:,} of {total:,} inputs", flush=True)
            for line in bad[:10]:
                print(f"    {line}")
            worst = worst or len(bad)
        return 1 if worst else 0
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    seconds = 30 * 60.0 if args.minutes is None and not args.until else float("inf")
    if args.minutes is not None:
        seconds = args.minutes * 60
    if args.until:
        seconds = min(seconds, seconds_until(args.until))
    started = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    header = (f"fuzz campaign on {cpu} ({os.cpu_count()} CPUs, nice {os.nice(0)}), started {started}: "
              f"{seconds / 60:.0f} min or {args.runs:,} runs per target, {args.jobs} at once; work {args.work}")
    print(header, flush=True)
    args.work.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(FUZZ))
    from build_accel import build

    env = {**os.environ, "TOKCHAT_ACCEL_DIR": str(build(args.work.resolve() / "accel"))}
    env.pop("TOKCHAT_NO_ACCEL", None)

    def one(target: str) -> Result:
        with open(args.work / f"{target}.log", "w", buffering=1) as log:
            res = run_target(target, args.work, seconds, args.runs, args.max_findings, log, env, args.timeout)
        rate = res.execs / res.cpu_seconds if res.cpu_seconds else 0.0
        print(f"{target:15} {res.execs:>11,} execs {res.seconds:7.0f} s wall {res.cpu_seconds:7.0f} s CPU "
              f"{rate:8.0f}/CPU s  cov {res.cov:5} ft {res.ft:6}  corpus {res.corpus:5}  findings "
              f"{len(res.findings)}", flush=True)
        for f in res.findings:
            print(f"    finding: {f}", flush=True)
        return res

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(one, args.targets))
    load = open("/proc/loadavg").read().split()[:3]
    text = table(results, f"{header}\nload average at the end: {' '.join(load)}")
    print(text, flush=True)
    (args.work / "results.md").write_text(text + "\n")
    (args.work / "results.json").write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 1 if any(r.findings for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
