"""Before/after verdicts decided against measured noise, not bare percentages.

Each side is a set of repeated timings (CUDA events). The medians are
compared, and the interquartile ranges (IQR) say how much a median could move
by chance: a change is called only when the IQRs do not overlap and the
difference is larger than both the noise and a minimum effect.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

#: differences below this fraction are "same" even when the runs are very quiet
MIN_EFFECT = 0.02
#: relative IQR above which a run is too noisy to call "same"
MAX_NOISE_FOR_SAME = 0.10


@dataclasses.dataclass(frozen=True)
class Spread:
    median: float
    q1: float
    q3: float
    n: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> "Spread":
        a = np.asarray(samples, dtype=np.float64)
        if a.size < 3:
            raise ValueError(f"need at least 3 samples to judge noise, got {a.size}")
        q1, med, q3 = np.percentile(a, [25, 50, 75])
        return cls(float(med), float(q1), float(q3), int(a.size))

    @property
    def rel_iqr(self) -> float:
        return (self.q3 - self.q1) / self.median if self.median > 0 else float("inf")


@dataclasses.dataclass(frozen=True)
class Verdict:
    label: str  # "faster" | "slower" | "same" | "uncertain"
    speedup: float  # before.median / after.median
    reason: str


def compare(before: Sequence[float], after: Sequence[float], min_effect: float = MIN_EFFECT) -> Verdict:
    """Is ``after`` faster than ``before``? Both are repeated times of one call (any unit)."""
    b, a = Spread.of(before), Spread.of(after)
    speedup = b.median / a.median
    change = (b.median - a.median) / b.median  # > 0: after is faster
    noise = max(b.rel_iqr, a.rel_iqr)
    effect_floor = max(min_effect, noise)
    detail = f"medians {b.median:.4g} -> {a.median:.4g}, change {change:+.1%}, noise (IQR/median) {noise:.1%}"
    if a.q3 < b.q1 and change > effect_floor:
        return Verdict("faster", speedup, f"IQRs do not overlap and the change exceeds the noise; {detail}")
    if a.q1 > b.q3 and -change > effect_floor:
        return Verdict("slower", speedup, f"IQRs do not overlap and the change exceeds the noise; {detail}")
    if abs(change) < effect_floor and noise <= MAX_NOISE_FOR_SAME:
        return Verdict("same", speedup, f"change within max(noise, {min_effect:.0%}); {detail}")
    if noise > MAX_NOISE_FOR_SAME:
        return Verdict("uncertain", speedup, f"runs too noisy to call; {detail}")
    return Verdict("uncertain", speedup, f"IQRs overlap although the medians differ; {detail}")
