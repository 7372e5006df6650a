"""Report section: what the nsys traces of the JAX matmul loop show, per variant and size.

For every run folder of the recipe: per call (the steady ``compute`` ranges, the first call of a
process left out: it compiles), the call's time as the NVTX range spans it, the GPU operations
inside it, how long the GPU was busy, the mean kernel, the CUDA API calls and launches made, and
the longest kernel by name. The markdown says from these numbers whether the call is bound by
dispatch (the GPU idle most of the call) and which kernel does the int32 dot.
"""
from __future__ import annotations

import os
import statistics

from analysis.common import layout
from analysis.report.markdown import table
from analysis.readers.nsys import Trace
from analysis.model.run_summary import captured_in_range, load_json
from analysis.report.sections import jax_matmul_readers as readers
from workloads.jax_matmul import RECIPE as R

RECIPE = "jax_matmul"

#: what render() reads, relative to the capture folder, beyond the run folders (inputs of the run summaries): the report rule's inputs
INPUTS: tuple[str, ...] = ()
#: the figures render() writes into its figure folder (the report rule's outputs)
FIGURES: tuple[str, ...] = ()
#: below this share of the call with the GPU busy, the call is bound by its host side (dispatch)
DISPATCH_BOUND_BUSY = 0.5


def summarize(workload_root: str) -> list[dict]:
    """One row per (variant, size) run folder: medians over the steady calls (pure: files -> numbers)."""

    folders = readers.run_folders(workload_root)
    rows = []
    for variant in [v for v in R.variants if v in folders]:
        for size in sorted(folders[variant]):
            with Trace(layout.nsys_export(folders[variant][size])) as ex:
                calls = readers.compute_calls(ex, RECIPE, variant)
            st = readers.steady(calls)

            def med(f):
                return statistics.median(f(c) for c in st)

            def med_count(f):
                # a count is one call's: the lower median, never the mean of two calls' counts
                return statistics.median_low(f(c) for c in st)

            nsys_run = load_json(os.path.join(folders[variant][size], layout.NSYS_RUN))
            longest = max((c.longest for c in st if c.longest), key=lambda k: k.duration_ns, default=None)
            rows.append({
                "variant": variant, "size": size, "calls": len(calls), "steady_calls": len(st),
                "capture_range": captured_in_range(nsys_run, RECIPE),
                "first_call_ms": calls[0].range_ns / 1e6,
                "call_ms": med(lambda c: c.range_ns) / 1e6,
                "kernels": med_count(lambda c: c.kernels),
                "copies": med_count(lambda c: c.memcpys + c.memsets),
                "kernel_ms": med(lambda c: c.kernel_ns) / 1e6,
                "busy_ms": med(lambda c: c.busy_ns) / 1e6,
                "busy_share": med(lambda c: c.busy_ns / c.range_ns if c.range_ns else 0.0),
                "mean_kernel_us": med(lambda c: (c.mean_kernel_ns or 0.0)) / 1e3,
                "api_calls": med_count(lambda c: c.api_calls),
                "launches": med_count(lambda c: c.launches),
                "graph_launches": med_count(lambda c: c.graph_launches),
                "graph_kernels": med(lambda c: c.graph_kernels),
                "longest_name": longest.name if longest else None,
                "longest_us": med(lambda c: c.longest.duration_ns if c.longest else 0) / 1e3,
                "longest_is_library_gemm": readers.is_library_gemm(longest.name) if longest else None,
                "kernel_names": dict(st[-1].kernel_names),
            })
    return rows


def _n(x: float) -> str:
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}"


def _short(name: str | None, limit: int = 60) -> str:
    if name is None:
        return "none"
    return name if len(name) <= limit else name[:limit - 1] + "…"


def render(workload_root: str, figure_dir: str) -> str:
    rows = summarize(workload_root)
    in_range = {r["capture_range"] for r in rows}
    trace = ("which holds only these calls: `--capture-range=cudaProfilerApi`" if in_range == {True} else
             "whose trace holds the whole process; the calls are read from their NVTX ranges" if in_range == {False}
             else "some traced only inside `--capture-range=cudaProfilerApi`, some whole")
    out = ["## Where the time goes: dispatch, kernels and the int32 dot", "",
           f"Per call of the loop (one `compute` range of the nsys run, {trace}; medians over the calls after "
           "the first, which can pay one-time costs). *Busy* is the time the GPU ran any of the call's work (the union of its "
           "kernels and copies); *API calls* counts every CUDA runtime and driver call made during the call, "
           "on any thread; *launches* the kernel and graph launches among them (XLA runs a jitted program "
           "as a CUDA graph: one `cuGraphLaunch`).", ""]
    out.append(table(
        ("variant", "N", "call ms", "first call ms", "kernels", "copies+memsets", "GPU busy ms", "busy %",
         "mean kernel µs", "API calls", "launches (graphs)", "longest kernel", "longest µs"),
        [(r["variant"], r["size"], f"{r['call_ms']:.3f}", f"{r['first_call_ms']:.1f}", _n(r["kernels"]),
          _n(r["copies"]), f"{r['busy_ms']:.3f}", f"{100 * r['busy_share']:.1f}", f"{r['mean_kernel_us']:.1f}",
          _n(r["api_calls"]), f"{_n(r['launches'])} ({_n(r['graph_launches'])})", f"`{_short(r['longest_name'])}`",
          f"{r['longest_us']:.1f}") for r in rows]))
    out.append("")
    for r in rows:
        if r["variant"] not in ("baseline", "jit"):
            continue
        ops = r["kernels"] + r["copies"]
        idle_us = (r["call_ms"] - r["busy_ms"]) * 1e3
        bound = ("bound by dispatch: the GPU waits for the host" if r["busy_share"] < DISPATCH_BOUND_BUSY
                 else "bound by the GPU's work")
        out.append(f"- {r['variant']}, N = {r['size']}: the GPU is busy {100 * r['busy_share']:.1f}% of the "
                   f"{r['call_ms']:.3f} ms call: {_n(ops)} operations ({_n(r['kernels'])} kernels of "
                   f"{r['mean_kernel_us']:.1f} µs on average) from {_n(r['launches'])} launch(es) and "
                   f"{_n(r['api_calls'])} CUDA API calls, {idle_us / ops if ops else float('nan'):.1f} µs of idle "
                   f"GPU per operation: {bound}.")
    for r in rows:
        if r["longest_name"] is None:
            continue
        kind = ("a GEMM library kernel (cuBLAS/CUTLASS/Triton GEMM by its name)" if r["longest_is_library_gemm"]
                else "not a GEMM library kernel: XLA's own code for the dot, which cannot use the tensor cores")
        rate = 2 * r["size"] ** 3 / (r["longest_us"] * 1e-6) / 1e12 if r["longest_us"] else float("nan")
        out.append(f"- {r['variant']}, N = {r['size']}: the longest kernel, `{r['longest_name']}` "
                   f"({r['longest_us']:.1f} µs; {rate:.2f} T(FL)OP/s if it is the N = {r['size']} product), "
                   f"is {kind}.")
    return "\n".join(out) + "\n"
