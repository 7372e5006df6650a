"""The same recipes on two GPUs: which steps scale with memory bandwidth, which with the compute
rate, which with neither (host link, launches, synchronisation), told from the measured limiters.

Input: the step comparison of two references (:func:`analysis.model.compare.compare_folders`, base = GPU A,
candidate = GPU B) and each side's measured ceilings. For each step the measured limiter on GPU A
names the resource that should set its time; the ratio of that resource's measured rate on the two
GPUs (B / A, from each reference's ``ceilings.json``) is what the step's speedup A→B should be if the
limiter is right. The page puts the two side by side:

- **scales with its limiter**: the speedup's interval lies within ``AGREEMENT`` of the rate ratio;
- **does not follow its limiter**: it lies outside (the limiter moved, or the step is not at that
  resource's rate: clocks, caches, launch gaps);
- **no single rate**: the limiter is latency/occupancy, launch/host, synchronisation or L2, for which
  the suite measures no rate ceiling; the page shows the speedup and the limiter.

Everything here is a measurement: the limiters from ncu/nsys, the rates from the ceilings each
reference measured in its own run.
"""
from __future__ import annotations

import dataclasses
import os

from analysis.model.compare import Comparison, StepComparison
from analysis.model.compare_steps import nearest_ceilings
from analysis.report.compare_text import only_on_one_side
from analysis.model.run_summary import load_json
from analysis.model.limiter import Kind, Unit
from analysis.report.markdown import provenance_table, table

#: how far a speedup may sit from the rate ratio and still be said to scale with it: the rate
#: ceilings themselves are medians of one run per GPU, and a step at 90% of a rate tracks it loosely
AGREEMENT = 0.10

#: measured limiter (kind, unit) -> (ceiling names, the resource in words). The issue slots run at
#: one instruction per scheduler per cycle, the rate the FP32 FMA loop measures (it issues an FMA
#: every cycle), so an issue-bound step scales with that ceiling.
RESOURCES: dict[tuple[Kind, Unit], tuple[tuple[str, ...], str]] = {
    (Kind.MEMORY, Unit.DRAM): (("d2d_copy",), "device-memory bandwidth"),
    (Kind.HOST_LINK, Unit.HOST_LINK): (("h2d_pinned", "d2h_pinned"), "host link (pinned copies)"),
    (Kind.COMPUTE, Unit.FP64): (("fp64_fma",), "FP64 FMA rate"),
    (Kind.COMPUTE, Unit.FMA): (("fp32_fma",), "FP32 FMA rate"),
    (Kind.COMPUTE, Unit.ISSUE): (("fp32_fma",), "FP32 FMA rate (instruction issue)"),
    (Kind.COMPUTE, Unit.TENSOR_BF16): (("bf16_gemm",), "BF16 tensor-core GEMM rate"),
    (Kind.COMPUTE, Unit.TENSOR_FP16): (("fp16_gemm",), "FP16 tensor-core GEMM rate"),
    (Kind.COMPUTE, Unit.TENSOR_TF32): (("tf32_gemm",), "TF32 tensor-core GEMM rate"),
}


@dataclasses.dataclass(frozen=True)
class CrossStep:
    workload: str
    variant: str
    size: int
    speedup: float  # time on GPU A / time on GPU B (> 1: B is faster)
    interval: tuple[float, float]
    limiter_a: str | None
    limiter_b: str | None
    #: each side's measured (kind, unit) (analysis.model.limiter.step_class); None: not measured
    class_a: tuple | None
    class_b: tuple | None
    resource: str | None  # the resource the limiter on A names, in words; None: no rate for it
    rate_ratio: float | None  # that resource's measured rate, B / A
    verdict: str  # "scales with its limiter" | "does not follow its limiter" | "no single rate"


def _rate(entry: dict) -> float | None:
    for key in ("gb_per_s", "tflop_per_s"):
        if isinstance(entry.get(key), (int, float)) and entry[key] > 0:
            return float(entry[key])
    return None


def _resource(limiter_class: tuple | None) -> tuple[tuple[str, ...], str] | None:
    return RESOURCES.get(tuple(limiter_class)) if limiter_class else None


def cross_step(s: StepComparison, root_a: str, root_b: str) -> CrossStep:
    lim_a, lim_b = s.base.limiter, s.cand.limiter
    lo, hi = s.verdict.interval
    found = _resource(s.base.limiter_class)
    resource = ratio = None
    verdict = "no single rate"
    if found:
        names, resource = found
        ca = nearest_ceilings(os.path.dirname(s.base.path), root_a) or {}
        cb = nearest_ceilings(os.path.dirname(s.cand.path), root_b) or {}
        ratios = [_rate(cb[n]) / _rate(ca[n]) for n in names
                  if n in ca and n in cb and _rate(ca[n]) and _rate(cb[n])]
        if ratios:
            ratio = sum(ratios) / len(ratios)
            inside = ratio * (1 - AGREEMENT) <= lo and hi <= ratio * (1 + AGREEMENT)
            verdict = "scales with its limiter" if inside else "does not follow its limiter"
        else:
            resource = f"{resource} (not measured on both GPUs)"
    return CrossStep(s.base.workload, s.base.variant, s.base.size, s.verdict.ratio, (lo, hi), lim_a, lim_b,
                     s.base.limiter_class, s.cand.limiter_class, resource, ratio, verdict)


def cross_steps(c: Comparison) -> list[CrossStep]:
    return [cross_step(s, c.base_root, c.cand_root) for s in c.steps]


def _preflight(root: str) -> dict:
    return load_json(os.path.join(root, "preflight.json"))


def _gpu(preflight: dict, root: str) -> str:
    gpus = (preflight.get("provenance") or {}).get("gpus") or []
    return gpus[0]["name"] if gpus and gpus[0].get("name") else os.path.basename(root.rstrip("/"))


def markdown(c: Comparison) -> str:

    steps = cross_steps(c)
    pre_a, pre_b = _preflight(c.base_root), _preflight(c.cand_root)
    gpu_a, gpu_b = _gpu(pre_a, c.base_root), _gpu(pre_b, c.cand_root)
    rows = []
    for x in steps:
        rows.append((x.workload, f"`{x.variant}`", x.size,
                     f"{x.speedup:.3g}× [{x.interval[0]:.3g}, {x.interval[1]:.3g}]",
                     # the other side's label only where its (kind, unit) differs: the shares move with noise
                     (x.limiter_a or "not captured") + ("" if x.class_b == x.class_a
                                                        else f" → {x.limiter_b or 'not captured'}"),
                     x.resource or "—", f"{x.rate_ratio:.3g}×" if x.rate_ratio else "—", f"**{x.verdict}**"))
    counts = {k: sum(1 for x in steps if x.verdict == k)
              for k in ("scales with its limiter", "does not follow its limiter", "no single rate")}
    by_resource: dict[str, list[str]] = {}
    for x in steps:
        if x.verdict == "scales with its limiter":
            by_resource.setdefault(x.resource, []).append(f"{x.workload}/`{x.variant}`")
    lines = [
        f"# The same recipes on two GPUs: {gpu_a} and {gpu_b}",
        "",
        f"Speedup = time on the {gpu_a} / time on the {gpu_b} (below 1: the {gpu_b} is slower), with the "
        "interval of the verdict engine the reports use. The **rate ratio** is the measured rate of the "
        f"resource that the step's limiter on the {gpu_a} names, {gpu_b} / {gpu_a}, from the ceilings each "
        f"reference measured in its own run. A step **scales with its limiter** when its speedup's interval "
        f"lies within ±{AGREEMENT:.0%} of that ratio; limiters with no rate ceiling (latency/occupancy, "
        "launch/host, synchronisation, L2) have **no single rate**: their speedup follows clocks, SM count "
        "and the host, not one number.",
        "",
        f"- base: `{c.base_root}`; candidate: `{c.cand_root}`; {len(steps)} steps in both: "
        + ", ".join(f"{n} {k}" for k, n in counts.items()),
    ]
    for resource, names in sorted(by_resource.items()):
        lines.append(f"- scale with the {resource}: " + ", ".join(names))
    lines += [
        "",
        table(("recipe", "step", "size", f"speedup {gpu_a} → {gpu_b} [interval]", "measured limiter",
               "resource", "rate ratio", "verdict"), rows),
    ]
    lines += only_on_one_side(c, f"Only on the {gpu_a}", f"Only on the {gpu_b}")
    lines += ["", "## Provenance", ""]
    for gpu, root, pre in ((gpu_a, c.base_root, pre_a), (gpu_b, c.cand_root, pre_b)):
        lines += [f"{gpu} (`{root}`):", "", provenance_table(pre["provenance"], pre.get("tools")), ""]
    return "\n".join(lines).rstrip("\n") + "\n"
