"""What a run shows when Nsight Compute may not read the GPU's performance counters.

Where counters are refused (``ERR_NVGPUCTRPERM``) or switched off (``--config ncu=none``), the
pipeline still times every step and traces it under nsys. This module turns what needs no
counters into evidence, each number labelled with where it comes from:

- measured without counters: kernel durations, launch configuration (grid, block), registers per
  thread and shared memory per block, which CUPTI records for every launch in the nsys trace
  (:meth:`analysis.readers.nsys.trace.Trace.kernel_launch_resources`);
- derived without counters: theoretical occupancy from those resources and the device's per-SM
  limits (the trace's TARGET_INFO_GPU table), waves per SM, and the effective bandwidth and FLOP
  rate of the declared work over the measured median, against the suite's measured reference
  rates (ceilings.json);
- not available: whatever needs counters (achieved occupancy, pipe and memory-level utilisation,
  DRAM bytes, executed FLOPs, stall reasons, ncu's rules): listed as skipped, never dropped.

The limiter is stated only as far as that evidence reaches: "at 92% of the measured
device-to-device copy rate: device memory-bound" is sound without counters; a pipe's utilisation
is not.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from analysis.model import floors, limiter
from analysis.model.limiter.advice import next_move

#: how each number in a no-counters report is labelled
MEASURED_COUNTERS = "measured (counters)"
MEASURED_TRACE = "measured without counters (nsys/CUPTI trace)"
DERIVED = "derived without counters"
NOT_AVAILABLE = "not available (needs counters)"

#: Architecture constants of the occupancy calculation, the same on every GPU since Volta (sm_70),
#: which the trace's device table does not carry: registers are allocated per warp in units of 256,
#: each of the SM's 4 sub-partitions holds a quarter of the register file, and (since sm_80) the
#: driver reserves 1 KB of shared memory per resident block.
REGISTER_ALLOCATION_UNIT = 256
SM_SUB_PARTITIONS = 4
RESERVED_SHARED_BYTES_PER_BLOCK = 1024

UNDER_ONE_WAVE = "grid under one wave"
#: analysis.model.floors resources -> the unit a step bound on them is bound by
RESOURCE_UNITS = {"device memory": limiter.Unit.DRAM, "host-to-device link": limiter.Unit.HOST_LINK,
                  "device-to-host link": limiter.Unit.HOST_LINK, "FP64 arithmetic": limiter.Unit.FP64,
                  "FP32 arithmetic": limiter.Unit.FMA, "16-bit tensor-core matmul": limiter.Unit.TENSOR_FP16,
                  "TF32 tensor-core matmul": limiter.Unit.TENSOR_TF32}

#: a step whose declared work runs at or above this share of a measured reference rate is called
#: bound by that resource (the rates are measurements with a few percent of spread)
BOUND_SHARE = 0.8

#: what the report would show with counters, and where it would come from: listed as skipped
NEEDS_COUNTERS = (
    ("per-kernel limiter (SM pipe or memory level at % of peak)", "ncu speed-of-light and pipe metrics"),
    ("DRAM, L2 and L1 bytes and executed FLOPs per kernel (declared vs measured work)",
     "ncu memory and instruction counters"),
    ("achieved occupancy and warp stall reasons", "ncu occupancy and warp-state sections"),
    ("ncu's rule findings and estimated speedups", "ncu's guided analysis"),
    ("hierarchical roofline points", "ncu's roofline sections"),
    ("finding `low_throughput` (SM and memory both under a share of peak)", "ncu throughput metrics"),
)


@dataclasses.dataclass(frozen=True)
class Occupancy:
    """Theoretical occupancy of one launch configuration on one device (no counters)."""

    warps_per_block: int
    blocks_limit: dict[str, int]  # resource -> resident blocks per SM it allows
    blocks_per_sm: int
    pct: float  # resident warps over the SM's maximum, in percent

    @property
    def limited_by(self) -> tuple[str, ...]:
        return tuple(k for k, v in self.blocks_limit.items() if v == self.blocks_per_sm)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def theoretical_occupancy(kernel: dict, device: dict) -> Occupancy:
    """``kernel``: one row of ``kernel_launch_resources``; ``device``: its ``device``. The same
    calculation as CUDA's occupancy calculator: resident blocks per SM limited by warps, blocks,
    registers (allocated per warp, per sub-partition) and shared memory (the launch's carveout)."""
    warp = device["threads_per_warp"]
    threads = kernel["block"][0] * kernel["block"][1] * kernel["block"][2]
    warps_per_block = _ceil_div(threads, warp)
    limits = {"warps": device["max_warps_per_sm"] // warps_per_block, "blocks": device["max_blocks_per_sm"]}
    regs = kernel["registers_per_thread"] or 0
    if regs:
        regs_per_warp = _ceil_div(regs * warp, REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
        warps = (device["max_registers_per_sm"] // SM_SUB_PARTITIONS // regs_per_warp) * SM_SUB_PARTITIONS
        limits["registers"] = warps // warps_per_block
    else:
        limits["registers"] = device["max_blocks_per_sm"]
    reserved = RESERVED_SHARED_BYTES_PER_BLOCK if (device.get("compute_major") or 0) >= 8 else 0
    shared = (kernel["static_shared_bytes"] or 0) + (kernel["dynamic_shared_bytes"] or 0) + reserved
    capacity = kernel.get("shared_config_bytes") or device["max_shared_bytes_per_sm"]
    limits["shared memory"] = min(capacity // shared, device["max_blocks_per_sm"]) if shared else \
        device["max_blocks_per_sm"]
    blocks = min(limits.values())
    return Occupancy(warps_per_block, limits, blocks, 100.0 * blocks * warps_per_block / device["max_warps_per_sm"])


def kernel_evidence(resources: dict, nsys: dict) -> list[dict]:
    """The compute ranges' kernels (``nsys``: a run summary's nsys record) with what the trace says
    about each launch configuration: per (kernel, grid, block) the registers, shared memory, and the
    derived theoretical occupancy and waves per SM (None where the device's limits are missing)."""
    device = resources["device"]
    shapes = {(s["name"], s["grid_blocks"], s["block_threads"]) for s in nsys.get("compute_launch_shapes") or []}
    n_calls = len(nsys["calls"]) or 1
    out = []
    for k in resources["kernels"]:
        grid = k["grid"][0] * k["grid"][1] * k["grid"][2]
        block = k["block"][0] * k["block"][1] * k["block"][2]
        if (k["name"], grid, block) not in shapes:
            continue
        occ = theoretical_occupancy(k, device) if device else None
        waves = grid / (device["sm_count"] * occ.blocks_per_sm) if occ and occ.blocks_per_sm else None
        out.append({
            "name": k["name"], "grid": k["grid"], "block": k["block"], "grid_blocks": grid, "block_threads": block,
            "registers_per_thread": k["registers_per_thread"],
            "shared_bytes_per_block": (k["static_shared_bytes"] or 0) + (k["dynamic_shared_bytes"] or 0),
            "local_bytes_per_thread": k["local_bytes_per_thread"],
            "launches": k["launches"], "total_ns": k["total_ns"],
            "theoretical_occupancy_pct": occ.pct if occ else None,
            "occupancy_limited_by": list(occ.limited_by) if occ else None,
            "blocks_per_sm": occ.blocks_per_sm if occ else None,
            "waves_per_sm": waves,
            "launches_per_call": k["launches"] / n_calls,
        })
    return out


def recipe_has_counters(by_size: dict[int, Sequence[dict]]) -> bool:
    """Whether any run of the recipe has an ncu profile: without one the recipe ran without counters."""
    return any(r.get("ncu") for runs in by_size.values() for r in runs)


def step_limiter(run: dict, ceilings: dict) -> limiter.StepLimiter:
    """What limits a step as far as the evidence without counters reaches: the trace's measured
    shares (host link, idle GPU: as with counters), else the declared work's effective rate against
    the measured reference rates; below every rate the cause is named as needing counters."""
    step = limiter.step_limiter(run, [])
    if step.kind in (limiter.Kind.HOST_LINK, limiter.Kind.LAUNCH_HOST):
        return step
    median_ms = run["timing"]["median_ms"]
    try:
        fl = floors.floor(run["work"], ceilings)
    except ValueError:
        return limiter.StepLimiter(limiter.Kind.NO_COUNTERS, None, 0.0,
                                   "no measured reference rate matches the declared work; the kernels' limiter "
                                   f"is {NOT_AVAILABLE}")
    shares = sorted(((t.ms / median_ms, t) for t in fl.terms), key=lambda x: -x[0])
    share, term = shares[0]
    rates = "; ".join(f"{s:.0%} of the {t.rate_name}" for s, t in shares)
    if share >= BOUND_SHARE:
        return limiter.StepLimiter(limiter.Kind.NO_COUNTERS, RESOURCE_UNITS.get(term.resource), share,
                                   f"declared work over the median runs at {rates} ({DERIVED})",
                                   evidence=f"{term.resource}-bound")
    # a main kernel whose grid does not fill the GPU once leaves SMs idle, whatever the counters say
    kernels = run.get("counter_free") or []
    main = max(kernels, key=lambda k: k["total_ns"], default=None)
    if main is not None and main["waves_per_sm"] is not None and main["waves_per_sm"] < 1:
        total = sum(k["total_ns"] for k in kernels)
        return limiter.StepLimiter(
            limiter.Kind.NO_COUNTERS, None, main["total_ns"] / total if total else 0.0,
            f"its main kernel `{limiter.kernel_key(main['name'])[:60]}` launches {main['grid_blocks']} block(s) of "
            f"{main['block_threads']} threads: {main['waves_per_sm']:.2g} waves on the GPU's SMs ({DERIVED}); "
            f"declared work runs at {rates}", evidence=UNDER_ONE_WAVE)
    return limiter.StepLimiter(limiter.Kind.NO_COUNTERS, None, share,
                               f"declared work over the median runs at {rates} ({DERIVED}): below every "
                               f"measured rate; whether latency, occupancy or an SM pipe limits it is {NOT_AVAILABLE}")


# --- report lines -----------------------------------------------------------------------------

def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0f}%"


def coverage_line(preflight: dict | None = None) -> str:
    """The line that replaces ncu's coverage line in a report of a recipe without counters."""
    why = ""
    counters = (preflight or {}).get("counters") or {}
    if counters.get("reason"):
        why = f" ({counters['reason']})"
    return ("**No performance counters**: no variant ran under Nsight Compute" + why + ". The timings and every "
            f"nsys table are *{MEASURED_TRACE}*; the sections \"Without counters\" label each number *{MEASURED_TRACE}*, "
            f"*{DERIVED}* (`analysis/model/no_counters.py`) or *{NOT_AVAILABLE}*; the limiter goes only as far as that "
            "evidence reaches (\"evidence-limited\"), and what counters would add is listed under \"Needs counters\".")


def limiter_lines(runs: Sequence[dict], ceilings: dict) -> list[str]:
    """One bullet per step: its limiter as far as the evidence reaches, and the next move."""
    lines = []
    for r in runs:
        step = step_limiter(r, ceilings)
        source = MEASURED_TRACE if step.kind is not limiter.Kind.NO_COUNTERS else DERIVED
        lines.append(f"- `{r['variant']}` — **{step.label()}** ({source}): {step.detail}. "
                     f"*Next:* {next_move(step)}")
    return lines


def rate_table(runs: Sequence[dict], ceilings: dict) -> str:
    """Effective bandwidth and FLOP rate of the declared work over the median, against the
    measured reference rates (derived without counters), beside what only counters give."""
    from analysis.report.markdown import table  # the report's table helper; imported late (markdown imports us)

    rows = []
    for r in runs:
        median_ms = r["timing"]["median_ms"]
        try:
            terms = floors.floor(r["work"], ceilings).terms
        except ValueError:
            terms = ()
        shares = "; ".join(f"{t.resource}: {t.ms / median_ms:.0%}" for t in terms) or "n/a"
        rows.append((f"`{r['variant']}`", f"{median_ms:.3f}", f"{r['achieved_gb_per_s']:.0f}",
                     f"{r['achieved_gflop_per_s']:.3g}", shares, "n/a", "n/a"))
    return table(("variant", f"median ms ({MEASURED_TRACE.split(' (')[0]}, CUDA events)",
                  f"effective GB/s ({DERIVED}: declared bytes / median)",
                  f"effective GFLOP/s ({DERIVED}: declared FLOPs / median)",
                  f"share of the measured reference rate ({DERIVED})",
                  f"DRAM GB/s ({NOT_AVAILABLE})", f"executed FLOPs ({NOT_AVAILABLE})"), rows)


def kernel_table(runs: Sequence[dict]) -> str | None:
    from analysis.report.markdown import table

    rows = []
    for r in runs:
        for k in r.get("counter_free") or []:
            limited = ", ".join(k["occupancy_limited_by"] or []) or "n/a"
            rows.append((f"`{r['variant']}`", f"`{limiter.kernel_key(k['name'])[:60]}`",
                         f"{k['total_ns'] / k['launches'] / 1e3:.1f}",
                         f"({k['grid'][0]}, {k['grid'][1]}, {k['grid'][2]})",
                         f"({k['block'][0]}, {k['block'][1]}, {k['block'][2]})", k["registers_per_thread"],
                         k["shared_bytes_per_block"], _pct(k["theoretical_occupancy_pct"]), limited,
                         "n/a" if k["waves_per_sm"] is None else f"{k['waves_per_sm']:.3g}", "n/a"))
    if not rows:
        return None
    return table(("variant", "kernel", "avg µs (trace)", "grid (trace)", "block (trace)", "registers/thread (trace)",
                  "shared B/block (trace)", f"theoretical occupancy ({DERIVED})", f"limited by ({DERIVED})",
                  f"waves per SM ({DERIVED})", f"achieved occupancy ({NOT_AVAILABLE})"), rows)


def needs_counters_lines() -> list[str]:
    return [f"- {what} — {NOT_AVAILABLE}: {source}" for what, source in NEEDS_COUNTERS]


def size_section(runs: Sequence[dict], ceilings: dict, size: int) -> list[str]:
    """The no-counters evidence of one size: rates, per-kernel resources and occupancy, and the
    list of what needs counters (with the fix that would give them)."""
    lines = [f"### Without counters, size {size}", "",
             "Effective rates of the declared work (a step at or above "
             f"{BOUND_SHARE:.0%} of a measured reference rate is bound by that resource):", "",
             rate_table(runs, ceilings), ""]
    kernels = kernel_table(runs)
    if kernels:
        lines += ["Launch configuration and resources per kernel (CUPTI records them in the nsys trace for every "
                  "launch; theoretical occupancy from them and the device's per-SM limits in the trace):", "",
                  kernels, ""]
    else:
        lines += [f"Launch resources per kernel: {NOT_AVAILABLE} (the trace has no device limits)", ""]
    lines += [f"### Needs counters, size {size}", "",
              "Skipped, not dropped: with Nsight Compute allowed to read counters (the driver option "
              "`NVreg_RestrictProfilingToAdminUsers=0`, or profiling as an administrator) the report adds:", "",
              *needs_counters_lines(), ""]
    return lines
