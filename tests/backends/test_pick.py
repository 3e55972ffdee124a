"""backends._pick.argmax_f32: the greedy pick over llama.cpp's logits, without NumPy in the engine process."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from backends._pick import argmax_f32


def _at(values: np.ndarray) -> tuple[int, int]:
    return values.ctypes.data, len(values)


@pytest.mark.parametrize("seed", range(5))
def test_the_first_highest_logit_as_numpy_finds_it(seed):
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal(151_936) * 4).astype(np.float32)
    logits[rng.integers(0, len(logits), size=3)] = logits.max()  # ties: the first one wins
    assert argmax_f32(*_at(logits)) == int(logits.argmax())


def test_a_nan_wins_only_where_llama_cpps_greedy_sampler_lets_it():
    """llama.cpp's greedy sampler keeps a value only when it is greater than the best so far."""
    logits = np.array([1.0, np.nan, 3.0, 2.0], dtype=np.float32)
    assert argmax_f32(*_at(logits)) == 2
    first = np.array([np.nan, 5.0, 7.0], dtype=np.float32)
    assert argmax_f32(*_at(first)) == 0


def test_a_ctypes_buffer_and_bad_arguments():
    row = (ctypes.c_float * 4)(0.5, -1.0, 9.0, 9.0)
    assert argmax_f32(ctypes.addressof(row), 4) == 2
    with pytest.raises(ValueError):
        argmax_f32(0, 4)
    with pytest.raises(ValueError):
        argmax_f32(ctypes.addressof(row), 0)


@pytest.mark.parametrize("n", [1, 7, 63, 64, 65, 129, 1000])
@pytest.mark.parametrize("where", ["first", "middle", "last", "tied"])
def test_every_length_and_place_of_the_highest(n, where):
    """Block boundaries (64 values a block) and the tail after the last whole block."""
    rng = np.random.default_rng(n)
    logits = rng.standard_normal(n).astype(np.float32)
    place = {"first": 0, "middle": n // 2, "last": n - 1, "tied": n // 3}[where]
    logits[place] = 50.0
    if where == "tied":
        logits[n - 1] = 50.0
    assert argmax_f32(*_at(logits)) == int(logits.argmax()) == place


def test_signed_zeros_tie_as_llama_cpp_compares_them():
    logits = np.array([-1.0, -0.0, 0.0, -2.0], dtype=np.float32)
    assert argmax_f32(*_at(logits)) == 1  # 0.0 is not greater than -0.0: the first stays
