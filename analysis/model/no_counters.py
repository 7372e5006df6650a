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
