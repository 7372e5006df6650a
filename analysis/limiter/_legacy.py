"""What limits a kernel launch, and a step, from measurement.

A launch is classified from Nsight Compute's speed-of-light and workload-analysis metrics of
``--set full`` (read by :mod:`analysis.ncu` into a metrics dict):

- **memory-bound** at a level (DRAM, L2, L1/shared) when the busiest memory unit is at or above
  :data:`BOUND_PCT` of its peak and busier than the SM;
- **compute-bound** on a pipe (FP64, FMA/FP32, tensor by input precision, ALU, load/store, XU)
  when the SM is at or above :data:`BOUND_PCT` and busier than memory: the pipe named is the
  busiest one, with the issue-slot use beside it;
- **latency/occupancy-bound** when neither is near its peak: the reason is the grid (under one
  wave), the theoretical occupancy's limiter (registers, shared memory, block count) or, with
  occupancy not the cause, latency itself.

A step (one variant's compute call) is classified by :func:`step_limiter`, a pure function of its
run summary (:func:`analysis.run_summary.summarize_run`) and the ncu launches of its recipe: first
from nsys (copy share of the call -> host link; GPU idle share -> launch/host or synchronization),
else from its kernels, weighted by their nsys time. The thresholds are named constants below, each
with its reason.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from typing import Iterable, Sequence

# --- thresholds -------------------------------------------------------------------------------

#: A unit at or above this share of its peak is what the kernel's time is spent on. 60% is the
#: line ncu's own SOLBottleneck rule draws between "high" and "low" utilization: above it a unit
#: runs close to the rate it can sustain for real instruction and access mixes.
BOUND_PCT = 60.0

#: A grid that fills less than this many waves leaves SMs without blocks for the whole launch:
#: no code change inside the kernel fixes that (the same line as analysis.findings.WAVES_MIN).
WAVES_MIN = 1.0

#: Theoretical occupancy below 100% is limited by one launch resource; it is named as the cause
#: when the achieved occupancy is within this many points of it (the warps the SM could hold are
#: the warps it held: the limit, not scheduling, sets occupancy).
OCCUPANCY_AT_LIMIT_POINTS = 10.0

#: Copies over the host link taking at least half of a steady call's wall time set the call's
#: time: the kernels could be infinitely fast and the call would still take that long.
HOST_LINK_SHARE = 0.5

#: The GPU idle for at least half of a steady call's wall time: the host (launches, Python,
#: allocation, waiting) sets the time, not the GPU.
GPU_IDLE_SHARE = 0.5

#: More synchronize calls per compute call than the runner's one, with the GPU idle, make the
#: idle time synchronization-bound (analysis.findings.SYNC_CALLS_PER_COMPUTE_RANGE).
SYNC_CALLS_PER_CALL = 1

#: Declared work (workloads' Work) and measured work (ncu) more than this factor apart are
#: flagged: undercounted transcendentals, hidden temporaries or cache reuse, beyond run-to-run noise.
MISMATCH_FACTOR = 1.5

#: Measured work covers a step when ncu profiled at least this share of its kernel time; below it,
#: measured bytes and FLOPs are lower bounds and only an excess over declared is flagged.
COVERAGE_COMPLETE = 0.95

# --- metric names -----------------------------------------------------------------------------

SOL = {
    "sm": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "memory": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
}
#: memory levels, deepest first: traffic to a deeper level passes through the shallower ones, so
#: the deepest level at its peak is the one named (a cache cannot relieve it)
MEMORY_LEVELS = (
    ("DRAM", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
    ("L2", "lts__throughput.avg.pct_of_peak_sustained_elapsed"),
    ("L1/shared", "l1tex__throughput.avg.pct_of_peak_sustained_elapsed"),
)
#: SM pipes: share of the pipe's peak while the SM was active
PIPES = (
    ("FP64 pipe", "sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_active"),
    ("FMA (FP32) pipe", "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"),
    ("tensor pipe", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"),
    ("ALU (integer, logic) pipe", "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active"),
    ("load/store pipe", "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active"),
    ("XU (special functions) pipe", "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"),
)
ISSUE = "sm__issue_active.avg.pct_of_peak_sustained_elapsed"
OCC_THEORETICAL = "sm__maximum_warps_per_active_cycle_pct"
OCC_ACHIEVED = "sm__warps_active.avg.pct_of_peak_sustained_active"
#: blocks per SM each launch resource allows (ncu's Occupancy section)
OCC_LIMITS = (
    ("registers", "launch__occupancy_limit_registers"),
    ("shared memory", "launch__occupancy_limit_shared_mem"),
    ("block count", "launch__occupancy_limit_blocks"),
    ("warps per SM (block size)", "launch__occupancy_limit_warps"),
)
WAVES = "launch__waves_per_multiprocessor"

#: tensor-core operations by input precision (ncu's hierarchical roofline counts these: an FMA is
#: two operations) and the dense peak per cycle of the fastest path for that precision
TENSOR_PRECISIONS = (
    ("BF16", "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
     ("sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained",
      "sm__ops_path_tensor_op_hmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained")),
    ("FP16", "sm__ops_path_tensor_src_fp16.sum",
     ("sm__ops_path_tensor_op_hgmma_src_fp16_sparsity_off.sum.peak_sustained",
      "sm__ops_path_tensor_op_hmma_src_fp16_dst_fp32_sparsity_off.sum.peak_sustained")),
    ("TF32", "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
     ("sm__ops_path_tensor_op_hgmma_src_tf32_dst_fp32_sparsity_off.sum.peak_sustained",
      "sm__ops_path_tensor_op_hmma_src_tf32_dst_fp32_sparsity_off.sum.peak_sustained")),
    ("FP64 tensor", "sm__ops_path_tensor_src_fp64.sum", ("sm__ops_path_tensor_src_fp64.sum.peak_sustained",)),
)
#: the hierarchical roofline's bytes per level (ncu's SpeedOfLight roofline sections): achieved
#: bytes per second, peak bytes per cycle, and the clock of that level
MEMORY_ROOFLINE = (
    ("DRAM", "dram__bytes.sum.per_second", "dram__bytes.sum.peak_sustained", "dram__cycles_elapsed.avg.per_second"),
    ("L2", "derived__lts__lts2xbar_bytes.sum.per_second", "derived__lts__lts2xbar_bytes.sum.peak_sustained",
     "lts__cycles_elapsed.avg.per_second"),
    ("L1", "derived__l1tex__lsu_writeback_bytes_mem_lgds.sum.per_second",
     "derived__l1tex__lsu_writeback_bytes_mem_lgds.sum.peak_sustained", "l1tex__cycles_elapsed.avg.per_second"),
)
#: scalar FP peaks per cycle (an FMA counts two FLOPs) and the SM clock
FP_PEAKS = (
    ("FP64", "sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained"),
    ("FP32", "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained"),
)
SM_CLOCK = "sm__cycles_elapsed.avg.per_second"

#: every metric this module reads (analysis.ncu reads them into each launch's metrics)
METRICS: tuple[str, ...] = tuple(dict.fromkeys(
    list(SOL.values()) + [m for _, m in MEMORY_LEVELS] + [m for _, m in PIPES]
    + [ISSUE, OCC_THEORETICAL, OCC_ACHIEVED, WAVES, SM_CLOCK] + [m for _, m in OCC_LIMITS]
    + ["launch__registers_per_thread", "launch__shared_mem_per_block", "launch__grid_size", "launch__block_size",
       "launch__sm_count", "gpu__time_duration.sum"]
    + [m for _, m, _ in TENSOR_PRECISIONS] + [p for _, _, ps in TENSOR_PRECISIONS for p in ps]
    + [m for row in MEMORY_ROOFLINE for m in row[1:]] + [m for _, m in FP_PEAKS]))


# --- one launch -------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Limiter:
    """What limits one launch, measured."""

    kind: str  # "memory" | "compute" | "latency"
    unit: str  # "DRAM", "L2", "L1/shared", a pipe ("FP64 pipe", "tensor pipe (BF16)"), or "occupancy"/"latency"
    pct_of_peak: float | None  # the unit's share of its peak (latency: the busiest unit's)
    reasons: tuple[str, ...]  # latency: the occupancy limiters, first the main one
    detail: str  # the numbers, in words

    def label(self) -> str:
        if self.kind == "memory":
            return f"memory: {self.unit} ({self.pct_of_peak:.0f}% of peak)"
        if self.kind == "compute":
            return f"compute: {self.unit} ({self.pct_of_peak:.0f}% of peak)"
        return "latency/occupancy: " + "; ".join(self.reasons) if self.reasons else "latency"


def _get(m: dict, key: str) -> float | None:
    v = m.get(key)
    return float(v) if isinstance(v, (int, float)) else None


def tensor_precision(m: dict) -> str | None:
    """The input precision of the launch's tensor-core work (the one with the most operations)."""
    ops = [(ops, name) for name, key, _ in TENSOR_PRECISIONS if (ops := _get(m, key))]
    return max(ops)[1] if ops else None


def occupancy_reasons(m: dict) -> tuple[str, ...]:
    """What holds the launch's occupancy down, main cause first: a grid under one wave, then the
    launch resource that caps theoretical occupancy (when achieved occupancy sits at that cap)."""
    reasons = []
    waves = _get(m, WAVES)
    if waves is not None and waves < WAVES_MIN:
        reasons.append(f"grid under one wave ({int(m.get('launch__grid_size') or 0)} blocks on "
                       f"{int(m.get('launch__sm_count') or 0)} SMs, {waves:.2f} waves)")
    theo, achieved = _get(m, OCC_THEORETICAL), _get(m, OCC_ACHIEVED)
    limits = [(v, name) for name, key in OCC_LIMITS if (v := _get(m, key)) is not None]
    if theo is not None and theo < 100.0 and limits:
        blocks = min(v for v, _ in limits)
        names = [name for v, name in limits if v == blocks]  # resources tied at the cap are named together
        details = [f"{int(m['launch__registers_per_thread'])} registers per thread" if name == "registers" and
                   m.get("launch__registers_per_thread") else f"{blocks:g} blocks per SM" for name in names]
        reasons.append(f"{' and '.join(names)} ({', '.join(dict.fromkeys(details))}: theoretical occupancy {theo:.0f}%)")
    if achieved is not None and theo is not None and not reasons and achieved < theo - OCCUPANCY_AT_LIMIT_POINTS:
        reasons.append(f"achieved occupancy {achieved:.0f}% of a possible {theo:.0f}% (imbalance, tail)")
    return tuple(reasons)


def classify(m: dict) -> Limiter | None:
    """The launch's limiter; None when the report lacks the speed-of-light metrics."""
    sm = _get(m, SOL["sm"])
    levels = [(name, v) for name, key in MEMORY_LEVELS if (v := _get(m, key)) is not None]
    if sm is None or not levels:
        return None
    mem_top = max(v for _, v in levels)
    pipes = [(v, name) for name, key in PIPES if (v := _get(m, key)) is not None]
    issue = _get(m, ISSUE)
    occ = _get(m, OCC_ACHIEVED)
    numbers = (f"SM {sm:.0f}%, " + ", ".join(f"{n} {v:.0f}%" for n, v in levels)
               + (f", issue slots {issue:.0f}%" if issue is not None else "")
               + (f", achieved occupancy {occ:.0f}%" if occ is not None else ""))
    if mem_top >= BOUND_PCT and mem_top >= sm:
        name, pct = next((n, v) for n, v in levels if v >= BOUND_PCT)  # deepest level at its peak
        return Limiter("memory", name, pct, (), numbers)
    if sm >= BOUND_PCT and pipes:
        pct, pipe = max(pipes)
        if pipe == "tensor pipe":
            prec = tensor_precision(m)
            pipe = f"tensor pipe ({prec})" if prec else pipe
        return Limiter("compute", pipe, pct, (), numbers)
    reasons = occupancy_reasons(m)
    busiest = max([sm, mem_top])
    return Limiter("latency", "occupancy" if reasons else "latency", busiest,
                   reasons or ("warps wait on latency, neither SM nor memory near peak",), numbers)


# --- measured work ----------------------------------------------------------------------------

def flops_by_precision(m: dict) -> dict[str, float]:
    """Executed floating-point operations of the launch by precision, as ncu's roofline counts them:
    scalar FP64/FP32 from the SASS instruction counters (FMA = 2), tensor-core operations from
    the tensor-pipe counters by input precision. Precisions with none are left out."""
    out: dict[str, float] = {}
    cycles = _get(m, "smsp__cycles_elapsed.avg")
    if cycles is not None:
        # scalar FP16 (HADD2/HMUL2/HFMA2) is left out: compilers emit those instructions for integer
        # and move work too (CuPy's float64 subtract "executes" 2 per element), so they are no FLOP count
        for prec, ops in (("FP64", ("dadd", "dmul", "dfma")), ("FP32", ("fadd", "fmul", "ffma"))):
            per = [_get(m, f"smsp__sass_thread_inst_executed_op_{o}_pred_on.sum.per_cycle_elapsed") for o in ops]
            if all(v is not None for v in per):
                value = (per[0] + per[1] + 2 * per[2]) * cycles
                if value >= 1:
                    out[prec] = value
    for prec, key, _ in TENSOR_PRECISIONS:
        v = _get(m, key)
        if v:
            out[f"{prec} tensor" if not prec.endswith("tensor") else prec] = v
    return out


def bytes_by_level(m: dict) -> dict[str, float]:
    """Bytes the launch moved at each memory level (the hierarchical roofline's), from the achieved
    rate times the duration."""
    dur_s = (_get(m, "gpu__time_duration.sum") or 0.0) / 1e9
    out = {}
    for level, rate, _, _ in MEMORY_ROOFLINE:
        v = _get(m, rate)
        if v is not None and dur_s:
            out[level] = v * dur_s
    return out


def device_peaks(m: dict) -> dict[str, float]:
    """The device's peaks at the clocks the launch ran at (ncu's device attributes and peak
    metrics): ``<level> bytes/s`` for DRAM, L2, L1 and ``<precision> FLOP/s`` for the FP units."""
    out = {}
    for level, _, peak, clock in MEMORY_ROOFLINE:
        p, c = _get(m, peak), _get(m, clock)
        if p and c:
            out[f"{level} bytes/s"] = p * c
    clock = _get(m, SM_CLOCK)
    if clock:
        for prec, key in FP_PEAKS:
            if (p := _get(m, key)):
                out[f"{prec} FLOP/s"] = 2 * p * clock
        for prec, _, peaks in TENSOR_PRECISIONS:
            name = f"{prec} tensor" if not prec.endswith("tensor") else prec
            p = next((v for k in peaks if (v := _get(m, k))), None)
            if p:
                out[f"{name} FLOP/s"] = p * clock
    return out


# --- matching nsys kernels to ncu launches --------------------------------------------------

@functools.lru_cache(maxsize=4096)
def kernel_key(name: str) -> str:
    """A kernel's name reduced to what is the same in nsys and in ncu, and across processes: no
    return type, namespaces (ncu drops them inside template arguments too), casts on template
    arguments or ABI tags (Numba numbers its ABI tag per compilation: ``abi:v3`` and ``abi:v5``
    are one kernel)."""
    name = re.sub(r"^void ", "", name.strip()).replace("abi:", "")
    # words of a cast separated by required whitespace: with optional whitespace the engine tries
    # every split of each word, exponential on long template names (seconds per cuDF kernel)
    name = re.sub(r"\([A-Za-z_][\w:]*(?:\s+[A-Za-z_][\w:]*)*\s*\)(?=-?\d)", "", name)
    name = re.sub(r"(?:[A-Za-z_]\w*::)+", "", name)
    return re.sub(r"\[v\d+,", "[", name)


# --- one step ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class StepLimiter:
    """What limits one step's steady compute call, measured."""

    # "host link" | "launch/host" | "synchronization" | "memory" | "compute" | "latency" | "not profiled", or
    # "evidence-limited": no counters anywhere, stated as far as the trace and declared work reach
    # (analysis.no_counters; unit "<resource>-bound", "grid under one wave" or "")
    kind: str
    unit: str
    share: float  # share of the call's wall time (host link, idle) or of its kernel time (kernel limiters)
    detail: str
    kernel: Limiter | None = None
    ncu_variants: tuple[str, ...] = ()  # whose ncu profiles the kernel limiter rests on
    # kernel limiters: the time per steady call the step's kernels need with each one's limiting unit
    # at its peak, and the share of kernel time ncu profiled (limiter_floor_ns); None: none profiled
    floor_ns: float | None = None
    floor_covered_share: float = 0.0

    def label(self) -> str:
        if self.kernel is not None:
            return self.kernel.label()
        return f"{self.kind}: {self.unit}" if self.unit and self.unit != self.kind else self.kind

    def next_move(self) -> str:
        return next_move(self)


def _steady(calls: Sequence[dict]) -> Sequence[dict]:
    return calls[1:] if len(calls) > 1 else calls


def fastest_steady_call(calls: Sequence[dict]) -> dict:
    """The steady call (every call but the first, which pays first-use costs) with the shortest wall
    time: the one nearest the step's steady state, since host noise only lengthens a call."""
    return min(_steady(calls), key=lambda c: c.get("wall_ns") or 0)


def pool_of(runs: Iterable[dict]) -> list[tuple[str, Sequence[dict]]]:
    """The ncu launch records of a recipe's runs at one size, by variant: what step_limiter matches
    a step's kernels against."""
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


def step_kernels(run: dict, by_kernel: dict[str, list[tuple[str, dict]]]) -> list[dict]:
    """The step's kernels (nsys, compute ranges) with their ncu launches: per kernel its time per
    steady call and the matching launches, the step's own profile first, else another variant's.
    A launch matches by name and launch shape (grid, block), and a kernel counts as profiled only
    when every shape it ran with in the step was profiled: JIT compilers reuse a kernel name for
    other shapes (XLA's ``wrapped_dot`` at every matrix side), which are other work."""
    n_calls = len(run["nsys"]["calls"])
    shapes: dict[str, set] = {}
    for s in run["nsys"].get("compute_launch_shapes") or []:
        shapes.setdefault(kernel_key(s["name"]), set()).add((s["grid_blocks"], s["block_threads"]))
    def shape(launch: dict) -> tuple[int, int]:
        m = launch["metrics"]
        return int(m.get("launch__grid_size") or 0), int(m.get("launch__block_size") or 0)

    matched = []
    rank: dict[str, float] = {}
    for k in run["nsys"]["compute_kernels"]:
        key = kernel_key(k["name"])
        want = shapes.get(key, set())
        found = [(v, launch) for v, launch in by_kernel.get(key, [])]
        # per variant, its launches of this kernel count only if they cover every shape the step ran
        ok = {v for v in {v for v, _ in found} if not want or want <= {shape(x) for w, x in found if w == v}}
        found = [(v, launch) for v, launch in found if v in ok]
        for v in ok:
            rank[v] = rank.get(v, 0.0) + k["total_ns"]
        matched.append((k, found))
    return [{"name": k["name"], "per_call": k["count"] / n_calls, "ns_per_call": k["total_ns"] / n_calls,
             "launches": _preferred(run["variant"], found, rank)} for k, found in matched]


def limiter_floor_ns(rows: Sequence[dict]) -> tuple[float, float] | None:
    """The floor of the measured limiters and the share of kernel time it covers: each profiled
    kernel's time per call at the share of peak its limiting unit ran at (a DRAM-bound kernel at 91%
    of DRAM's peak needs 91% of its time with DRAM at 100%; a pipe-bound one likewise on its pipe; a
    latency-bound one on its busiest unit). Kernels ncu did not profile count as free, so the floor
    stays a lower bound. ``rows``: :func:`step_kernels`. None when no kernel was profiled."""
    total = sum(r["ns_per_call"] for r in rows)
    floor_ns, covered = 0.0, 0.0
    for r in rows:
        lim = next((x for _, launch in r["launches"] if (x := classify(launch["metrics"])) is not None), None)
        if lim is None or lim.pct_of_peak is None:
            continue
        floor_ns += r["ns_per_call"] * lim.pct_of_peak / 100.0
        covered += r["ns_per_call"]
    if not total or not covered:
        return None
    return floor_ns, covered / total


def step_limiter(run: dict, pool: Iterable[tuple[str, Sequence[dict]]]) -> StepLimiter:
    """``run``: a run summary; ``pool``: (variant, ncu launch records) of the recipe at this size."""
    # the steady call the host disturbed least: a collection, a page fault or the profiler's buffers
    # only add host time to a call, so one slow call must not make a GPU-bound step look host-bound
    # (H200: CuPy's fused step, 1.49 ms of kernel per call, had a 7.9 ms second call under nsys)
    call = fastest_steady_call(run["nsys"]["calls"])
    wall = call.get("wall_ns") or 0
    copy = (call.get("gpu_memcpy_h2d_ns") or 0) + (call.get("gpu_memcpy_d2h_ns") or 0)
    idle = call.get("gpu_idle_ns") or 0
    if wall and copy / wall >= HOST_LINK_SHARE:
        # copies in both directions and on several streams overlap: their sum can exceed the call
        share = min(copy / wall, 1.0)
        return StepLimiter("host link", "host link", share,
                           f"host-device copies {copy / 1e6:.2f} ms (summed over overlapping copies) in a "
                           f"{wall / 1e6:.2f} ms call (the fastest steady call)")
    if wall and idle / wall >= GPU_IDLE_SHARE:
        syncs = call.get("sync_calls") or 0
        kind = "synchronization" if syncs > SYNC_CALLS_PER_CALL else "launch/host"
        return StepLimiter(kind, kind, idle / wall,
                           f"GPU idle {idle / 1e6:.3f} ms of a {wall / 1e6:.3f} ms call ({idle / wall:.0%}, the fastest "
                           "steady call); "
                           f"{call.get('kernels') or 0:.0f} kernels, {syncs:.0f} synchronize calls per call")
    rows = step_kernels(run, launches_by_kernel(pool))
    total = sum(r["ns_per_call"] for r in rows)
    weights: dict[tuple[str, str], float] = {}
    example: dict[tuple[str, str], tuple[Limiter, str]] = {}
    variants = []
    for r in rows:
        lims = [(v, classify(launch["metrics"])) for v, launch in r["launches"]]
        lims = [(v, lim) for v, lim in lims if lim is not None]
        if not lims:
            weights[("not profiled", "")] = weights.get(("not profiled", ""), 0.0) + r["ns_per_call"]
            continue
        v, lim = lims[0]
        variants.append(v)
        key = (lim.kind, lim.unit)
        weights[key] = weights.get(key, 0.0) + r["ns_per_call"]
        if key not in example or r["ns_per_call"] > 0:
            example.setdefault(key, (lim, r["name"]))
    if not total or not weights:
        return StepLimiter("not profiled", "", 0.0, "no kernels in the compute ranges")
    (kind, unit), ns = max(weights.items(), key=lambda kv: kv[1])
    share = ns / total
    if kind == "not profiled":
        top = max((r for r in rows if not r["launches"]), key=lambda r: r["ns_per_call"])
        return StepLimiter("not profiled", "", share,
                           f"{share:.0%} of kernel time in kernels Nsight Compute did not profile at this size and "
                           f"shape, most in `{kernel_key(top['name'])[:60]}`")
    lim, kernel = example[(kind, unit)]
    return StepLimiter(kind, unit, share, f"{share:.0%} of kernel time; `{kernel_key(kernel)[:60]}`: {lim.detail}",
                       lim, tuple(dict.fromkeys(variants)), *(limiter_floor_ns(rows) or (None, 0.0)))


# --- the next move ----------------------------------------------------------------------------

_MOVES = {
    "DRAM": "move fewer bytes: fuse passes, narrower types, reuse data from cache or shared memory "
            "(the kernel already streams DRAM near its peak)",
    "L2": "improve locality so reuse hits in L1/shared memory (tiling, blocking), or cut L2 atomics and "
          "redundant loads",
    "L1/shared": "fewer L1/shared-memory wavefronts: vector loads, no bank conflicts, coalesced access",
    "FP64 pipe": "lower precision (FP32) where accuracy allows, or fewer FP64 operations and transcendentals "
                 "(sin, exp, tanh, sqrt expand to many FP64 instructions)",
    "FMA (FP32) pipe": "tensor cores (TF32, BF16) for matmul-like work, or fewer FP32 operations",
    "ALU (integer, logic) pipe": "fewer integer and logic instructions: index math out of inner loops, cheaper "
                                 "hashing and comparisons",
    "load/store pipe": "fewer, wider memory instructions (vector loads, shared-memory tiles)",
    "XU (special functions) pipe": "fewer transcendentals and conversions: fast-math intrinsics, tables, "
                                   "algebra that avoids them",
    "host link": "keep the data resident on the GPU across calls, or overlap the copies with compute (pinned "
                 "memory, streams)",
    "launch/host": "fewer launches and less host work per call: fuse kernels, capture the call in a CUDA graph, "
                   "move allocation and Python out of the call",
    "synchronization": "synchronize once per call; order work with streams and events instead",
}


#: analysis.floors resource -> the move it points to, for a step bound without counters
_EVIDENCE_MOVES = {"device memory": "DRAM", "host-to-device link": "host link", "device-to-host link": "host link",
                   "FP64 arithmetic": "FP64 pipe", "FP32 arithmetic": "FMA (FP32) pipe"}


def next_move(step: StepLimiter) -> str:
    """One sentence: the measured limiter and what it points to next."""
    if step.kind == "evidence-limited":
        if step.unit == "grid under one wave":
            return ("Limited by a grid under one wave (derived without counters): launch more blocks (more, smaller "
                    "blocks or more work per launch) so every SM has work.")
        resource = step.unit.removesuffix("-bound")
        if resource:
            move = _MOVES.get(_EVIDENCE_MOVES.get(resource, ""), "less of that work per call")
            return f"Bound by {resource} as far as the evidence without counters reaches: {move}."
        return ("Not measurable without counters: profile its main kernel under Nsight Compute where counters are "
                "allowed before choosing a change.")
    if step.kind in ("host link", "launch/host", "synchronization"):
        return f"Limited by {step.kind} ({step.share:.0%} of the call): {_MOVES[step.kind]}."
    if step.kind == "not profiled":
        return ("Not measured: profile its main kernel under Nsight Compute (the configuration's kernel filter and "
                "launch count decide which launches are profiled) before choosing a change.")
    lim = step.kernel
    if lim.kind == "memory":
        return f"Limited by {lim.unit} bandwidth ({lim.pct_of_peak:.0f}% of peak): {_MOVES[lim.unit]}."
    if lim.kind == "compute":
        if lim.unit.startswith("tensor pipe"):
            return (f"Limited by the {lim.unit} ({lim.pct_of_peak:.0f}% of peak): near the tensor cores' rate, "
                    "lower precision (FP8) or less work is what is left.")
        return f"Limited by the {lim.unit} ({lim.pct_of_peak:.0f}% of peak): {_MOVES.get(lim.unit, 'fewer instructions')}."
    main = lim.reasons[0] if lim.reasons else "latency"
    if main.startswith("grid under one wave"):
        move = "launch more blocks (more, smaller blocks or more work per launch) so every SM has work"
    elif main.startswith("registers") or main.startswith("shared memory and registers"):
        move = "cap registers (launch bounds, maxrregcount) or keep fewer values live"
    elif main.startswith("shared memory"):
        move = "use less shared memory per block"
    elif main.startswith("block count"):
        move = "use larger blocks"
    else:
        move = "more independent work per thread (unrolling, vector loads) and more warps to hide latency"
    return f"Limited by latency/occupancy, {main}: {move}."


#: ncu rules that speak to one kind of limiter; a rule not listed applies to any. A rule is quoted
#: only for a launch whose measured limiter is of a kind it speaks to.
RULE_KINDS = {
    "HighPipeUtilization": {"compute"},
    "FPInstructions": {"compute"},
    "SOLFPRoofline": {"compute"},
    "IssueSlotUtilization": {"compute", "latency"},
    "MemoryCacheAccessPattern": {"memory", "latency"},
    "MemoryL2Compression": {"memory"},
    "UncoalescedGlobalAccess": {"memory", "latency"},
    "SharedMemoryConflicts": {"memory", "latency"},
    "AchievedOccupancy": {"latency"},
    "TheoreticalOccupancy": {"latency"},
    "LaunchConfiguration": {"latency"},
    "WorkloadImbalance": {"latency"},
    "CPIStall": {"latency", "memory"},
}


def rule_consistent(rule: str, limiter: Limiter | None) -> bool:
    """Whether ncu's rule ``rule`` speaks to the launch's measured limiter."""
    kinds = RULE_KINDS.get(rule)
    return kinds is None or limiter is None or limiter.kind in kinds


# --- declared beside measured -----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class WorkCheck:
    declared_bytes: float
    measured_dram_bytes: float | None  # per steady call, over the profiled kernels
    declared_flops: float
    declared_kind: str
    measured_flops: dict[str, float]  # per steady call, by precision
    covered_share: float  # share of the call's kernel time whose kernels ncu profiled
    measured_kernel_ns: float  # ncu's duration of the profiled kernels, per steady call

    def dram_gb_per_s(self) -> float | None:
        """DRAM throughput the profiled kernels achieved (ncu bytes over ncu time)."""
        if not self.measured_dram_bytes or not self.measured_kernel_ns:
            return None
        return self.measured_dram_bytes / self.measured_kernel_ns

    def complete(self) -> bool:
        """Whether ncu profiled (nearly) all of the call's kernel time: else measured work is a lower bound."""
        return self.covered_share >= COVERAGE_COMPLETE

    def bytes_ratio(self) -> float | None:
        if not self.declared_bytes or not self.measured_dram_bytes:
            return None
        return self.measured_dram_bytes / self.declared_bytes

    def flops_ratio(self) -> float | None:
        """None for integer work, and where ncu counted no FP instructions (the work ran as integer
        or atomic operations, which the FP counters do not see)."""
        measured = sum(self.measured_flops.values())
        if not self.declared_flops or self.declared_kind.startswith("int") or not measured:
            return None
        return measured / self.declared_flops

    def mismatches(self) -> list[str]:
        """Measured over declared beyond MISMATCH_FACTOR; below it only where ncu saw all the kernels."""
        out = []
        for what, r in (("DRAM bytes", self.bytes_ratio()), ("FLOPs", self.flops_ratio())):
            if r is not None and (r > MISMATCH_FACTOR or (self.complete() and r < 1 / MISMATCH_FACTOR)):
                out.append(f"measured {what} {r:.2f}× declared")
        return out


def work_check(run: dict, pool: Iterable[tuple[str, Sequence[dict]]]) -> WorkCheck | None:
    """The step's declared work (its Work) beside what ncu measured per steady call (the launches of
    each kernel times its launches per call); None when no kernel of the step was profiled."""
    rows = step_kernels(run, launches_by_kernel(pool))
    total = sum(r["ns_per_call"] for r in rows)
    covered, dram, flops, kernel_ns = 0.0, 0.0, {}, 0.0
    have_dram = False
    for r in rows:
        if not r["launches"]:
            continue
        variant = r["launches"][0][0]
        same = [launch for v, launch in r["launches"] if v == variant]
        covered += r["ns_per_call"]
        d = [launch.get("dram_bytes") for launch in same if launch.get("dram_bytes") is not None]
        if d:
            have_dram = True
            dram += sum(d) / len(d) * r["per_call"]
        kernel_ns += sum(float(launch["metrics"].get("gpu__time_duration.sum") or 0) for launch in same) \
            / len(same) * r["per_call"]
        for launch in same:
            for prec, v in flops_by_precision(launch["metrics"]).items():
                flops[prec] = flops.get(prec, 0.0) + v / len(same) * r["per_call"]
    if not covered:
        return None
    w = run["work"]
    return WorkCheck(w["bytes_read"] + w["bytes_written"], dram if have_dram else None, w.get("flops", 0),
                     w.get("flops_kind", "fp64"), flops, covered / total if total else 0.0, kernel_ns)


# --- for a report model -----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class StepDiagnosis:
    variant: str
    limiter: StepLimiter
    next_move: str
    work: WorkCheck | None


def diagnose(runs: Sequence[dict], ceilings: dict | None = None) -> list[StepDiagnosis]:
    """Every step of one recipe at one size (run summaries, in step order): what limits it, the
    next move and its declared-vs-measured work. A pure function of the summaries. With
    ``ceilings`` (ceilings.json's mapping) and no ncu profile in ``runs``, each step's limiter is
    the evidence-limited one (analysis.no_counters)."""
    pool = pool_of(runs)
    out = []
    for r in runs:
        if ceilings is not None and not pool:
            from analysis import no_counters  # imports this module

            step = no_counters.step_limiter(r, ceilings)
        else:
            step = step_limiter(r, pool)
        out.append(StepDiagnosis(r["variant"], step, step.next_move(), work_check(r, pool)))
    return out
