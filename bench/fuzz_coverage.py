"""Line and branch coverage of the tokenizer's C accelerator reached by the fuzz corpora (gcc + gcov).

    .venv/bin/python bench/fuzz_coverage.py                      # committed corpus + crashes + the campaign's
    .venv/bin/python bench/fuzz_coverage.py --work /tmp/tokchat-fuzz-campaign /tmp/other --targets gguf encode
    .venv/bin/python bench/fuzz_coverage.py --no-campaign         # the committed corpus alone (what CI replays)

atheris measures coverage of the tokenizer's *Python* code only (see
``tests/fuzz/fuzz.py``), so this script answers the other half: how much of
``tokenizer/_accel*.c`` and ``_accel_merger.h`` the inputs reach.  It builds a
private copy of the extension with gcc ``--coverage`` (``TOKCHAT_COVERAGE=1``,
``tests/fuzz/build_accel.py``; the venv's extension is left alone), replays
each target's inputs through its fuzz target (``tests/fuzz/fuzz_targets.py``,
the same functions the fuzzer and ``test_fuzz_replay.py`` run: C and Python
paths, compared) in a fresh interpreter, and reads the counters with
``gcov --json-format``.

Prints, per C file: executable lines and branches, the share reached by all
targets together, and the line share each target reaches alone; then the C
functions no input called.  The table also goes to ``--out/coverage.md`` and
the raw numbers to ``coverage.json``; ``missed.txt`` lists every line no
input reached, with its source.  An input that makes a target raise is
counted and named (the replay goes on); one that kills the interpreter loses
that target's counters and is reported as such.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FUZZ = ROOT / "tests" / "fuzz"
TARGETS = ["gguf", "gguf_arrays", "tokenizer_json", "encode", "stream"]

# what the child interpreter runs: the coverage build first on tokenizer's path, then every input
_REPLAY = """
import json, sys, tokenizer
from pathlib import Path
lib, fuzz, target, *folders = sys.argv[1:]
tokenizer.__path__.insert(0, lib)
from tokenizer import _accel
assert _accel.__file__.startswith(lib), _accel.__file__
sys.path.insert(0, fuzz)
import fuzz_targets
one = fuzz_targets.TARGETS[target]
inputs, failed = 0, []
for folder in folders:
    for path in sorted(Path(folder).glob("*")):
        if not path.is_file():
            continue
        inputs += 1
        try:
            one(path.read_bytes())
        except Exception as exc:  # a divergence or an undocumented error: named in the report, replay goes on
            failed.append(f"{path}: {type(exc).__name__}: {str(exc)[:160]}")
print("REPLAY " + json.dumps({"inputs": inputs, "failed": failed}), flush=True)
"""

#: (file, line) -> hit;  (file, line, branch index) -> hit
Lines = dict[tuple[str, int], bool]
Branches = dict[tuple[str, int, int], bool]


def folders_for(target: str, works: list[Path]) -> list[Path]:
    """The inputs of one target: committed seeds, crash reproducers, and the campaigns' corpora if any."""
    found = [FUZZ / "corpus" / target, FUZZ / "crashes" / target, *(work / target / "corpus" for work in works)]
    return [f for f in found if f.is_dir()]


def read_gcov(objects: Path) -> tuple[Lines, Branches, dict[str, dict[str, int]]]:
    """Line and branch hits of every C source (headers included), from the ``.gcda`` files under ``objects``.

    A header compiled into several objects is merged: a line counts as reached when any object reached it.
    Also returns, per source file, each function's call count (summed over objects).
    """
    lines: Lines = {}
    branches: Branches = {}
    calls: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for gcda in sorted(objects.rglob("*.gcda")):
        out = subprocess.run(["gcov", "--json-format", "--stdout", "--branch-probabilities", "--object-directory",
                              str(gcda.parent), str(gcda.with_suffix(".c"))], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
        for chunk in out.splitlines():
            if not chunk.strip():
                continue
            for f in json.loads(chunk)["files"]:
                if not (ROOT / f["file"]).resolve().is_relative_to(ROOT / "tokenizer"):
                    continue  # Python's own headers (object.h, ...) inlined into ours
                name = Path(f["file"]).name
                for ln in f["lines"]:
                    key = (name, ln["line_number"])
                    lines[key] = lines.get(key, False) or ln["count"] > 0
                    for i, br in enumerate(ln.get("branches", [])):
                        bkey = (name, ln["line_number"], i)
                        branches[bkey] = branches.get(bkey, False) or br["count"] > 0
                for fn in f.get("functions", []):
                    calls[name][fn["demangled_name"]] += fn["execution_count"]
    return lines, branches, calls


def share(hits: dict, name: str) -> tuple[int, int]:
    """(reached, total) for one file."""
    mine = [hit for key, hit in hits.items() if key[0] == name]
    return sum(mine), len(mine)


def missed_lines(lines: Lines) -> str:
    """Every executable line no input reached, as ``file:line: source`` (what the next seeds should aim at)."""
    out = []
    for name, number in sorted(key for key, hit in lines.items() if not hit):
        source = (ROOT / "tokenizer" / name).read_text(errors="replace").splitlines()
        out.append(f"{name}:{number}: {source[number - 1].strip() if number <= len(source) else '?'}")
    return "\n".join(out) + "\n"


def pct(reached: int, total: int) -> str:
    return f"{100 * reached / total:.1f}% ({reached}/{total})" if total else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", nargs="+", default=TARGETS, choices=TARGETS)
    parser.add_argument("--work", type=Path, nargs="+", default=[Path("/tmp/tokchat-fuzz-campaign")],
                        help="campaign folders (bench/fuzz_campaign.py --work): their corpora are replayed too")
    parser.add_argument("--no-campaign", action="store_true", help="replay the committed corpus and crashes only")
    parser.add_argument("--out", type=Path, default=Path("/tmp/tokchat-fuzz-coverage"))
    args = parser.parse_args(argv)
    works = [] if args.no_campaign else [w.resolve() for w in args.work if w.is_dir()]
    out = args.out.resolve()
    sys.path.insert(0, str(FUZZ))
    from build_accel import build

    lib = build(out / "build", coverage=True)
    objects = out / "build" / "tmp"
    union_lines: Lines = {}
    union_branches: Branches = {}
    union_calls: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    per_target: dict[str, Lines] = {}
    replays: dict[str, dict] = {}
    env = {k: v for k, v in os.environ.items() if k != "TOKCHAT_NO_ACCEL"}
    for target in args.targets:
        for gcda in objects.rglob("*.gcda"):
            gcda.unlink()  # each target's counters alone
        folders = folders_for(target, works)
        done = subprocess.run([sys.executable, "-c", _REPLAY, str(lib), str(FUZZ), target, *map(str, folders)],
                              cwd=ROOT, env=env, capture_output=True, text=True, errors="replace")
        report = next((json.loads(ln[7:]) for ln in done.stdout.splitlines() if ln.startswith("REPLAY ")), None)
        if done.returncode or report is None:
            replays[target] = {"inputs": 0, "failed": [f"the replay died (exit {done.returncode}): "
                                                       f"{done.stderr[-400:]}"]}
            print(f"{target}: the replay died (exit {done.returncode}); its counters are lost\n{done.stderr[-2000:]}",
                  flush=True)
            continue
        replays[target] = report
        lines, branches, calls = read_gcov(objects)
        per_target[target] = lines
        for key, hit in lines.items():
            union_lines[key] = union_lines.get(key, False) or hit
        for key, hit in branches.items():
            union_branches[key] = union_branches.get(key, False) or hit
        for name, fns in calls.items():
            for fn, n in fns.items():
                union_calls[name][fn] += n
        print(f"{target}: {report['inputs']:,} inputs from {', '.join(map(str, folders))}; "
              f"{len(report['failed'])} raised", flush=True)
        for line in report["failed"][:10]:
            print(f"    {line}", flush=True)

    files = sorted({key[0] for key in union_lines})
    head = ["file", "lines reached", "branches reached", *[f"{t} lines" for t in per_target]]
    rows = ["| " + " | ".join(head) + " |", "| " + " | ".join(["---"] + ["---:"] * (len(head) - 1)) + " |"]
    for name in [*files, "all"]:
        pick = (lambda hits: hits) if name == "all" else (lambda hits, n=name: {k: v for k, v in hits.items()
                                                                                if k[0] == n})
        cells = [pct(sum(pick(union_lines).values()), len(pick(union_lines))),
                 pct(sum(pick(union_branches).values()), len(pick(union_branches)))]
        cells += [pct(sum(pick(hits).values()), len(pick(hits))) for hits in per_target.values()]
        rows.append(f"| {'**all**' if name == 'all' else name} | " + " | ".join(cells) + " |")
    inputs = sum(r["inputs"] for r in replays.values())
    source = "committed corpus and crashes" + (f" + campaign corpora ({', '.join(map(str, works))})" if works else "")
    text = "\n".join([f"C coverage of tokenizer/_accel* by {inputs:,} fuzz inputs ({source}); gcc --coverage -O0",
                      "", *rows])
    never = {name: sorted(fn for fn, n in fns.items() if n == 0) for name, fns in sorted(union_calls.items())}
    text += "\n\nC functions no input called:\n" + "\n".join(f"- {name}: {', '.join(fns)}"
                                                               for name, fns in never.items() if fns)
    print(text, flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "coverage.md").write_text(text + "\n")
    (out / "missed.txt").write_text(missed_lines(union_lines))
    print(f"lines no input reached, with their source: {out / 'missed.txt'}", flush=True)
    summary = {name: {"lines": share(union_lines, name), "branches": share(union_branches, name),
                      "per_target_lines": {t: share(h, name) for t, h in per_target.items()}} for name in files}
    (out / "coverage.json").write_text(json.dumps({"replays": replays, "files": summary,
                                                   "never_called": never}, indent=1))
    return 1 if any(r["failed"] for r in replays.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
