"""What limits one step (one variant's steady compute call), from its run summary
(:func:`analysis.model.run_summary.summarize_run`) and the ncu launches of its recipe.

Host or device is decided on the timer that matters: the timed run's median (CUDA events, or the
host timer where the framework has none) against the GPU busy time per call nsys measured. The host
link limits when the call's copies take at least :data:`HOST_LINK_SHARE` of the timed median; the
host (launches, Python, allocation, waiting) when the GPU idles for at least :data:`HOST_SHARE` of
it. A decision within the timing noise of its threshold is *borderline* and falls to the device side,
so that twin steps (a pool added, nothing else) do not flip. Otherwise the step is limited by its
kernels (:mod:`analysis.model.limiter.launch`), weighted by their nsys time, each kernel's profile matched
by launch: name, grid, block and per-launch time (:func:`step_kernels`).

A step's floor is never below the physical one: at least the copies at the measured link rate, at
least the kernels' floor (each bound kernel's time at its unit's peak); a latency-bound or host-bound
step has no floor and says so.
"""
from __future__ import annotations

import dataclasses
import functools
import re
import statistics
from typing import Iterable, Sequence

from analysis.model.limiter.launch import Kind, LaunchLimiter, Unit, classify_launch
from analysis.model import floors

#: Copies over the host link taking at least half of the timed call set its time: the kernels
#: could be infinitely fast and the call would still take that long.
HOST_LINK_SHARE = 0.5

#: The GPU idle for at least half of the timed call: the host sets the time, not the GPU.
HOST_SHARE = 0.5

#: The smallest noise band a host/device decision is held to: nsys' busy time and the timed median
#: come from two runs of the step, whose calls differ by a few percent beyond their own spread.
MIN_NOISE_SHARE = 0.03

#: A profiled launch stands for a step's launches only when their mean time is within this factor of
#: the profiled launch's: same name and shape on other data (a chunk of the array) is other work.
#: Wide enough for ncu's own clock control and cache flushing, narrow against a 1/8 chunk.
LAUNCH_TIME_FACTOR = 2.0

#: Launches shorter than this (ns) are not compared by time: their time is launch latency and
#: ncu's cold caches more than work (XLA's 1-block dots: 0.9 µs traced, 2.2 µs profiled).
LAUNCH_TIME_MIN_NS = 20_000

#: Measured work covers a step when ncu profiled at least this share of its kernel time; below it,
#: measured bytes and FLOPs are lower bounds.
COVERAGE_COMPLETE = 0.95


@functools.lru_cache(maxsize=4096)
def kernel_key(name: str) -> str:
    """A kernel's name reduced to what is the same in nsys and in ncu, and across processes: no
    return type, namespaces, casts on template arguments or ABI tags (Numba numbers its ABI tag per
    compilation: ``abi:v3`` and ``abi:v5`` are one kernel)."""
    name = re.sub(r"^void ", "", name.strip()).replace("abi:", "")
    # words of a cast separated by required whitespace: with optional whitespace the engine tries
    # every split of each word, exponential on long template names
    name = re.sub(r"\([A-Za-z_][\w:]*(?:\s+[A-Za-z_][\w:]*)*\s*\)(?=-?\d)", "", name)
    name = re.sub(r"(?:[A-Za-z_]\w*::)+", "", name)
    return re.sub(r"\[v\d+,", "[", name)


def _steady(calls: Sequence[dict]) -> Sequence[dict]:
    return calls[1:] if len(calls) > 1 else calls


def fastest_steady_call(calls: Sequence[dict]) -> dict:
    """The steady call (every call but the first, which pays first-use costs) with the shortest wall
    time: the one nearest the step's steady state, since host noise only lengthens a call."""
    return min(_steady(calls), key=lambda c: c.get("wall_ns") or 0)


# --- host or device, on the timed run ----------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class HostTime:
    """A step's call on the timed run's clock beside nsys' GPU busy time (ms)."""
    timed_median_ms: float
    gpu_busy_ms: float  # median of the steady calls under nsys: the union of GPU work
    copy_ms: float  # host-device copies per steady call, summed (overlapping copies both count)
    #: relative noise of the decision: the timing spread, the busy-time spread across calls, and how
    #: far the traced calls' wall time sits from the timed median (tracing's own host overhead)
    noise_share: float

    @property
    def idle_ms(self) -> float:
        """GPU idle per call on the timed clock; 0 when the timed median is within the busy time."""
        return max(self.timed_median_ms - self.gpu_busy_ms, 0.0)

    @property
    def idle_share(self) -> float:
        return self.idle_ms / self.timed_median_ms if self.timed_median_ms else 0.0

    @property
    def copy_share(self) -> float:
        return min(self.copy_ms / self.timed_median_ms, 1.0) if self.timed_median_ms else 0.0


def host_time(run: dict) -> HostTime:
    calls = _steady(run["nsys"]["calls"])
    busy = [c.get("gpu_busy_ns") or 0 for c in calls]
    copies = [(c.get("gpu_memcpy_h2d_ns") or 0) + (c.get("gpu_memcpy_d2h_ns") or 0) for c in calls]
    t = run["timing"]
    median = t["median_ms"]
    busy_ms = statistics.median(busy) / 1e6
    traced_wall_ms = statistics.median([c.get("wall_ns") or 0 for c in calls]) / 1e6
    spread = [t.get("iqr_ms", 0.0) / median if median else 0.0,
              abs(traced_wall_ms - median) / median if median else 0.0,
              (run.get("sampling") or {}).get("median_rel_halfwidth") or 0.0,
              (max(busy) - min(busy)) / 1e6 / median if median and len(busy) > 1 else 0.0]
    return HostTime(median, busy_ms, statistics.median(copies) / 1e6, max([MIN_NOISE_SHARE, *spread]))


# --- matching nsys kernels to ncu launches ------------------------------------------------------

def pool_of(runs: Iterable[dict]) -> list[tuple[str, Sequence[dict]]]:
    """The ncu launch records of a recipe's runs at one size, by variant."""
    return [(r["variant"], r["ncu"]) for r in runs if r.get("ncu")]


def launches_by_kernel(pool: Iterable[tuple[str, Sequence[dict]]]) -> dict[str, list[tuple[str, dict]]]:
    """``pool``: (variant, its ncu launch records) pairs -> kernel key -> [(variant, launch)]."""
    out: dict[str, list[tuple[str, dict]]] = {}
    for variant, launches in pool:
        for launch in launches or []:
            out.setdefault(kernel_key(launch["kernel_name"]), []).append((variant, launch))
    return out


def _preferred(variant: str, found: list[tuple[str, dict]], rank: dict[str, float]) -> list[tuple[str, dict]]:
    """The launches of the step's own profile if it has one, else of the profiled variant that runs
    the most of the step's kernel time (``rank``): the closest twin (``agg_all`` for ``agg_all_pool``)."""
    own = [x for x in found if x[0] == variant]
    if own or not found:
        return own
    order = [x[0] for x in found]
    best = max(set(order), key=lambda v: (rank.get(v, 0.0), variant.startswith(v), -order.index(v)))
    return [x for x in found if x[0] == best]


def _shape(launch: dict) -> tuple[int, int]:
    m = launch["metrics"]
    return int(m.get("launch__grid_size") or 0), int(m.get("launch__block_size") or 0)


def _launch_ns(launch: dict) -> float:
    return float(launch["metrics"].get("gpu__time_duration.sum") or 0.0)


def step_kernels(run: dict, by_kernel: dict[str, list[tuple[str, dict]]]) -> list[dict]:
    """The step's kernels (nsys, compute ranges) with their ncu launches: per kernel its time per
    steady call and the matching launches, the step's own profile first, else another variant's.
    A variant's launches match when they cover every launch shape (grid, block) the step ran the
    kernel with and, for a kernel of one shape whose profiled launches take at least
    LAUNCH_TIME_MIN_NS, their mean time is within LAUNCH_TIME_FACTOR of the step's mean launch time:
    a kernel name reused at another shape, or the same shape over a chunk of the data, is other work."""
    n_calls = len(run["nsys"]["calls"]) or 1
    shapes: dict[str, set] = {}
    for s in run["nsys"].get("compute_launch_shapes") or []:
        shapes.setdefault(kernel_key(s["name"]), set()).add((s["grid_blocks"], s["block_threads"]))
    matched = []
    rank: dict[str, float] = {}
    for k in run["nsys"]["compute_kernels"]:
        key = kernel_key(k["name"])
        want = shapes.get(key, set())
        found = list(by_kernel.get(key, []))
        step_mean_ns = k["total_ns"] / k["count"] if k.get("count") else None

        def matches(v: str) -> bool:
            mine = [x for w, x in found if w == v]
            if want and not want <= {_shape(x) for x in mine}:
                return False
            times = [t for x in mine if (t := _launch_ns(x))]
            if len(want) <= 1 and step_mean_ns and times and statistics.mean(times) >= LAUNCH_TIME_MIN_NS:
                ratio = step_mean_ns / statistics.mean(times)
                return 1 / LAUNCH_TIME_FACTOR <= ratio <= LAUNCH_TIME_FACTOR
            return True

        ok = {v for v in {v for v, _ in found} if matches(v)}
        found = [(v, launch) for v, launch in found if v in ok]
        for v in ok:
            rank[v] = rank.get(v, 0.0) + k["total_ns"]
        matched.append((k, found))
    return [{"name": k["name"], "per_call": k["count"] / n_calls, "ns_per_call": k["total_ns"] / n_calls,
             "launches": _preferred(run["variant"], found, rank)} for k, found in matched]


# --- one step ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class StepLimiter:
    """What limits one step's steady compute call, measured."""
    kind: Kind
    unit: Unit | None
    share: float  # of the timed call (host link, host) or of the kernel time (kernel limiters)
    detail: str
    kernel: LaunchLimiter | None = None  # the limiter of the kernel that holds the most of the time
    kernel_name: str = ""  # that kernel's name (nsys)
    ncu_variants: tuple[str, ...] = ()  # whose ncu profiles the kernel limiter rests on
    floor_ns: float | None = None  # the time per call the limiter needs at its peak; None: no floor
    floor_what: str = ""  # what the floor is, or why there is none, in words
    floor_covered_share: float = 0.0  # share of kernel time whose kernels have a floor
    borderline: bool = False  # the host/device decision sits within the noise of its threshold
    host: HostTime | None = None
    #: without counters (analysis.model.no_counters): what the trace and declared work reach, in words
    #: ("device memory-bound", "grid under one wave"); "" when they reach nothing
    evidence: str = ""
    source: str = ""  # what the limiter rests on, in words (set by the report model)
    advice: str = ""  # the next thing to try (analysis.model.limiter.advice, set by the report model)

    @property
    def floor_ms(self) -> float | None:
        return self.floor_ns / 1e6 if self.floor_ns else None

    @property
    def what(self) -> str:
        return self.label()

    @property
    def pct_of_peak(self) -> float | None:
        return self.kernel.pct_of_peak if self.kernel is not None else None

    def label(self) -> str:
        if self.kernel is not None:
            text = self.kernel.label()
        elif self.kind is Kind.HOST_LINK:
            text = f"host link ({self.share:.0%} of the call in copies)"
        elif self.kind is Kind.LAUNCH_HOST:
            text = f"launch/host (GPU idle {self.share:.0%} of the call)"
        elif self.kind is Kind.NO_COUNTERS:
            text = "evidence-limited" + (f": {self.evidence}" if self.evidence else "")
        else:
            text = str(self.kind) + (f": {self.unit}" if self.unit else "")
        return text + (" — borderline host/device" if self.borderline else "")


def _link_floor_ns(run: dict, ceilings: dict | None) -> tuple[float, str] | None:
    """The call's declared host-link bytes at the measured pinned rates (the two directions overlap)."""
    if not ceilings:
        return None

    try:
        fl = floors.floor(run["work"], ceilings)
    except ValueError:
        return None
    links = [t for t in fl.terms if t.resource in ("host-to-device link", "device-to-host link")]
    if not links:
        return None
    t = max(links, key=lambda t: t.ms)
    return t.ms * 1e6, f"the call's {t.resource} bytes at the {t.rate_name}"


def _kernel_part(rows: Sequence[dict]) -> tuple[dict, dict, list[str], float, float]:
    """(kind, unit) -> ns per call; (kind, unit) -> (limiter, kernel name) of the hottest kernel; the
    variants profiled; the bound kernels' floor per call; the kernel time that floor covers."""
    weights: dict[tuple, float] = {}
    hottest: dict[tuple, tuple[float, LaunchLimiter | None, str]] = {}
    variants: list[str] = []
    floor_ns = covered = 0.0
    for r in rows:
        lims = [(v, lim) for v, launch in r["launches"] if (lim := classify_launch(launch["metrics"])) is not None]
        if not lims:
            key, lim = (Kind.NOT_PROFILED, None), None
        else:
            variants.append(lims[0][0])
            lim = lims[0][1]
            key = (lim.kind, lim.unit)
            if lim.floor_ratio:
                floor_ns += r["ns_per_call"] / lim.floor_ratio
                covered += r["ns_per_call"]
        weights[key] = weights.get(key, 0.0) + r["ns_per_call"]
        if key not in hottest or r["ns_per_call"] > hottest[key][0]:
            hottest[key] = (r["ns_per_call"], lim, r["name"])
    return weights, {k: v[1:] for k, v in hottest.items()}, list(dict.fromkeys(variants)), floor_ns, covered


def step_limiter(run: dict, pool: Iterable[tuple[str, Sequence[dict]]], ceilings: dict | None = None
                 ) -> StepLimiter:
    """``run``: a run summary; ``pool``: (variant, ncu launch records) of the recipe at this size;
    ``ceilings``: ceilings.json's mapping, for the host-link floor."""
    ht = host_time(run)
    link = _link_floor_ns(run, ceilings)
    rows = step_kernels(run, launches_by_kernel(pool))
    total = sum(r["ns_per_call"] for r in rows)
    weights, hottest, variants, kfloor_ns, covered = _kernel_part(rows)
    borderline = False
    decisions = ((ht.copy_share, HOST_LINK_SHARE, Kind.HOST_LINK), (ht.idle_share, HOST_SHARE, Kind.LAUNCH_HOST))
    for share, line, kind in decisions:
        # the shares are 1 - busy/median and copies/median: a relative error e of the median moves
        # them by (1 - share)·e and share·e
        band = ht.noise_share * (share if kind is Kind.HOST_LINK else 1.0 - share)
        if abs(share - line) <= band:
            borderline = True
            continue
        if share >= line:
            if kind is Kind.HOST_LINK:
                floor_ns, what = max(link or (0.0, ""), (kfloor_ns, "the kernels' floor (ncu)"), key=lambda x: x[0])
                return StepLimiter(kind, Unit.HOST_LINK, share, (
                    f"host-device copies {ht.copy_ms:.3g} ms per call (summed over overlapping copies, nsys) in a "
                    f"{ht.timed_median_ms:.3g} ms call (timed median)"), floor_ns=floor_ns or None,
                    floor_what=what if floor_ns else "no declared host-link bytes", host=ht)
            syncs = fastest_steady_call(run["nsys"]["calls"]).get("sync_calls") or 0
            return StepLimiter(kind, Unit.HOST, share, (
                f"GPU busy {ht.gpu_busy_ms:.3g} ms (nsys) of a {ht.timed_median_ms:.3g} ms call (timed median): "
                f"idle {ht.idle_ms:.3g} ms, {share:.0%}; {syncs:.0f} synchronize calls per call"),
                floor_what="the host sets the time: no device floor", host=ht)
    if not total or not weights:
        return StepLimiter(Kind.NOT_PROFILED, None, 0.0, "no kernels in the compute ranges", borderline=borderline,
                           floor_what="no kernels", host=ht)
    (kind, unit), ns = max(weights.items(), key=lambda kv: kv[1])
    share = ns / total
    if kind is Kind.NOT_PROFILED:
        top = max((r for r in rows if not r["launches"]), key=lambda r: r["ns_per_call"])
        return StepLimiter(Kind.NOT_PROFILED, None, share, (
            f"{share:.0%} of kernel time in kernels Nsight Compute did not profile at this size, shape and "
            f"per-launch time, most in `{kernel_key(top['name'])[:60]}`"), borderline=borderline,
            floor_what="no kernel of the step was profiled", host=ht)
    lim, kernel = hottest[(kind, unit)]
    detail = f"{share:.0%} of kernel time; `{kernel_key(kernel)[:60]}`: {lim.detail}"
    if kind is Kind.LATENCY:
        floor = (link[0], link[1]) if link else (None, "latency-bound: no unit near its peak")
        return StepLimiter(kind, None, share, detail, lim, kernel, tuple(variants), floor[0], floor[1],
                           0.0, borderline, ht)
    what = ("each kernel's limiting unit at its peak (ncu)" if covered / total >= COVERAGE_COMPLETE else
            f"each bound kernel's limiting unit at its peak (ncu; {covered / total:.0%} of kernel time, the rest "
            "latency-bound or not profiled, counted as free)")
    floor_ns, what = max(link or (0.0, ""), (kfloor_ns, what), key=lambda x: x[0])
    return StepLimiter(kind, unit, share, detail, lim, kernel, tuple(variants), floor_ns or None, what,
                       covered / total, borderline, ht)


def step_class(summary: dict, pool: Iterable[tuple[str, Sequence[dict]]] = ()) -> tuple[Kind, Unit | None]:
    """A step's (kind, unit), for callers that compare steps (analysis.model.compare, analysis.report.cross_gpu):
    ``summary`` a run summary, ``pool`` the recipe's ncu launches at that size (its own if empty)."""
    step = step_limiter(summary, list(pool) or pool_of([summary]))
    return step.kind, step.unit
