"""Report section: the float steps' matmul rate at the largest size, against the ceilings measured
in the same run (workloads.harness.ceilings).

Two rates per variant: the largest product's kernel alone (2 N^3 FLOPs over the duration nsys
recorded for the call's longest kernel, the N-side product), and the whole loop as timed (the
loop's FLOPs over the timed median, host timer with block_until_ready). The goal: bf16 reaches at
least 80% of ``fp16_gemm`` (CuPy float16 8192^3 matmul through cuBLAS, CUDA events), judged on the
kernel: the ceiling is one GEMM timed alone, kernel against kernel; the loop's rate is shown
beside it. ``bf16_gemm`` (cublasGemmEx, bfloat16 in, float32 out: what XLA asks cuBLAS for) is
shown too where the run measured it. float32 is set against ``fp32_fma``, tf32 against ``tf32_gemm``
(cuBLAS float32 with TF32 math on the tf32 step's inputs) where the run measured it.
"""
from __future__ import annotations

import statistics

from analysis.common.errors import AnalysisInputError
from analysis.common import layout
from analysis.report.markdown import table
from analysis.readers.nsys import Trace
from analysis.report.sections import jax_matmul_readers as readers

RECIPE = "jax_matmul"

#: what render() reads, relative to the capture folder, beyond the run folders and ceilings (inputs of the report): the report rule's inputs
INPUTS: tuple[str, ...] = ()
#: the figures render() writes into its figure folder (the report rule's outputs)
FIGURES: tuple[str, ...] = ()
GOAL = 0.80
#: variant -> the ceiling its goal and floor are measured against, and the like-for-like one if any
CEILING_OF = {"bf16": ("fp16_gemm", "bf16_gemm"), "float32": ("fp32_fma", None), "tf32": ("tf32_gemm", None)}


def summarize(workload_root: str) -> list[dict]:
    """Per float variant, at its largest size with a run folder: kernel and loop rates, ceilings, ratios."""
    folders = readers.run_folders(workload_root)
    ceil = readers.ceilings(workload_root)
    if "fp16_gemm" not in ceil:
        raise AnalysisInputError(workload_root, "the run's ceilings.json has no fp16_gemm (workloads.harness.ceilings "
                                                "measures it)")
    rows = []
    for variant, (key, like_key) in CEILING_OF.items():
        if variant not in folders:
            continue
        size = max(folders[variant])
        run_dir = folders[variant][size]
        with Trace(layout.nsys_export(run_dir)) as ex:
            calls = readers.steady(readers.compute_calls(ex, RECIPE, variant))
        kernels = [c.longest for c in calls if c.longest is not None]
        if not kernels:
            raise AnalysisInputError(layout.nsys_export(run_dir), f"no kernel inside {variant}'s compute ranges: "
                                     "were CUDA graphs traced as a whole? (nsys --cuda-graph-trace=node)")
        kernel_ns = statistics.median(k.duration_ns for k in kernels)
        rec = readers.timing(run_dir)
        loop_flops = rec["work"]["flops"]
        median_ms = rec["timing"]["median_ms"]
        ceiling = ceil.get(key, {}).get("tflop_per_s")
        like = ceil.get(like_key, {}).get("tflop_per_s") if like_key else None
        kernel_tflops = 2 * size ** 3 / kernel_ns / 1e3
        loop_tflops = loop_flops / median_ms / 1e9
        rows.append({
            "variant": variant, "size": size, "kernel_name": kernels[-1].name, "kernel_ms": kernel_ns / 1e6,
            "kernel_tflops": kernel_tflops, "loop_flops": loop_flops, "median_ms": median_ms,
            "loop_tflops": loop_tflops, "ceiling_name": key, "ceiling_tflops": ceiling,
            "kernel_share": kernel_tflops / ceiling if ceiling else None,
            "loop_share": loop_tflops / ceiling if ceiling else None,
            "floor_ms": loop_flops / ceiling / 1e9 if ceiling else None,
            "like_name": like_key, "like_tflops": like,
            "kernel_share_of_like": kernel_tflops / like if like else None,
            "kernel_is_library_gemm": readers.is_library_gemm(kernels[-1].name),
        })
    if not rows:
        raise AnalysisInputError(workload_root, "no run folder of bf16, float32 or tf32")
    return rows


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def verdict(row: dict) -> str:
    """The bf16 goal (>= 80% of fp16_gemm on the kernel), with the reason the numbers give."""
    k, lp = row["kernel_share"], row["loop_share"]
    if k >= GOAL:
        tail = (f"; the loop as timed reaches {_pct(lp)} (the smaller products, the dispatch and the host "
                f"timer add {row['median_ms'] - row['kernel_ms']:.3f} ms to the {row['kernel_ms']:.3f} ms kernel)")
        return (f"**reaches** the goal: the N = {row['size']} product runs at {_pct(k)} of "
                f"`{row['ceiling_name']}`{tail}.")
    why = ("XLA's kernel is not a GEMM library kernel" if not row["kernel_is_library_gemm"]
           else "XLA chose a GEMM kernel slower than the one cuBLAS picks for CuPy")
    return (f"**misses** the goal: the N = {row['size']} product runs at {_pct(k)} of `{row['ceiling_name']}` "
            f"(`{row['kernel_name']}`): {why}.")


def render(workload_root: str, figure_dir: str) -> str:
    rows = summarize(workload_root)
    out = ["## Matmul rate against the measured ceilings", "",
           "The largest product's kernel (2 N³ FLOPs over its nsys duration, median over the steady calls) and "
           "the whole loop as timed (its FLOPs over the timed median, host timer with block_until_ready), against "
           "the ceilings measured in the same run: `fp16_gemm` (CuPy float16 8192³ matmul through cuBLAS, CUDA "
           "events) for bf16, `fp32_fma` for float32; `bf16_gemm` is cuBLAS on bfloat16 inputs with float32 "
           "output, the same call XLA makes. The floor is the loop's FLOPs at the ceiling. A ceiling is the median "
           "of 20 products run back to back; the recipe's kernel runs once per call, after idle gaps, and can "
           "run at a higher clock: more than 100% is possible.", ""]
    out.append(table(
        ("variant", "N", "largest kernel", "kernel ms", "kernel TFLOP/s", "loop ms (timed)", "loop TFLOP/s",
         "ceiling TFLOP/s", "kernel / ceiling", "loop / ceiling", "floor ms", "kernel / bf16_gemm"),
        [(r["variant"], r["size"], f"`{r['kernel_name']}`", f"{r['kernel_ms']:.3f}", f"{r['kernel_tflops']:.1f}",
          f"{r['median_ms']:.3f}", f"{r['loop_tflops']:.1f}",
          f"{r['ceiling_name']} {r['ceiling_tflops']:.1f}" if r["ceiling_tflops"] else f"{r['ceiling_name']} n/a",
          _pct(r["kernel_share"]), _pct(r["loop_share"]),
          "n/a" if r["floor_ms"] is None else f"{r['floor_ms']:.3f}",
          "" if r["like_name"] is None else _pct(r["kernel_share_of_like"])) for r in rows]))
    out.append("")
    for r in rows:
        if r["variant"] == "bf16":
            out.append(f"Goal, bf16 at N = {r['size']} ≥ {100 * GOAL:.0f}% of `fp16_gemm`: {verdict(r)}")
    return "\n".join(out) + "\n"
