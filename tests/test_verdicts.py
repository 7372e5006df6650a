"""Verdicts follow the noise: separated distributions are called, overlapping ones are not."""
from __future__ import annotations

import numpy as np
import pytest

from analysis.verdicts import Spread, compare


def _samples(median, rel_spread, n=30, seed=0):
    rng = np.random.default_rng(seed)
    return list(median * (1 + rel_spread * rng.standard_normal(n)))


def test_clearly_faster_and_slower():
    base, fast = _samples(2.0, 0.005), _samples(1.0, 0.005, seed=1)
    v = compare(base, fast)
    assert v.label == "faster" and v.speedup == pytest.approx(2.0, rel=0.02)
    assert compare(fast, base).label == "slower"


def test_quiet_runs_with_a_tiny_difference_are_the_same():
    v = compare(_samples(1.0, 0.002), _samples(1.005, 0.002, seed=1))
    assert v.label == "same"
    assert "noise" in v.reason


def test_noisy_runs_are_uncertain():
    v = compare(_samples(1.0, 0.3), _samples(0.9, 0.3, seed=1))
    assert v.label == "uncertain"
    assert "noisy" in v.reason


def test_too_few_samples_cannot_be_judged():
    with pytest.raises(ValueError, match="at least 3"):
        Spread.of([1.0, 2.0])
