"""Before/after verdicts from a confidence interval of the speedup, judged against a practical threshold.

Each side is a set of repeated timings of one call (CUDA events). The speedup is
``median(before) / median(after)`` (> 1: ``after`` is faster). Its confidence
interval says how far the speedup could be from the measured one by chance; the
verdict compares that interval with a band of ``±threshold`` around 1:

* **same**: the interval lies inside the band (any change is smaller than the threshold);
* **faster** / **slower**: the interval lies wholly outside it, above or below;
* **uncertain**: the interval straddles an edge of the band (more samples would decide).

Two ways to get the interval, by what the unit of repetition is:

``compare`` (samples within one process)
    A seeded percentile bootstrap of the ratio of medians (``scipy.stats.bootstrap``), each
    side resampled on its own. It sees only the call-to-call noise of one process.
``compare_processes`` (several timed processes per side)
    A Welch t interval on the logarithms of the per-process medians. Process-to-process
    variance on a GPU (allocation addresses, clocks, JIT choices) is larger than the noise
    within one process, so when several processes were timed this is the honest interval.

The reports use ``compare``: each step of the committed captures was timed in one
process, so the process cannot be the unit there, and their reasons say so. ``compare_runs``
picks the process rule wherever each side has at least ``MIN_PROCESSES`` timed processes.

An uncertain verdict over processes also says what its processes can resolve at their spread
(``Verdict.resolution``): the smallest change they would call 95% of the time, and how many processes
a side a change of the measured size needs (the power of the Welch test, from the noncentral t).

The default confidence is 99%: with a threshold band, a false "faster"/"slower" between
identical code needs the interval to miss 1 by more than the threshold, which happens in at
most ``(1 - confidence)`` of pairs however noisy the runs are (tests/test_verdicts.py measures it).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Literal, Sequence

import numpy as np

# scipy.stats (half a second to import) only where an interval is computed: most commands that import
# this module never compute one

#: changes smaller than this fraction count as "same" (a practical, not statistical, threshold)
THRESHOLD = 0.02
CONFIDENCE = 0.99
#: bootstrap resamples; with the fixed seed the interval is the same on every run
N_RESAMPLES = 9999
SEED = 20240607
MIN_SAMPLES = 3
#: at least this many timed processes per side before the process is the unit
MIN_PROCESSES = 3

Kind = Literal["faster", "slower", "same", "uncertain", "host differs"]


@dataclasses.dataclass(frozen=True)
class Spread:
    median: float
    q1: float
    q3: float
    n: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> "Spread":
        a = np.asarray(samples, dtype=np.float64)
        if a.size < MIN_SAMPLES:
            raise ValueError(f"need at least {MIN_SAMPLES} samples to judge noise, got {a.size}")
        q1, med, q3 = np.percentile(a, [25, 50, 75])
        return cls(float(med), float(q1), float(q3), int(a.size))

    @property
    def rel_iqr(self) -> float:
        return (self.q3 - self.q1) / self.median if self.median > 0 else float("inf")


@dataclasses.dataclass(frozen=True)
class Verdict:
    kind: Kind
    #: median(before) / median(after): > 1 means ``after`` is faster
    ratio: float
    #: confidence interval of ``ratio`` (low, high)
    interval: tuple[float, float]
    #: samples (or processes, for the process rule) on each side: (before, after)
    samples: tuple[int, int]
    reason: str
    #: "bootstrap of samples in one process" or "Welch interval over processes"
    method: str = "bootstrap"
    confidence: float = CONFIDENCE
    threshold: float = THRESHOLD
    #: for an uncertain verdict over processes: what changes these processes can resolve at their spread
    resolution: str = ""

    # the names the reports used before the interval existed
    @property
    def label(self) -> str:
        return self.kind

    @property
    def speedup(self) -> float:
        return self.ratio

    def as_dict(self) -> dict:
        return {"kind": self.kind, "ratio": self.ratio, "interval": list(self.interval),
                "samples": list(self.samples), "reason": self.reason, "method": self.method,
                "confidence": self.confidence, "threshold": self.threshold, "resolution": self.resolution}


def _number(x: float) -> str:
    """Three significant digits, no exponent for the ranges timings take."""
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}" if x >= 1 else f"{x:.3f}"


def format_verdict(v: Verdict) -> str:
    """The one text of a verdict the reports print: ``faster 33× [12, 39]``."""
    lo, hi = v.interval
    return f"{v.kind} {_number(v.ratio)}× [{_number(lo)}, {_number(hi)}]"


def _kind(lo: float, hi: float, threshold: float) -> Kind:
    band_lo, band_hi = 1.0 / (1.0 + threshold), 1.0 + threshold
    if band_lo <= lo and hi <= band_hi:
        return "same"
    if lo > band_hi:
        return "faster"
    if hi < band_lo:
        return "slower"
    return "uncertain"


def _explain(kind: Kind, threshold: float, confidence: float) -> str:
    return {
        "same": f"the {confidence:.0%} interval lies within ±{threshold:.0%}",
        "faster": f"the whole {confidence:.0%} interval is above +{threshold:.0%}",
        "slower": f"the whole {confidence:.0%} interval is below -{threshold:.0%}",
        "uncertain": f"the {confidence:.0%} interval straddles the ±{threshold:.0%} band; more samples would decide",
    }[kind]


def _ratio_of_medians(before, after, axis=-1):
    return np.median(before, axis=axis) / np.median(after, axis=axis)


def _ordered_and_ranks(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``x`` sorted, and each sample's position in it: in the smallest integer type that holds the
    positions, which NumPy sorts by radix (resamples of ranks sort ten times faster than of floats)."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(x.size, np.int16 if x.size <= np.iinfo(np.int16).max else np.intp)
    ranks[order] = np.arange(x.size)
    return x[order], ranks


def _median_of_ranks(ranks: np.ndarray, ordered: np.ndarray, axis: int = -1) -> np.ndarray:
    """``np.median`` of the values that resampled ``ranks`` stand for, the same floating-point operations:
    the middle value, or the mean of the two middle ones."""
    n = ranks.shape[axis]
    k = n // 2
    if ranks.dtype == np.int16:
        part = np.sort(ranks, axis=axis, kind="stable")
    else:
        part = np.partition(ranks, [k - 1, k] if n % 2 == 0 else k, axis=axis)
    upper = ordered[np.take(part, k, axis=axis)]
    return upper if n % 2 else (ordered[np.take(part, k - 1, axis=axis)] + upper) / 2


def compare(before: Sequence[float], after: Sequence[float], threshold: float = THRESHOLD,
            confidence: float = CONFIDENCE, n_resamples: int = N_RESAMPLES, seed: int = SEED) -> Verdict:
    """Is ``after`` faster than ``before``? Both are repeated times of one call (any unit), in one process each."""
    b, a = Spread.of(before), Spread.of(after)
    ratio = b.median / a.median
    detail = (f"medians {b.median:.4g} -> {a.median:.4g} from {b.n} and {a.n} samples in one process each "
              f"(process-to-process variance not included)")
    if np.array_equal(np.sort(np.asarray(before, float)), np.sort(np.asarray(after, float))):
        # one measurement on both sides: nothing varies between them
        return Verdict("same", 1.0, (1.0, 1.0), (b.n, a.n), f"identical samples on both sides; {detail}",
                       "identical", confidence, threshold)
    lo, hi = _bootstrap_interval(tuple(map(float, before)), tuple(map(float, after)), confidence, n_resamples, seed)
    kind = _kind(lo, hi, threshold)
    return Verdict(kind, ratio, (lo, hi), (b.n, a.n), f"{_explain(kind, threshold, confidence)}; {detail}",
                   "bootstrap of samples in one process", confidence, threshold)


# building a page, the compare gate and the noise model each ask again, in one process, for intervals
# they already have; the interval is a pure function of its arguments
@functools.lru_cache(maxsize=256)
def _bootstrap_interval(before: tuple[float, ...], after: tuple[float, ...], confidence: float, n_resamples: int,
                        seed: int) -> tuple[float, float]:
    """The seeded percentile bootstrap interval of median(before) / median(after)."""
    from scipy import stats  # noqa: PLC0415 - costly import, only here

    b_values, a_values = np.asarray(before, float), np.asarray(after, float)
    if np.isnan(b_values).any() or np.isnan(a_values).any():
        data, statistic = (b_values, a_values), _ratio_of_medians
    else:
        # the bootstrap draws the same indices whatever the values: resampling the samples' ranks and
        # mapping the median ranks back to values gives the same interval, without sorting floats
        (b_ordered, b_ranks), (a_ordered, a_ranks) = _ordered_and_ranks(b_values), _ordered_and_ranks(a_values)
        data = (b_ranks, a_ranks)

        def statistic(b, a, axis=-1):
            return _median_of_ranks(b, b_ordered, axis) / _median_of_ranks(a, a_ordered, axis)
    res = stats.bootstrap(data, statistic, n_resamples=n_resamples, confidence_level=confidence,
                          method="percentile", vectorized=True, rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def compare_processes(before_medians: Sequence[float], after_medians: Sequence[float],
                      threshold: float = THRESHOLD, confidence: float = CONFIDENCE) -> Verdict:
    """The same question with the process as the unit: each value is one timed process's median."""
    lb, la = np.log(np.asarray(before_medians, float)), np.log(np.asarray(after_medians, float))
    if lb.size < MIN_PROCESSES or la.size < MIN_PROCESSES:
        raise ValueError(f"need at least {MIN_PROCESSES} timed processes per side, got {lb.size} and {la.size}")
    # geometric means of the process medians: the quantity the Welch interval is about
    ratio = float(np.exp(lb.mean() - la.mean()))
    detail = (f"geometric means of {lb.size} and {la.size} process medians {np.exp(lb.mean()):.4g} -> "
              f"{np.exp(la.mean()):.4g}, Welch interval on their logarithms")
    if np.array_equal(np.sort(lb), np.sort(la)):
        return Verdict("same", 1.0, (1.0, 1.0), (lb.size, la.size), f"identical process medians; {detail}",
                       "identical", confidence, threshold)
    from scipy import stats  # noqa: PLC0415 - costly import, only here

    ci = stats.ttest_ind(lb, la, equal_var=False).confidence_interval(confidence)
    lo, hi = float(np.exp(ci.low)), float(np.exp(ci.high))
    kind = _kind(lo, hi, threshold)
    resolution = _processes_needed(lb, la, threshold, confidence) if kind == "uncertain" else ""
    if resolution:
        detail += "; " + resolution
    return Verdict(kind, ratio, (lo, hi), (lb.size, la.size), f"{_explain(kind, threshold, confidence)}; {detail}",
                   "Welch interval over processes", confidence, threshold, resolution)


#: the share of repeated comparisons that :func:`_processes_needed` sizes for
POWER = 0.95


@functools.lru_cache(maxsize=None)
def _noncentrality(df: int, confidence: float) -> float:
    """The noncentrality at which a one-sided t test at the interval's level (``df`` degrees of
    freedom) passes ``POWER`` of the time: the noncentral t, since the SD is estimated too."""
    from scipy import optimize, stats  # noqa: PLC0415

    t_crit = float(stats.t.ppf(0.5 + confidence / 2, df))
    return float(optimize.brentq(lambda x: stats.nct.sf(t_crit, df, x) - POWER, 0.0, 1e3))


def _processes_needed(log_before: np.ndarray, log_after: np.ndarray, threshold: float, confidence: float) -> str:
    """What these processes can resolve, at their spread: the smallest change beyond the threshold band
    that ``POWER`` of repeated comparisons of this many processes would call, and, where the measured
    change lies beyond the band, how many processes a side would call one of that size. With s the
    pooled SD of the log medians and n processes a side, the interval's half-width is
    t_conf s' sqrt(2/n) with s' estimated from the same processes: the power of that test follows the
    noncentral t with 2n - 2 degrees of freedom."""
    def margin(n: int) -> float:
        return _noncentrality(2 * n - 2, confidence) * spread * np.sqrt(2 / n)

    n_now = min(log_before.size, log_after.size)
    spread = float(np.sqrt((log_before.var(ddof=1) + log_after.var(ddof=1)) / 2))
    edge = float(np.log1p(threshold))
    text = (f"the process medians spread {spread:.2%} (pooled SD), so {n_now} processes a side call changes beyond "
            f"about {np.expm1(edge + margin(n_now)):.1%} ({POWER:.0%} of the time)")
    measured = abs(float(log_before.mean() - log_after.mean()))
    if measured > edge + 1e-3:
        # margin(n) falls with n: double, then halve the bracket
        lo, hi = MIN_PROCESSES, MIN_PROCESSES
        while margin(hi) > measured - edge and hi < 1_000_000:
            lo, hi = hi, hi * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if margin(mid) <= measured - edge else (mid, hi)
        text += f"; a {np.expm1(measured):.1%} change needs about {hi} a side"
    return text


def compare_runs(before: Sequence[Sequence[float]], after: Sequence[Sequence[float]], **kw) -> Verdict:
    """Each side: the samples of one or more timed processes. The process is the unit where both
    sides have ``MIN_PROCESSES`` of them; otherwise all samples are pooled and bootstrapped."""
    if len(before) >= MIN_PROCESSES and len(after) >= MIN_PROCESSES:
        return compare_processes([float(np.median(p)) for p in before], [float(np.median(p)) for p in after], **kw)
    return compare([x for p in before for x in p], [x for p in after for x in p], **kw)


def across_runs(v: Verdict, margin: float, rests_on: str) -> Verdict:
    """``v`` judged across runs: its interval widened on each side by ``margin`` (log scale, the
    between-run spread analysis.model.noise measured for the step), the verdict recomputed against the same
    band. A comparison of one measurement with itself (method "identical") stays as it is."""
    if v.method == "identical" or margin <= 0:
        return v
    lo, hi = v.interval[0] * float(np.exp(-margin)), v.interval[1] * float(np.exp(margin))
    kind = _kind(lo, hi, v.threshold)
    explained = (f"the widened interval straddles the ±{v.threshold:.0%} band: between runs this step moves too "
                 "much to tell a change this small (more runs of the noise model, not more samples, would decide)"
                 if kind == "uncertain" else _explain(kind, v.threshold, v.confidence))
    reason = (f"{explained}; widened by ±{np.expm1(margin):.1%} ({rests_on}); within one run: "
              f"{format_verdict(v)}")
    return dataclasses.replace(v, kind=kind, interval=(lo, hi), reason=reason,
                               method=f"{v.method}, widened by the between-run spread")
