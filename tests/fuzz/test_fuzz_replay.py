"""Every committed seed and every crash reproducer, replayed through its fuzz target.

``tests/fuzz/corpus/<target>/`` holds the seeds (``make_corpus.py``) and
``tests/fuzz/crashes/<target>/`` the inputs that once crashed a target or
made the C accelerator and its pure-Python twin disagree, each kept after
its fix.  A target raises on a crash, an undocumented exception or a
divergence, so each case here fails if its bug comes back.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fuzz_targets import TARGETS, Divergence, one_gguf, pure_python  # noqa: E402

from tokenizer.accel import accel_module  # noqa: E402


def _cases(folder: str) -> list:
    found = []
    for target in sorted(TARGETS):
        for path in sorted((HERE / folder / target).glob("*")):
            found.append(pytest.param(target, path, id=f"{target}/{path.name}"))
    return found


def test_every_target_has_a_seed_corpus():
    for target in TARGETS:
        seeds = list((HERE / "corpus" / target).glob("*"))
        assert len(seeds) >= 5, f"{target}: {len(seeds)} seeds"


@pytest.mark.parametrize(("target", "path"), _cases("corpus"))
def test_seed_is_handled_alike_by_c_and_python(target, path):
    TARGETS[target](path.read_bytes())


@pytest.mark.parametrize(("target", "path"), _cases("crashes"))
def test_crash_reproducer_stays_fixed(target, path):
    TARGETS[target](path.read_bytes())


def test_the_differential_check_sees_a_difference(monkeypatch):
    """The targets compare for real: a C path that answers differently is reported."""
    if accel_module() is None:
        pytest.skip("no C accelerator built: both sides are pure Python")
    from tokenizer import spm

    real = spm.SPMModel.encode_fragment

    def off_by_one(self, text):
        ids = real(self, text)
        return ids if accel_module() is None else [i + 1 for i in ids]

    monkeypatch.setattr(spm.SPMModel, "encode_fragment", off_by_one)
    with pytest.raises(Divergence):
        one_gguf((HERE / "corpus" / "gguf" / "llama-spm.gguf").read_bytes())


def test_pure_python_switch_turns_the_accelerator_off():
    with pure_python():
        assert accel_module() is None
