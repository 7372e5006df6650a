"""Adaptive sampling of a timed call: take samples until the median is known well enough.

A timed run takes at least ``min_samples`` samples, then stops as soon as the relative
half-width of the median's confidence interval is at most ``target_rel_halfwidth``, or when
the time budget (wall clock since the first sample, everything included) is spent, or at
``max_samples``. The median's interval is distribution-free (order statistics of a binomial
rank interval), so it needs no resampling and is cheap to recompute after every sample.

The clock and the sample are passed in, so the stopping logic runs on a CPU with a fake clock.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class SamplingRule:
    min_samples: int = 10
    max_samples: int = 2000
    target_rel_halfwidth: float = 0.01
    budget_s: float = 20.0
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if not 3 <= self.min_samples <= self.max_samples:
            raise ValueError(f"need 3 <= min_samples <= max_samples, got {self.min_samples} and {self.max_samples}")
        if self.budget_s <= 0 or self.target_rel_halfwidth <= 0:
            raise ValueError("budget_s and target_rel_halfwidth must be positive")

    @classmethod
    def fixed(cls, samples: int) -> "SamplingRule":
        """Exactly ``samples`` samples (no early stop, no budget)."""
        return cls(min_samples=samples, max_samples=samples, target_rel_halfwidth=float("inf"),
                   budget_s=float("inf"))

    def as_dict(self) -> dict:
        return {k: (None if v == float("inf") else v) for k, v in dataclasses.asdict(self).items()}


def load_binomial_functions():
    """SciPy's special functions (the binomial CDF and its inverse), imported on first use: a timed run
    loads them before its samples start, so that the import is not counted in the sampling budget.
    scipy.special, not scipy.stats, whose import is several times larger, in every timed process."""
    from scipy import special  # noqa: PLC0415 - only where an interval is computed

    return special


def _binomial_half_quantile(q: float, n: int) -> int:
    """The smallest k with P(B <= k) >= q for B ~ binomial(n, 1/2): ``scipy.stats.binom.ppf(q, n, 0.5)``
    (tests/test_timed_sampling.py checks them equal), from the inverse of the continuous extension and a step
    to the integer the CDF itself gives."""
    special = load_binomial_functions()
    k = max(int(np.ceil(special.bdtrik(q, n, 0.5))), 0)
    while k > 0 and special.bdtr(k - 1, n, 0.5) >= q:
        k -= 1
    while special.bdtr(k, n, 0.5) < q:
        k += 1
    return k


def median_interval(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Order-statistic interval of the median: [x_(k), x_(n-k+1)], k from the binomial(n, 1/2) quantile
    (coverage at least ``confidence``, as close as the ranks allow)."""
    x = np.sort(np.asarray(samples, dtype=np.float64))
    n = x.size
    k = _binomial_half_quantile((1 - confidence) / 2, n)
    # P(rank interval misses) = 2 * P(B <= k - 1) must stay <= 1 - confidence
    if k >= 1 and 2 * load_binomial_functions().bdtr(k - 1, n, 0.5) > 1 - confidence:
        k -= 1
    if k < 1:
        return float(x[0]), float(x[-1])
    return float(x[k - 1]), float(x[n - k])


def rel_halfwidth(samples: Sequence[float], confidence: float = 0.95) -> float:
    lo, hi = median_interval(samples, confidence)
    med = float(np.median(samples))
    return (hi - lo) / 2 / med if med > 0 else float("inf")


@dataclasses.dataclass(frozen=True)
class SamplingResult:
    samples: list[float]
    #: "converged", "budget" or "max_samples"
    stopped_because: str
    rel_halfwidth: float
    elapsed_s: float

    def as_dict(self) -> dict:
        return {"samples": len(self.samples), "stopped_because": self.stopped_because,
                "median_rel_halfwidth": self.rel_halfwidth, "elapsed_s": self.elapsed_s}


def sample_adaptively(take_sample: Callable[[int], float], rule: SamplingRule,
                      clock: Callable[[], float] = time.perf_counter) -> SamplingResult:
    """Call ``take_sample(i)`` for i = 0, 1, ... until ``rule`` says the median is known well enough."""
    samples: list[float] = []
    t0 = clock()
    while True:
        samples.append(float(take_sample(len(samples))))
        n = len(samples)
        if n < rule.min_samples:
            continue
        hw = rel_halfwidth(samples, rule.confidence)
        elapsed = clock() - t0
        if hw <= rule.target_rel_halfwidth and n < rule.max_samples:
            return SamplingResult(samples, "converged", hw, elapsed)
        if n >= rule.max_samples:
            return SamplingResult(samples, "max_samples", hw, elapsed)
        if elapsed >= rule.budget_s:
            return SamplingResult(samples, "budget", hw, elapsed)
