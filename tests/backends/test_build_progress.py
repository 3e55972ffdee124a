"""The compile's progress as the user sees it (issue 49, item 1): ninja's ``[N/M]`` lines become one updating
line on a terminal and a plain line per tenth in a CI log, with an estimate that learns from the steps done."""
from __future__ import annotations

import io
import sys

from backends.engine_build import BuildProgress, _run_with_progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_terminal_gets_one_updating_line_with_the_time_left():
    out, clock = Terminal(), Clock()
    progress = BuildProgress("compiling llama.cpp", out, now=clock)
    for done in range(1, 201):
        clock.t = done * 1.5  # 1.5 s a step
        progress.step(done, 200)
    progress.close()
    text = out.getvalue()
    assert "\n" not in text.rstrip("\n") and text.endswith("\n")  # one line, redrawn with \r
    frames = text.rstrip("\n").split("\r")[1:]
    assert frames[-1].strip() == "compiling llama.cpp: 200/200 steps, 5 min 00 s"
    middle = next(f for f in frames if f.startswith("compiling llama.cpp: 100/200 steps"))
    assert middle.strip() == "compiling llama.cpp: 100/200 steps, 2 min 30 s, about 2 min 30 s left"
    # no estimate from the first steps alone (they configure and generate, not compile)
    assert "left" not in next(f for f in frames if f.startswith("compiling llama.cpp: 5/200 "))


def test_a_log_gets_a_plain_line_per_tenth():
    out, clock = io.StringIO(), Clock()
    progress = BuildProgress("compiling", out, now=clock)
    for done in range(1, 101):
        clock.t = float(done)
        progress.step(done, 100)
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert [line.split(":")[1].split(",")[0].strip() for line in lines] == [
        "1/100 steps", *(f"{n}/100 steps" for n in range(10, 101, 10))]
    assert lines[5] == "compiling: 50/100 steps, 50 s, about 50 s left"


def test_a_real_process_lines_reach_the_log_and_the_progress(tmp_path):
    """A real child printing ninja-style lines: every line is logged, the steps are reported."""
    script = "import sys\nfor i in range(1, 31):\n    print(f'[{i}/30] Building CXX object x{i}.o', flush=True)\n"
    out = io.StringIO()
    log = tmp_path / "build.log"
    _run_with_progress([sys.executable, "-c", script], {}, log, BuildProgress("compiling", out))
    assert sum(line.startswith("[") for line in log.read_text().splitlines()) == 30  # each line logged
    assert out.getvalue().splitlines()[-1].startswith("compiling: 30/30 steps")
    bad = [sys.executable, "-c", "print('[1/2] x'); raise SystemExit(3)"]
    try:
        _run_with_progress(bad, {}, log, BuildProgress("compiling", io.StringIO()))
    except RuntimeError as exc:
        assert "build step failed (3)" in str(exc)
    else:
        raise AssertionError("a failed step must raise")
