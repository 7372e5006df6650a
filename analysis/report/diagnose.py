"""``python -m analysis diagnose``: what limits each kernel launch of any program's Nsight Compute
report, and what to try next.

Per launch, in launch order: the limiter from ncu's speed-of-light breakdown
(:func:`analysis.model.limiter.classify_launch`: compute- or memory-bound at 60% of peak, the unit the top
entry of the breakdown, else latency-bound with no floor), occupancy and waves, and advice by
limiter. Kernels of libraries (cuBLAS, cuDNN, CUTLASS, nvjet, xmma, XLA, cuRAND, PyTorch's ATen, CUB/Thrust,
cuDF) are named as such and get no advice about their launch configuration, which their caller does
not choose. The kernel's name decides only that: the limiter comes from the counters alone.

With ``--nsys`` (the program's nsys SQLite export), the same per kernel name weighted by the GPU
time nsys recorded for it, and the shares of the GPU's active window spent on host-device copies
(host link) and with the GPU idle (launch/host).
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import re
import sys
from typing import Any, Sequence

from analysis.common.errors import AnalysisInputError
from analysis.model.limiter import Kind, LaunchLimiter, Unit, classify_launch
from analysis.model.limiter.advice import is_library_kernel, rule_consistent
from analysis.readers.ncu import NAMES_FROM_REPORT_MODULE, Finding, Launch, read_launches
from analysis.model.limiter import kernel_key
from analysis.readers.nsys import Trace
from analysis.readers.nsys import columns as cols
from analysis.report.mdtext import short_kernel_name

FORMATS = ("md", "json", "csv")
#: ncu rule findings the markdown shows per launch
RULES_SHOWN = 3

#: libraries whose kernels the calling program launches without choosing their grid or block,
#: recognised by the kernel's name (ncu's or nsys' demangled form), first match wins
LIBRARIES: tuple[tuple[str, re.Pattern], ...] = tuple((label, re.compile(rx)) for label, rx in (
    ("cuDNN", r"cudnn|convolve_sgemm|convolve_common|winograd|fft2d_|fft_[rc]2[rc]|xmma_(fprop|dgrad|wgrad)"
              r"|_(fprop|dgrad|wgrad)_|conv2d_(grouped|c1_k1)|engines_precompiled::|nchwToNhwc|nhwcToNchw"
              r"|bn_(fw|bw)_\w*_kernel"),
    ("nvjet (cuBLAS)", r"(^|\s)nvjet_"),
    ("xmma (cuBLAS/cuDNN)", r"xmma"),
    ("CUTLASS", r"cutlass"),
    ("cuBLAS", r"cublas|(^|\s)(ampere|volta|turing|hopper|ada|sm\d+)_\w*gemm|gemv|gemmSN|gemmk1|splitKreduce"
               r"|dot_kernel|scal_kernel|axpy_kernel"),
    ("XLA", r"^(void )?(wrapped_\w+|gemm_fusion\w*|loop_\w*fusion\w*|input_\w*fusion\w*|\w*_fusion(_\d+)?"
            r"|copy_fusion\w*|fusion(_\d+)?)(\(|$)"),
    ("cuRAND", r"curand|(^|\s)execute_dist<"),
    # ncu prints the templates of CUB (and Thrust, CCCL) without their outer namespace: by their names
    ("CUB/Thrust", r"(^|[\s<(,])(cub|thrust)(::|_)|\bCUB_\d|\bDevice(Reduce|Scan|RadixSort|MergeSort|Segmented|Select"
                   r"|Histogram|Partition|Adjacent|Unique|Run)\w*Kernel|policy_hub<|policy_selector|static_kernel<"),
    ("cuDF/RMM", r"(^|[\s<(,])(cudf|rmm|cuco|strings|groupby|binops)::|find::init_found_pos"),
    ("PyTorch (ATen)", r"(^|[\s<(,])(at|native|c10|at::native)::|\bat_cuda_detail::|(^|\s)(mbtopk|sbtopk)::"
                       r"|^(void )?<unnamed>::softmax_warp_"),
))


def library_of(kernel_name: str) -> str | None:
    """The library a kernel belongs to, by its name; None for a kernel the program itself compiles
    (CuPy, Numba, PyCUDA, Warp, Triton, a user's CUDA C++)."""
    name = kernel_name.strip()
    label = next((label for label, rx in LIBRARIES if rx.search(name)), None)
    # the step analysis' own test (analysis.model.limiter.advice) is honoured too, so that a kernel the recipe
    # pages treat as a library's is one here
    return label or ("library" if is_library_kernel(name) else None)


# --- advice -------------------------------------------------------------------------------------

_COMPUTE = {
    Unit.ISSUE: "the schedulers issue an instruction almost every cycle, so the time is the instruction count: "
                "fewer instructions per result (fast-math intrinsics, a lower precision, less index arithmetic, "
                "wider loads and stores)",
    Unit.FP64: "fewer FP64 operations, or FP32 where the accuracy allows (the FP64 pipe is the narrow one)",
    Unit.FMA: "matrix-like work on tensor cores (TF32, BF16), or fewer FP32 operations",
    Unit.ALU: "fewer integer and logic instructions: index arithmetic out of inner loops, cheaper comparisons "
              "and hashing",
    Unit.LSU: "fewer, wider memory instructions (vector loads, shared-memory tiles)",
    Unit.XU: "fewer transcendentals and conversions: fast-math intrinsics, algebra that avoids them",
    Unit.SM_OTHER: "the busiest SM unit is one this catalog does not name: open the report's speed-of-light "
                   "breakdown in ncu-ui",
}
_MEMORY = {
    Unit.DRAM: "move fewer bytes: fuse passes over the data, narrower types, reuse data from L2 or shared memory",
    Unit.L2: "better locality so that reuse hits in L1 or shared memory (tiling, blocking), fewer L2 atomics "
             "and redundant loads",
    Unit.L1: "fewer L1/shared-memory wavefronts: coalesced or vector accesses, no shared-memory bank conflicts",
}
_LIBRARY_COMPUTE = ("the library's own code is at that limit: less work per call, or another algorithm or a "
                    "lower precision the library offers (TF32 or BF16 math modes)")
_LIBRARY_MEMORY = ("the library kernel streams memory near its limit: fewer passes over the data (fuse the "
                   "operations around it, e.g. torch.compile or jax.jit), narrower types (BF16, FP16)")
#: what the largest stall reasons point to in a kernel the program compiles
_STALL_MOVES = {
    "long_scoreboard": "more independent global loads in flight per thread (unrolling, prefetching into registers "
                       "or shared memory)",
    "short_scoreboard": "fewer shared-memory and special-function round trips on the critical path",
    "wait": "more independent instructions between dependent ones (instruction-level parallelism)",
    "barrier": "fewer block-wide barriers, or less work between them held by the slowest warp",
    "lg_throttle": "fewer, wider global memory instructions",
    "mio_throttle": "fewer shared-memory instructions (wider accesses)",
    "math_pipe_throttle": "a mix of instructions spread over more pipes",
    "branch_resolving": "fewer divergent branches",
    "membar": "fewer memory fences",
}


def _latency_moves(lim: LaunchLimiter) -> list[str]:
    moves = []
    waves = lim.waves_per_sm
    if waves is not None and waves < 1.0:
        moves.append("launch more blocks (smaller blocks, or more work per launch) so that every SM has work")
    cap = lim.occupancy_limiter or ""
    if cap.startswith("registers"):
        moves.append("fewer registers per thread (launch bounds, fewer live values)")
    elif cap.startswith("shared memory"):
        moves.append("less shared memory per block")
    elif cap.startswith("block count"):
        moves.append("larger blocks")
    elif cap.startswith("warps"):
        moves.append("a block size that divides the SM's warp slots evenly")
    achieved, theoretical = lim.occupancy_achieved_pct, lim.occupancy_theoretical_pct
    if (achieved is not None and theoretical is not None and achieved < theoretical - 10 and waves is not None
            and 1.0 <= waves < 4 and lim.last_wave_fill is not None and lim.last_wave_fill < 1.0):
        moves.append("a grid that fills whole waves (a multiple of the SMs' block slots) or many more blocks")
    for reason, _ in lim.stall_reasons[:2]:
        if reason in _STALL_MOVES:
            moves.append(_STALL_MOVES[reason])
    return moves or ["more independent work per thread and more warps in flight to hide latency"]


def advice(lim: LaunchLimiter | None, library: str | None) -> str:
    """One paragraph: the limiter in words and what it points to; for a library kernel, nothing about
    its grid or block, which the library chooses."""
    if lim is None:
        return ("No speed-of-light metrics in the report for this launch: profile it with the SpeedOfLight "
                "section (ncu --set basic or more) to classify it.")
    if lim.kind is Kind.LATENCY:
        if library:
            return (f"Latency-bound {library} kernel: its launch configuration is the library's; give it more work "
                    "per call (batch several calls into one, larger tensors) or fuse the small operations around "
                    "it, and capture runs of short launches in a CUDA graph.")
        return "Latency-bound: " + "; ".join(_latency_moves(lim)) + "."
    what = f"{lim.kind.value}-bound on the {lim.unit.value}"
    if lim.kind is Kind.MEMORY:
        move = _LIBRARY_MEMORY if library else _MEMORY.get(lim.unit, "move fewer bytes")
    elif lim.unit.is_tensor:
        move = ("the tensor cores are near their rate for this precision: a lower precision (FP8 where the GPU "
                "has it) or less work is what is left")
    else:
        move = _LIBRARY_COMPUTE if library else _COMPUTE.get(lim.unit, "fewer instructions")
    return f"{library + ' kernel, ' if library else ''}{what}: {move}."


# --- per launch ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class LaunchDiagnosis:
    launch_id: int
    kernel_name: str
    duration_ns: float | None
    grid_blocks: int | None
    block_threads: int | None
    library: str | None
    limiter: LaunchLimiter | None
    advice: str
    #: ncu's own rule findings for the launch that speak to its limiter (optimization hints and warnings)
    ncu_rules: tuple[Finding, ...] = ()


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


#: ncu rules about a launch's grid, block or occupancy: not quoted for a library's kernel
LAUNCH_CONFIGURATION_RULES = frozenset({"LaunchConfiguration", "TheoreticalOccupancy", "WorkloadImbalance",
                                        "AchievedOccupancy"})


def consistent_rules(launch: Launch, lim: LaunchLimiter | None, library: str | None) -> tuple[Finding, ...]:
    """The launch's ncu rule findings that do not contradict its limiter
    (:func:`analysis.model.limiter.advice.rule_consistent`), without launch-configuration rules for a library kernel."""
    return tuple(f for f in launch.findings
                 if rule_consistent(f.rule, lim, launch.kernel_name)
                 and not (library and f.rule in LAUNCH_CONFIGURATION_RULES))


def diagnose_launches(launches: Sequence[Launch]) -> list[LaunchDiagnosis]:
    out = []
    for launch in launches:
        m = launch.metrics
        lim = classify_launch(m)
        library = library_of(launch.kernel_name) or library_of(launch.demangled_name or "")
        duration = m.get("gpu__time_duration.sum")
        out.append(LaunchDiagnosis(launch.id, launch.kernel_name, float(duration) if duration is not None else None,
                                   _int(m.get("launch__grid_size")), _int(m.get("launch__block_size")), library,
                                   lim, advice(lim, library), consistent_rules(launch, lim, library)))
    return out


def _limiter_fields(lim: LaunchLimiter | None) -> dict[str, Any]:
    if lim is None:
        return {"kind": Kind.NO_COUNTERS.value, "unit": None, "pct_of_peak": None, "floor_ratio": None,
                "sm_pct": None, "memory_pct": None, "issue_pct": None,
                "occupancy": {"achieved_pct": None, "theoretical_pct": None, "limiter": None},
                "waves": None, "last_wave_fill": None, "reasons": []}
    return {"kind": lim.kind.value, "unit": lim.unit.value if lim.unit is not None else None,
            "pct_of_peak": lim.pct_of_peak, "floor_ratio": lim.floor_ratio, "sm_pct": lim.sm_pct,
            "memory_pct": lim.memory_pct, "issue_pct": lim.issue_pct,
            "occupancy": {"achieved_pct": lim.occupancy_achieved_pct, "theoretical_pct": lim.occupancy_theoretical_pct,
                          "limiter": lim.occupancy_limiter},
            "waves": lim.waves_per_sm, "last_wave_fill": lim.last_wave_fill, "reasons": list(lim.reasons)}


def launch_record(d: LaunchDiagnosis) -> dict[str, Any]:
    return {"scope": "launch", "launch_id": d.launch_id, "kernel_name": d.kernel_name, "duration_ns": d.duration_ns,
            "grid_blocks": d.grid_blocks, "block_threads": d.block_threads, "library": d.library,
            **_limiter_fields(d.limiter), "advice": d.advice,
            "ncu_rules": [{"rule": f.rule, "severity": f.severity, "title": f.title,
                           "estimated_speedup_pct": f.estimated_speedup_pct} for f in d.ncu_rules]}


# --- per kernel name, weighted by nsys time ---------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class KernelDiagnosis:
    kernel_name: str  # as nsys names it
    gpu_time_ns: int  # summed over its launches in the trace
    launches: int
    share_of_kernel_time: float
    profiled_launches: int  # launches of it in the ncu report
    #: the profiled launch that stands for the kernel: the longest of the limiter class holding the most
    #: profiled time; None when ncu profiled none
    representative: LaunchDiagnosis | None
    #: share of the profiled launches' ncu time in the representative's limiter class
    class_share: float


@dataclasses.dataclass(frozen=True)
class TraceShares:
    """The GPU's active window (first GPU operation's start to the last one's end) and how it was spent."""
    window_ns: int
    busy_ns: int  # union of kernels, copies and memsets
    kernel_ns: int  # union of kernels
    host_link_ns: int  # union of host-to-device and device-to-host copies
    idle_ns: int

    def share(self, ns: int) -> float:
        return ns / self.window_ns if self.window_ns else 0.0


def _class(d: LaunchDiagnosis) -> tuple[str, str | None]:
    if d.limiter is None:
        return Kind.NO_COUNTERS.value, None
    return d.limiter.kind.value, d.limiter.unit.value if d.limiter.unit is not None else None


def diagnose_trace(nsys_path: str, launches: Sequence[LaunchDiagnosis]) -> tuple[list[KernelDiagnosis], TraceShares]:
    """Kernels of the nsys export by GPU time (largest first) with their ncu limiter, and the window's shares.
    A kernel of the trace matches ncu's launches of the same name up to namespaces and return type
    (:func:`analysis.model.limiter.kernel_key`: nsys and ncu print C++ names differently)."""
    import numpy as np


    with Trace(nsys_path) as ex:
        ops = cols.read_ops(ex)
        kernels = ops.kind == cols.KERNEL
        if not kernels.any():
            raise AnalysisInputError(nsys_path, "the export holds no kernel launches")
        names = cols.string_ids(ex, np.unique(ops.name[kernels]))
        kinds = {v: k for k, v in ex.enum_labels("ENUM_CUDA_MEMCPY_OPER").items()}
    host = (ops.kind == cols.MEMCPY) & np.isin(ops.copy_kind, [kinds.get("Host-to-Device", -2),
                                                              kinds.get("Device-to-Host", -2)])
    everything = cols.union(ops.start, ops.end)
    kernel_union = cols.union(ops.start[kernels], ops.end[kernels])
    shares = TraceShares(everything.span_ns, everything.busy_ns, kernel_union.busy_ns,
                         cols.union(ops.start[host], ops.end[host]).busy_ns, everything.gap_ns)
    keys, counts, sums, _ = cols.grouped(ops.name[kernels], ops.duration[kernels])
    total = int(sums.sum())
    by_key: dict[str, list[LaunchDiagnosis]] = {}
    for d in launches:
        by_key.setdefault(kernel_key(d.kernel_name), []).append(d)
    rows = []
    for name_id, n, ns in sorted(zip(keys, counts, sums), key=lambda r: -int(r[2])):
        name = names[int(name_id)]
        mine = by_key.get(kernel_key(name), [])
        rep, class_share = None, 0.0
        if mine:
            weight: dict[tuple[str, str | None], float] = {}
            for d in mine:
                weight[_class(d)] = weight.get(_class(d), 0.0) + (d.duration_ns or 0.0)
            top = max(weight, key=lambda c: weight[c])
            rep = max((d for d in mine if _class(d) == top), key=lambda d: d.duration_ns or 0.0)
            class_share = weight[top] / sum(weight.values()) if sum(weight.values()) else 1.0
        rows.append(KernelDiagnosis(name, int(ns), int(n), int(ns) / total if total else 0.0, len(mine), rep,
                                    class_share))
    return rows, shares


def kernel_record(k: KernelDiagnosis) -> dict[str, Any]:
    rep = k.representative
    fields = _limiter_fields(rep.limiter) if rep is not None else {
        **_limiter_fields(None), "kind": Kind.NOT_PROFILED.value}
    library = library_of(k.kernel_name) or (rep.library if rep else None)
    return {"scope": "kernel", "launch_id": rep.launch_id if rep else None, "kernel_name": k.kernel_name,
            "gpu_time_ns": k.gpu_time_ns, "launches": k.launches, "share_of_kernel_time": k.share_of_kernel_time,
            "profiled_launches": k.profiled_launches, "class_share_of_profiled_time": k.class_share if rep else None,
            "library": library, **fields,
            "advice": rep.advice if rep else "Not profiled by ncu: profile it (ncu -k regex:<name>) to classify it."}


def trace_records(s: TraceShares) -> list[dict[str, Any]]:
    return [
        {"scope": "trace", "kernel_name": None, "kind": Kind.HOST_LINK.value, "unit": Unit.HOST_LINK.value,
         "time_ns": s.host_link_ns, "window_ns": s.window_ns, "share_of_window": s.share(s.host_link_ns),
         "pct_of_peak": None, "floor_ratio": None, "occupancy": None, "waves": None,
         "advice": "Host-device copies (the union of both directions) over the GPU's active window: keep data "
                   "resident on the GPU across calls, or overlap copies with compute (pinned memory, streams)."},
        {"scope": "trace", "kernel_name": None, "kind": Kind.LAUNCH_HOST.value, "unit": Unit.HOST.value,
         "time_ns": s.idle_ns, "window_ns": s.window_ns, "share_of_window": s.share(s.idle_ns),
         "pct_of_peak": None, "floor_ratio": None, "occupancy": None, "waves": None,
         "advice": "The GPU idle between its operations over its active window: the host (Python, launches, "
                   "synchronization, allocation) sets that time; fewer launches (fusion, CUDA graphs) and host "
                   "work out of the loop."},
    ]


# --- output ---------------------------------------------------------------------------------------

def _short(name: str, limit: int = 60) -> str:

    s = short_kernel_name(name)
    return s if len(s) <= limit else s[:limit - 1] + "…"


def _key(name: str, limit: int = 90) -> str:
    """A trace kernel's name as nsys and ncu share it (no namespaces or return type), cut to ``limit``:
    the short name alone repeats across template instances."""

    s = kernel_key(name)
    return s if len(s) <= limit else s[:limit - 1] + "…"


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f}%"


def _ratio(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}×"


def _occupancy(r: dict) -> str:
    occ = r.get("occupancy") or {}
    if occ.get("achieved_pct") is None:
        return "—"
    theo = occ.get("theoretical_pct")
    return f"{occ['achieved_pct']:.0f}% of {theo:.0f}%" if theo is not None else f"{occ['achieved_pct']:.0f}%"


def _waves(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def format_md(path: str, launch_rows: list[dict], kernel_rows: list[dict], trace_rows: list[dict]) -> str:
    lines = [f"# Diagnosis of `{path}`", "",
             "Each launch's limiter from ncu's speed-of-light breakdown: compute- or memory-bound when the SM or "
             "memory throughput is at or above 60% of peak (the unit: the breakdown's top entry, issue slots "
             "among the SM's), else latency-bound (no floor). Floor ratio: the launch's time over its time with "
             "that unit at its peak.", "",
             "| launch | kernel | µs | grid × block | kind | unit | % of peak | floor ratio | occupancy "
             "(achieved of theoretical) | waves per SM | library |",
             "|---:|---|---:|---|---|---|---:|---:|---|---:|---|"]
    for r in launch_rows:
        shape = f"{r['grid_blocks']} × {r['block_threads']}" if r["grid_blocks"] is not None else "—"
        us = "—" if r["duration_ns"] is None else f"{r['duration_ns'] / 1e3:,.1f}"
        lines.append(f"| {r['launch_id']} | `{_cell(_short(r['kernel_name']))}` | {us} | {shape} | {r['kind']} | "
                     f"{r['unit'] or '—'} | {_pct(r['pct_of_peak'])} | {_ratio(r['floor_ratio'])} | "
                     f"{_occupancy(r)} | "
                     f"{_waves(r['waves'])} | {r['library'] or '—'} |")
    lines += ["", "## Advice", ""]
    by_advice: dict[str, list[dict]] = {}
    for r in launch_rows:
        by_advice.setdefault(r["advice"], []).append(r)
    for text, rows in by_advice.items():
        names = ", ".join(dict.fromkeys(f"`{_cell(_short(r['kernel_name'], 40))}`" for r in rows))
        ids = ", ".join(str(r["launch_id"]) for r in rows)
        lines.append(f"- launch{'es' if len(rows) > 1 else ''} {ids} ({names}): {text}")
    ruled = [r for r in launch_rows if r.get("ncu_rules")]
    if ruled:
        lines += ["", f"## ncu's own findings that fit the limiter (the {RULES_SHOWN} with the largest estimated "
                  "speedup; the JSON holds all)", ""]
        for r in ruled:
            top = sorted((f for f in r["ncu_rules"] if f["estimated_speedup_pct"]),
                         key=lambda f: -f["estimated_speedup_pct"])[:RULES_SHOWN]
            if top:
                found = "; ".join((f"{f['title']} ({f['rule']}, " if f["title"] and f["title"] != f["rule"]
                                   else f"{f['rule']} (") + f"estimated speedup {f['estimated_speedup_pct']:.0f}%)"
                                  for f in top)
                lines.append(f"- launch {r['launch_id']} (`{_cell(_short(r['kernel_name'], 40))}`): {_cell(found)}")
    latency = [r for r in launch_rows if r["kind"] == Kind.LATENCY.value]
    if latency:
        lines += ["", "## Latency-bound launches: what is known", ""]
        lines += [f"- launch {r['launch_id']} (`{_cell(_short(r['kernel_name'], 40))}`): SM {r['sm_pct']:.0f}%, memory "
                  f"{r['memory_pct']:.0f}% of peak; " + "; ".join(r["reasons"]) for r in latency]
    if kernel_rows:
        lines += ["", "## By kernel, weighted by GPU time (nsys)", "",
                  "Each kernel of the trace with its total GPU time and the limiter of its profiled launches "
                  "(the class holding most of their ncu time; its longest launch stands for it).", "",
                  "| kernel | GPU ms | share of kernel time | launches | profiled | kind | unit | % of peak | "
                  "floor ratio | occupancy | waves per SM |",
                  "|---|---:|---:|---:|---:|---|---|---:|---:|---|---:|"]
        for r in kernel_rows:
            lines.append(f"| `{_cell(_key(r['kernel_name']))}` | {r['gpu_time_ns'] / 1e6:,.3f} | "
                         f"{r['share_of_kernel_time']:.1%} | {r['launches']} | {r['profiled_launches']} | "
                         f"{r['kind']} | "
                         f"{r['unit'] or '—'} | {_pct(r['pct_of_peak'])} | {_ratio(r['floor_ratio'])} | "
                         f"{_occupancy(r)} | {_waves(r['waves'])} |")
        weights: dict[str, float] = {}
        for r in kernel_rows:
            label = r["kind"] + (f" ({r['unit']})" if r["unit"] else "")
            weights[label] = weights.get(label, 0.0) + r["share_of_kernel_time"]
        lines += ["", "Kernel time by limiter: " + ", ".join(
            f"{label} {share:.0%}" for label, share in sorted(weights.items(), key=lambda kv: -kv[1])) + "."]
    if trace_rows:
        window = trace_rows[0]["window_ns"]
        lines += ["", f"GPU active window (first GPU operation to the last, nsys): {window / 1e6:,.3f} ms. "
                  + " ".join(f"{r['kind']}: {r['time_ns'] / 1e6:,.3f} ms ({r['share_of_window']:.1%}). {r['advice']}"
                             for r in trace_rows)]
    return "\n".join(lines) + "\n"


def _flat(r: dict) -> dict:
    out = {k: v for k, v in r.items() if k not in ("occupancy", "reasons", "ncu_rules")}
    occ = r.get("occupancy") or {}
    out.update({"occupancy_achieved_pct": occ.get("achieved_pct"),
                "occupancy_theoretical_pct": occ.get("theoretical_pct"),
                "occupancy_limiter": occ.get("limiter"), "reasons": "; ".join(r.get("reasons") or []),
                "ncu_rules": ";".join(f["rule"] for f in r.get("ncu_rules") or [])})
    return out


def format_csv(records: list[dict]) -> str:
    flat = [_flat(r) for r in records]
    columns = list(dict.fromkeys(k for r in flat for k in r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, columns, lineterminator="\n")
    w.writeheader()
    for r in flat:
        w.writerow({k: "" if r.get(k) is None else (format(r[k], ".6g") if isinstance(r[k], float) else r[k])
                    for k in columns})
    return buf.getvalue()


def run(ncu_path: str, nsys_path: str | None = None, fmt: str = "md", raw_page: str | None = None) -> str:
    """The diagnosis as text in ``fmt``. JSON: a list of objects, the launches in launch order (scope
    ``launch``), then with ``nsys_path`` the kernels by GPU time (scope ``kernel``) and the window's
    host-link and launch/host shares (scope ``trace``)."""
    launches = read_launches(ncu_path, raw_page)
    if launches and launches[0].name_source == NAMES_FROM_REPORT_MODULE:
        print(f"diagnose: kernel names are {NAMES_FROM_REPORT_MODULE} (no raw page beside {ncu_path} and no ncu "
              "installed)", file=sys.stderr)
    diags = diagnose_launches(launches)
    launch_rows = [launch_record(d) for d in diags]
    kernel_rows: list[dict] = []
    trace_rows: list[dict] = []
    if nsys_path:
        kernels, shares = diagnose_trace(nsys_path, diags)
        kernel_rows = [kernel_record(k) for k in kernels]
        trace_rows = trace_records(shares)
        if not any(k.profiled_launches for k in kernels):
            print(f"diagnose: none of the {len(diags)} launches of {ncu_path} is a kernel of {nsys_path}: "
                  "captures of two different programs?", file=sys.stderr)
    if fmt == "json":
        return json.dumps(launch_rows + kernel_rows + trace_rows, indent=1) + "\n"
    if fmt == "csv":
        return format_csv(launch_rows + kernel_rows + trace_rows)
    return format_md(ncu_path, launch_rows, kernel_rows, trace_rows)
