"""What limits one kernel launch, from Nsight Compute's speed-of-light breakdown.

A launch is **compute-bound** or **memory-bound** when its SM or its memory throughput is at or above
:data:`BOUND_PCT` of peak (ncu's own SOLBottleneck line), whichever is higher; else it is
**latency-bound**. The unit of a compute-bound launch is the top entry of the SM breakdown, the
issue slots (``sm__issue_active``) being one entry like each pipe; of a memory-bound one, the
deepest memory level at or above the line. A bound launch's floor ratio is 100 / the unit's share
of peak (the time it would take with that unit at its peak); a latency-bound launch has no floor and
names what is known instead: occupancy achieved against theoretical and what caps it, waves per SM
and the fill of the last one, and the warp stall reasons when the report holds them.
"""
from __future__ import annotations

import dataclasses
import enum
import math

from analysis.readers import ncu_metrics as M

#: A unit at or above this share of its peak is what the kernel's time is spent on: the line ncu's
#: SOLBottleneck rule draws between high and low utilization.
BOUND_PCT = 60.0

#: A grid under this many waves leaves SMs without blocks for the whole launch.
WAVES_MIN = 1.0

#: Achieved occupancy this many points under theoretical is a gap of its own (imbalance, a partial
#: last wave), beyond run-to-run noise of the counter.
OCCUPANCY_GAP_POINTS = 10.0

#: The SM throughput above every breakdown entry this catalog reads by more than this many points
#: means another entry (one the catalog does not name) is the top one: the unit says so.
SM_OTHER_POINTS = 5.0

#: stall reasons named for a latency-bound launch: the largest ones, at most this many
STALLS_NAMED = 3


class Kind(enum.StrEnum):
    """What kind of limit sets a launch's or a step's time."""
    COMPUTE = "compute"
    MEMORY = "memory"
    LATENCY = "latency"
    HOST_LINK = "host link"
    LAUNCH_HOST = "launch/host"
    NO_COUNTERS = "no counters"
    NOT_PROFILED = "not profiled"


class Unit(enum.StrEnum):
    """The unit at its limit (the value is how pages name it)."""
    ISSUE = "issue slots"
    FP64 = "FP64 pipe"
    FMA = "FMA (FP32) pipe"
    ALU = "ALU (integer, logic) pipe"
    LSU = "load/store pipe"
    XU = "XU (special functions) pipe"
    TENSOR = "tensor pipe"
    TENSOR_BF16 = "tensor pipe (BF16)"
    TENSOR_FP16 = "tensor pipe (FP16)"
    TENSOR_TF32 = "tensor pipe (TF32)"
    TENSOR_FP64 = "tensor pipe (FP64)"
    SM_OTHER = "SM (a breakdown entry not in the catalog)"
    DRAM = "DRAM"
    L2 = "L2"
    L1 = "L1/shared"
    HOST_LINK = "host link"
    HOST = "host"

    @property
    def is_tensor(self) -> bool:
        return self.name.startswith("TENSOR")

    @property
    def is_memory(self) -> bool:
        return self in (Unit.DRAM, Unit.L2, Unit.L1)


_PIPE_UNITS = {"FP64": Unit.FP64, "FMA": Unit.FMA, "TENSOR": Unit.TENSOR, "ALU": Unit.ALU, "LSU": Unit.LSU,
               "XU": Unit.XU}
_LEVEL_UNITS = {"DRAM": Unit.DRAM, "L2": Unit.L2, "L1/shared": Unit.L1}
_TENSOR_UNITS = {"BF16": Unit.TENSOR_BF16, "FP16": Unit.TENSOR_FP16, "TF32": Unit.TENSOR_TF32,
                 "FP64 tensor": Unit.TENSOR_FP64}


@dataclasses.dataclass(frozen=True)
class LaunchLimiter:
    """What limits one launch, measured."""
    kind: Kind
    unit: Unit | None  # None for a latency-bound launch
    pct_of_peak: float | None  # the unit's share of its peak; None when latency-bound
    floor_ratio: float | None  # 100 / pct_of_peak: time over the unit's floor; None when latency-bound
    sm_pct: float
    memory_pct: float
    issue_pct: float | None
    occupancy_achieved_pct: float | None
    occupancy_theoretical_pct: float | None
    occupancy_limiter: str | None  # the launch resource capping theoretical occupancy under 100%
    waves_per_sm: float | None
    last_wave_fill: float | None  # share of SM slots the last (partial) wave fills; 1.0 for whole waves
    stall_reasons: tuple[tuple[str, float], ...] = ()  # (reason, warps stalled per issue), largest first
    reasons: tuple[str, ...] = ()  # latency: what is known, in words, main first
    detail: str = ""  # the numbers, in words

    def label(self) -> str:
        if self.kind is Kind.LATENCY:
            return "latency-bound: " + "; ".join(self.reasons) if self.reasons else "latency-bound"
        return f"{self.kind}: {self.unit} ({self.pct_of_peak:.0f}% of peak)"


def _get(m: dict, key: str) -> float | None:
    v = m.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def tensor_precision(m: dict) -> str | None:
    """The input precision of the launch's tensor-core work (the one with the most operations)."""
    ops = [(ops, name) for name, key, _ in M.TENSOR_PRECISIONS if (ops := _get(m, key))]
    return max(ops)[1] if ops else None


def occupancy_limiter(m: dict) -> str | None:
    """The launch resource(s) capping theoretical occupancy, when it is under 100%."""
    theo = _get(m, M.OCC_THEORETICAL)
    limits = [(v, name) for name, key in M.OCC_LIMITS if (v := _get(m, key)) is not None]
    if theo is None or theo >= 100.0 or not limits:
        return None
    blocks = min(v for v, _ in limits)
    return " and ".join(name for v, name in limits if v == blocks)


def last_wave_fill(waves: float | None) -> float | None:
    if waves is None or waves <= 0:
        return None
    frac = waves - math.floor(waves)
    return 1.0 if frac < 1e-6 else frac


def stall_reasons(m: dict) -> tuple[tuple[str, float], ...]:
    """Warps stalled per issued instruction by reason, largest first (``selected``, the issuing warp
    itself, left out); () when the report holds no warp-state metrics."""
    rows = [(r, v) for r in M.STALL_REASONS if r != "selected" and (v := _get(m, M.stall_metric(r)))]
    return tuple(sorted(rows, key=lambda rv: -rv[1]))


def latency_reasons(m: dict) -> tuple[str, ...]:
    """What is known about a latency-bound launch, main first: a grid under one wave, the resource
    capping theoretical occupancy, a gap between achieved and theoretical occupancy (with the
    partial last wave where there are few waves), and the largest stall reasons."""
    out = []
    waves = _get(m, M.WAVES)
    grid, sms = int(m.get("launch__grid_size") or 0), int(m.get("launch__sm_count") or 0)
    if waves is not None and waves < WAVES_MIN:
        out.append(f"grid under one wave ({grid} block{'' if grid == 1 else 's'} on {sms} SMs, {waves:.2f} waves)")
    theo, achieved = _get(m, M.OCC_THEORETICAL), _get(m, M.OCC_ACHIEVED)
    cap = occupancy_limiter(m)
    if cap:
        what = (f"{int(m['launch__registers_per_thread'])} registers per thread"
                if cap.startswith("registers") and m.get("launch__registers_per_thread") else
                f"{min(v for _, k in M.OCC_LIMITS if (v := _get(m, k)) is not None):g} blocks per SM")
        out.append(f"{cap} ({what}: theoretical occupancy {theo:.0f}%)")
    if achieved is not None and theo is not None and achieved < theo - OCCUPANCY_GAP_POINTS:
        gap = f"achieved occupancy {achieved:.0f}% of a possible {theo:.0f}%"
        fill = last_wave_fill(waves)
        if waves is not None and waves >= WAVES_MIN and waves < 4 and fill is not None and fill < 1.0:
            gap += f" ({waves:.2f} waves: the last one {fill:.0%} full)"
        out.append(gap)
    stalls = stall_reasons(m)[:STALLS_NAMED]
    if stalls:
        out.append("warps stalled most on " + ", ".join(f"{r.replace('_', ' ')} ({v:.1f})" for r, v in stalls))
    return tuple(out)


def _first_of_each(m: dict, names: tuple[tuple[str, str], ...]) -> list[tuple[str, float]]:
    """One value per breakdown entry: the first of its metric names the launch holds, in catalog order."""
    found: dict[str, float] = {}
    for name, key in names:
        if name not in found and (v := _get(m, key)) is not None:
            found[name] = v
    return list(found.items())


def classify_launch(m: dict) -> LaunchLimiter | None:
    """The launch's limiter from its metrics dict; None when it lacks the speed-of-light metrics."""
    sm = _get(m, M.SOL["sm"])
    levels = _first_of_each(m, M.MEMORY_LEVELS)
    mem = _get(m, M.SOL["memory"])
    if sm is None or (mem is None and not levels):
        return None
    mem = max([v for _, v in levels] + ([mem] if mem is not None else []))
    # a level known only over active cycles (L1 in --set basic) names the unit, never the kind: a
    # share of a few active cycles is no share of the launch's time
    levels = _first_of_each(m, M.MEMORY_LEVELS + M.MEMORY_FALLBACKS)
    issue = _get(m, M.ISSUE)
    theo, achieved = _get(m, M.OCC_THEORETICAL), _get(m, M.OCC_ACHIEVED)
    waves = _get(m, M.WAVES)
    numbers = (f"SM {sm:.0f}%" + (f" (issue slots {issue:.0f}%)" if issue is not None else "") + ", "
               + ", ".join(f"{n} {v:.0f}%" for n, v in levels)
               + (f", achieved occupancy {achieved:.0f}%" if achieved is not None else ""))
    common = dict(sm_pct=sm, memory_pct=mem, issue_pct=issue, occupancy_achieved_pct=achieved,
                  occupancy_theoretical_pct=theo, occupancy_limiter=occupancy_limiter(m), waves_per_sm=waves,
                  last_wave_fill=last_wave_fill(waves), stall_reasons=stall_reasons(m), detail=numbers)
    if max(sm, mem) < BOUND_PCT:
        return LaunchLimiter(Kind.LATENCY, None, None, None, reasons=latency_reasons(m) or (
            "neither SM nor memory near its peak, occupancy at its possible level",), **common)
    if mem >= sm:
        name, pct = next(((n, v) for n, v in levels if v >= BOUND_PCT), max(levels, key=lambda nv: nv[1]))
        return LaunchLimiter(Kind.MEMORY, _LEVEL_UNITS[name], pct, 100.0 / pct, **common)
    entries = [(v, _PIPE_UNITS[name]) for name, v in _first_of_each(m, M.PIPES + M.PIPE_FALLBACKS)]
    if issue is not None:
        entries.append((issue, Unit.ISSUE))
    # the issue slots first on a tie: an SM throughput equal to issue-active is the issue limit
    pct, unit = max(entries, key=lambda e: (e[0], e[1] is Unit.ISSUE)) if entries else (sm, Unit.SM_OTHER)
    if sm > pct + SM_OTHER_POINTS:
        pct, unit = sm, Unit.SM_OTHER
    if unit is Unit.TENSOR:
        unit = _TENSOR_UNITS.get(tensor_precision(m) or "", Unit.TENSOR)
    return LaunchLimiter(Kind.COMPUTE, unit, pct, 100.0 / pct, **common)
