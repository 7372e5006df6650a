"""A hierarchical roofline per recipe, from what Nsight Compute measured.

Each profiled kernel is placed by its own executed FLOPs of its own precision (the precision it
executes most: FP64, FP32, or tensor-core BF16/FP16/TF32) over its duration, and by its bytes at
each memory level (DRAM, L2, L1: the levels of ncu's hierarchical roofline sections), so one
kernel is three points on one horizontal line. The roofs are the device's peaks at the clocks the
kernels ran at (ncu's peak metrics and clocks: dashed, labelled as peaks) for every precision
the kernels execute and for each memory level, and the suite's own measured rates where it has
them (device-to-device copy, FP64 FMA: solid). Kernels that execute no floating-point work are
listed beside the chart, not drawn.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from analysis import limiter

LEVELS = ("DRAM", "L2", "L1")

#: kernels executing fewer FLOPs than this are bookkeeping (index setup, bounds, a scalar): under a
#: microsecond of work even at 1 TFLOP/s; they are listed beside the chart rather than drawn, where
#: they would stretch the axes over decades with no bearing on the recipe's time
MIN_FLOPS = 1e6
LEVEL_MARKERS = {"DRAM": "o", "L2": "s", "L1": "^"}


#: the suite's measured rate (ceilings.json) for each precision a kernel can execute
MEASURED_COMPUTE = {"FP64": "fp64_fma", "FP32": "fp32_fma", "BF16 tensor": "bf16_gemm", "FP16 tensor": "fp16_gemm",
                    "TF32 tensor": "tf32_gemm"}


@dataclasses.dataclass(frozen=True)
class Point:
    variant: str
    kernel: str
    precision: str  # "FP64", "FP32", "BF16 tensor", ...
    flops: float
    duration_ns: float
    bytes_by_level: dict[str, float]

    @property
    def flop_per_s(self) -> float:
        return self.flops / (self.duration_ns * 1e-9)

    def intensity(self, level: str) -> float | None:
        b = self.bytes_by_level.get(level)
        return self.flops / b if b else None


@dataclasses.dataclass(frozen=True)
class Roofline:
    points: list[Point]
    integer_only: list[tuple[str, str]]  # (variant, kernel): no FP work to place
    negligible: list[tuple[str, str]]  # (variant, kernel): under MIN_FLOPS
    peaks: dict[str, float]  # limiter.device_peaks keys: "DRAM bytes/s", "FP64 FLOP/s", ...
    size: int | None


def _profiled_size(by_size: dict[int, Sequence[dict]]) -> int | None:
    sizes = [s for s, runs in by_size.items() if any(r.get("ncu") for r in runs)]
    return max(sizes) if sizes else None


def roofline(by_size: dict[int, Sequence[dict]]) -> Roofline:
    """The points and roofs of a recipe's kernels at its largest ncu-profiled size: each (variant,
    kernel) once, from its first profiled launch."""
    size = _profiled_size(by_size)
    points, integer_only, negligible, peaks = [], [], [], {}
    for run in by_size.get(size, []) if size is not None else []:
        seen = set()
        for launch in run.get("ncu") or []:
            m = launch["metrics"]
            name = launch["kernel_name"]
            if name in seen or not m.get("gpu__time_duration.sum"):
                continue
            seen.add(name)
            if not peaks:
                peaks = limiter.device_peaks(m)
            flops = limiter.flops_by_precision(m)
            if not flops:
                integer_only.append((run["variant"], name))
                continue
            precision, count = max(flops.items(), key=lambda kv: kv[1])
            if count < MIN_FLOPS:
                negligible.append((run["variant"], name))
                continue
            points.append(Point(run["variant"], name, precision, count, float(m["gpu__time_duration.sum"]),
                                limiter.bytes_by_level(m)))
    return Roofline(points, integer_only, negligible, peaks, size)


def roofs(r: Roofline, ceilings: dict) -> tuple[list[tuple[str, float, bool]], list[tuple[str, float, bool]]]:
    """(compute roofs, memory roofs) to draw: (label, rate, measured?) with FLOP/s and bytes/s.
    Compute roofs only for the precisions the kernels execute."""
    precisions = sorted({p.precision for p in r.points})
    compute = [(f"{prec} peak", r.peaks[f"{prec} FLOP/s"], False) for prec in precisions
               if f"{prec} FLOP/s" in r.peaks]
    for prec in precisions:
        key = MEASURED_COMPUTE.get(prec)
        if key in ceilings:
            compute.append((f"{prec}, measured ({key})", ceilings[key]["tflop_per_s"] * 1e12, True))
    memory = [(f"{level} peak", r.peaks[f"{level} bytes/s"], False) for level in LEVELS
              if f"{level} bytes/s" in r.peaks]
    if "d2d_copy" in ceilings:
        memory.append(("device-to-device copy, measured", ceilings["d2d_copy"]["gb_per_s"] * 1e9, True))
    return compute, memory


def _short(name: str, limit: int = 36) -> str:
    base = limiter.kernel_key(name).split("(")[0]
    return base if len(base) <= limit else base[:limit - 1] + "…"


def figure(by_size: dict[int, Sequence[dict]], ceilings: dict, path: str, title: str) -> None:
    """Draw the recipe's hierarchical roofline to ``path`` (PNG)."""
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    from analysis.figures import _save

    r = roofline(by_size)
    compute, memory = roofs(r, ceilings)
    fig, ax = plt.subplots(figsize=(10.5, 5.4))
    xs = [x for p in r.points for level in LEVELS if (x := p.intensity(level))]
    ys = [p.flop_per_s for p in r.points]
    if r.points:
        top = max(rate for _, rate, _ in compute) if compute else max(ys)
        ridges = [c / m for _, c, _ in compute for _, m, _ in memory]
        lo_x = min(xs + ridges) / 3
        hi_x = max(xs + ridges) * 3
        lo_y, hi_y = min(ys) / 5, top * 3
        grid = [lo_x * (hi_x / lo_x) ** (i / 200) for i in range(201)]
        styles = ["#333333", "#8c564b", "#1f77b4", "#2ca02c"]
        for i, (label, bw, measured) in enumerate(memory):
            ax.plot(grid, [bw * x for x in grid], linestyle="-" if measured else "--", color=styles[i % 4],
                    linewidth=1.0)
            y_label = lo_y * 2 * 2.5 ** i  # one height per roof, so that the labels do not overlap
            ax.text(max(lo_x * 1.2, y_label / bw * 1.1), y_label, f"{label} {bw / 1e9:,.0f} GB/s", fontsize=7,
                    color=styles[i % 4])
        for label, peak, measured in compute:
            ax.axhline(peak, linestyle="-" if measured else "--", color="#555555", linewidth=1.0)
            # peaks labelled above their line, measured rates below, so that close pairs stay legible
            ax.text(hi_x / 1.5, peak * (0.93 if measured else 1.08), f"{label} {peak / 1e12:.1f} TFLOP/s", fontsize=7,
                    ha="right", va="top" if measured else "bottom")
        colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b2", "#937860", "#da8bc3", "#8c8c8c"]
        for i, p in enumerate(r.points):
            color = colors[i % len(colors)]
            for level in LEVELS:
                x = p.intensity(level)
                if x:
                    ax.scatter([x], [p.flop_per_s], marker=LEVEL_MARKERS[level], s=40, color=color, zorder=3,
                               label=f"{p.variant}: {_short(p.kernel)} ({p.precision})" if level == "DRAM" else None)
        ax.set_xlim(lo_x, hi_x)
        ax.set_ylim(lo_y, hi_y)
        ax.legend(fontsize=6.5, loc="lower left", bbox_to_anchor=(1.01, 0.0), frameon=False,
                  title="marker: o DRAM, s L2, ^ L1 bytes", title_fontsize=6.5)
    else:
        ax.text(0.5, 0.5, "no floating-point kernel profiled by ncu", transform=ax.transAxes, ha="center")
    side = ""
    if r.integer_only:
        side += "integer-only kernels\n(not drawn):\n" + "\n".join(f"{v}: {_short(k, 28)}" for v, k in r.integer_only[:10])
    if r.negligible:
        side += ("\n\n" if side else "") + f"under {MIN_FLOPS:.0e} FLOPs\n(not drawn):\n" + \
            "\n".join(f"{v}: {_short(k, 28)}" for v, k in r.negligible[:10])
    if side:
        fig.text(0.64, 0.9, side, fontsize=6.5, ha="left", va="top")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("arithmetic intensity (FLOPs per byte at each memory level, ncu)")
    ax.set_ylabel("achieved FLOP/s (ncu)")
    size = f", size {r.size}" if r.size is not None else ""
    ax.set_title(f"{title}: hierarchical roofline{size}\n(dashed: device peaks from ncu; solid: rates measured by the "
                 "suite)", fontsize=9)
    # the right third holds the legend (lower) and the kernels not drawn (upper)
    fig.subplots_adjust(left=0.07, right=0.62, top=0.9, bottom=0.1)
    _save(fig, path)


def markdown_lines(by_size: dict[int, Sequence[dict]], ceilings: dict) -> list[str]:
    """The chart's numbers as a table (each kernel, its precision, FLOP/s, bytes per level) and the
    integer-only kernels, for the report beside the figure."""
    from analysis.markdown import table

    r = roofline(by_size)
    if not r.points and not r.integer_only and not r.negligible:
        return []
    compute, memory = roofs(r, ceilings)
    rows = []
    for p in r.points:
        peak = r.peaks.get(f"{p.precision} FLOP/s")
        rows.append((f"`{p.variant}`", f"`{_short(p.kernel, 60)}`", p.precision, f"{p.flop_per_s / 1e12:.3f}",
                     f"{p.flop_per_s / peak:.0%}" if peak else "n/a",
                     *(f"{p.bytes_by_level[lv] / 1e6:,.1f}" if lv in p.bytes_by_level else "n/a" for lv in LEVELS)))
    lines = [f"Hierarchical roofline at size {r.size} (figure below): each kernel at its own measured FLOPs of the "
             "precision it executes most, over its bytes at each memory level (ncu). Roofs: "
             + "; ".join([f"{label} {rate / 1e12:.1f} TFLOP/s" for label, rate, _ in compute]
                         + [f"{label} {rate / 1e9:,.0f} GB/s" for label, rate, _ in memory])
             + " (peaks: ncu's peak rates at the clocks the kernels ran at).", ""]
    if rows:
        lines += [table(("variant", "kernel", "precision", "achieved TFLOP/s", "of that peak", "DRAM MB", "L2 MB",
                         "L1 MB"), rows), ""]
    if r.integer_only:
        lines += ["Integer-only kernels (no floating-point work: listed, not drawn): "
                  + ", ".join(f"`{v}`: `{_short(k, 60)}`" for v, k in r.integer_only) + ".", ""]
    if r.negligible:
        lines += [f"Kernels under {MIN_FLOPS:.0e} FLOPs (bookkeeping: listed, not drawn): "
                  + ", ".join(f"`{v}`: `{_short(k, 60)}`" for v, k in r.negligible) + ".", ""]
    return lines
