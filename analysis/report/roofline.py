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

from matplotlib.lines import Line2D

from analysis.model import limiter
from analysis.readers import ncu_metrics as metrics
from analysis.report import plotting
from analysis.report.plotting import matplotlib, plt

LEVELS = ("DRAM", "L2", "L1")

#: kernels executing fewer FLOPs than this are bookkeeping (index setup, bounds, a scalar): under a
#: microsecond of work even at 1 TFLOP/s; they are listed beside the chart rather than drawn, where
#: they would stretch the axes over decades with no bearing on the recipe's time
MIN_FLOPS = 1e6
LEVEL_MARKERS = {"DRAM": "o", "L2": "s", "L1": "^"}


#: the suite's measured rate (ceilings.json) for each precision a kernel can execute
MEASURED_COMPUTE = {"FP64": "fp64_fma", "FP32": "fp32_fma", "BF16 tensor": "bf16_gemm", "FP16 tensor": "fp16_gemm",
                    "TF32 tensor": "tf32_gemm"}


#: a level that carried under this share of the next deeper level's bytes was bypassed (TMA and
#: cp.async copy global memory to shared memory past the L1 load path): its intensity describes no
#: traffic of the kernel, and drawn it would sit decades right of every roof
BYPASSED_SHARE = 0.1
#: the level each level's traffic passes through next, deeper in the hierarchy
DEEPER = {"L1": "L2"}


@dataclasses.dataclass(frozen=True)
class Point:
    variant: str
    kernel: str
    precision: str  # "FP64", "FP32", "BF16 tensor", ...
    flops: float
    duration_ns: float
    bytes_by_level: dict[str, float]
    #: the device's peaks at the clocks this launch ran at (limiter.device_peaks of its own metrics)
    peaks: dict[str, float] = dataclasses.field(default_factory=dict)
    sm_clock_hz: float | None = None
    #: the clock of each memory level during this launch (the L1's is the SM's)
    level_clocks_hz: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def flop_per_s(self) -> float:
        return self.flops / (self.duration_ns * 1e-9)

    def intensity(self, level: str) -> float | None:
        b = self.bytes_by_level.get(level)
        return self.flops / b if b else None

    def bypassed(self, level: str) -> bool:
        """Whether the kernel's traffic went past ``level`` (see :data:`BYPASSED_SHARE`)."""
        deeper = DEEPER.get(level)
        mine, theirs = self.bytes_by_level.get(level), self.bytes_by_level.get(deeper) if deeper else None
        return bool(theirs) and (mine or 0.0) < BYPASSED_SHARE * theirs

    def drawn_levels(self) -> list[str]:
        return [level for level in LEVELS if self.intensity(level) and not self.bypassed(level)]


@dataclasses.dataclass(frozen=True)
class Roofline:
    points: list[Point]
    integer_only: list[tuple[str, str]]  # (variant, kernel): no FP work to place
    negligible: list[tuple[str, str]]  # (variant, kernel): under MIN_FLOPS
    #: limiter.device_peaks keys ("DRAM bytes/s", "FP64 FLOP/s", ...): each precision's compute peak at the
    #: clock of the longest launch of that precision, the memory peaks at the clocks of the longest launch
    peaks: dict[str, float]
    size: int | None
    #: the SM clock each precision's peak is taken at, and each memory level's clock (keys "DRAM", "L2", "L1")
    clocks_hz: dict[str, float] = dataclasses.field(default_factory=dict)

    def drawable(self) -> bool:
        """Whether the chart has a point to draw: a figure without one is not written."""
        return bool(self.points)


def _profiled_size(by_size: dict[int, Sequence[dict]]) -> int | None:
    sizes = [s for s, runs in by_size.items() if any(r.get("ncu") for r in runs)]
    return max(sizes) if sizes else None


def roofline(by_size: dict[int, Sequence[dict]]) -> Roofline:
    """The points and roofs of a recipe's kernels at its largest ncu-profiled size: each (variant,
    kernel) once, from its first profiled launch, with the peaks at the clocks that launch ran at."""
    size = _profiled_size(by_size)
    points, integer_only, negligible = [], [], []
    for run in by_size.get(size, []) if size is not None else []:
        seen = set()
        for launch in run.get("ncu") or []:
            m = launch["metrics"]
            name = launch["kernel_name"]
            if name in seen or not m.get("gpu__time_duration.sum"):
                continue
            seen.add(name)
            flops = limiter.flops_by_precision(m)
            if not flops:
                integer_only.append((run["variant"], name))
                continue
            precision, count = max(flops.items(), key=lambda kv: kv[1])
            if count < MIN_FLOPS:
                negligible.append((run["variant"], name))
                continue
            clock = m.get(metrics.SM_CLOCK)
            level_clocks = {level: float(m[c]) for level, _, _, c in metrics.MEMORY_ROOFLINE if m.get(c)}
            points.append(Point(run["variant"], name, precision, count, float(m["gpu__time_duration.sum"]),
                                limiter.bytes_by_level(m), limiter.device_peaks(m),
                                float(clock) if clock else None, level_clocks))
    peaks: dict[str, float] = {}
    clocks: dict[str, float] = {}
    # the roof of a precision is drawn at the clock its own longest launch ran at: clocks differ between
    # launches (power and thermal limits), and a peak at another launch's clock misplaces every point under it
    for p in sorted(points, key=lambda p: p.duration_ns):
        key = f"{p.precision} FLOP/s"
        if key in p.peaks:
            peaks[key] = p.peaks[key]
            if p.sm_clock_hz:
                clocks[p.precision] = p.sm_clock_hz
    if points:
        longest = max(points, key=lambda p: p.duration_ns)
        peaks.update({k: v for k, v in longest.peaks.items() if k.endswith("bytes/s")})
        clocks.update(longest.level_clocks_hz)
    return Roofline(points, integer_only, negligible, peaks, size, clocks)


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


def _clock(hz: float | None) -> str:
    return f" at {hz / 1e9:.2f} GHz" if hz else ""


def _on_line_angle(ax, slope_point: tuple[float, float], other: tuple[float, float]) -> float:
    """The angle on screen, in degrees, of the line through two data points (log axes bend nothing)."""
    import math

    (x0, y0), (x1, y1) = ax.transData.transform([slope_point, other])
    return math.degrees(math.atan2(y1 - y0, x1 - x0))


def _not_drawn(r: Roofline) -> list[str]:
    """The kernels the chart leaves out and why, one text block per reason."""
    out = []
    bypassed = [(p.variant, p.kernel) for p in r.points for level in LEVELS if p.bypassed(level)]
    if bypassed:
        out.append(f"L1 point not drawn: L1 bytes under {BYPASSED_SHARE:.0%} of L2's\n(the traffic went past L1: TMA, "
                   "cp.async)\n" + "\n".join(f"{v}: {_short(k, 36)}" for v, k in bypassed[:8]))
    if r.integer_only:
        out.append("not drawn, integer-only:\n" + "\n".join(f"{v}: {_short(k, 36)}" for v, k in r.integer_only[:8]))
    if r.negligible:
        out.append(f"not drawn, under {MIN_FLOPS:.0e} FLOPs:\n"
                   + "\n".join(f"{v}: {_short(k, 36)}" for v, k in r.negligible[:8]))
    return out


def figure(by_size: dict[int, Sequence[dict]], ceilings: dict, path: str, title: str) -> bool:
    """Draw the recipe's hierarchical roofline to ``path`` (PNG); False, and nothing written, when no
    kernel has floating-point work to place (:meth:`Roofline.drawable`)."""
    r = roofline(by_size)
    if not r.drawable():
        return False
    compute, memory = roofs(r, ceilings)
    side = _not_drawn(r)
    legend_rows = -(-(len(r.points) + len(LEVELS)) // 2)
    # heights in inches, top to bottom: title, axes, x label, legend, the kernels not drawn; the legend
    # and the list go below the axes, off the data, whatever their length
    h_title, h_axes, h_xlabel = 0.55, 4.0, 0.55
    h_legend = 0.17 * legend_rows + 0.1
    h_side = 0.115 * max((g.count("\n") + 1 for g in side), default=0) + (0.15 if side else 0.0)
    height = h_title + h_axes + h_xlabel + h_legend + h_side
    fig = plt.figure(figsize=(10, height))
    ax = fig.add_axes((0.08, (h_xlabel + h_legend + h_side) / height, 0.9, h_axes / height))
    drawn = [(p, level) for p in r.points for level in p.drawn_levels()]
    xs = [p.intensity(level) for p, level in drawn]
    ys = [p.flop_per_s for p in r.points]
    top = max(rate for _, rate, _ in compute) if compute else max(ys)
    ridges = [c / m for _, c, _ in compute for _, m, _ in memory]
    lo_x, hi_x = min(xs + ridges) / 3, max(xs + ridges) * 3
    lo_y, hi_y = min(ys) / 5, top * 3
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo_x, hi_x)
    ax.set_ylim(lo_y, hi_y)
    label_box = dict(boxstyle="square,pad=0.1", facecolor="white", edgecolor="none", alpha=0.75)
    styles = ["#333333", "#8c564b", "#1f77b4", "#2ca02c"]
    for i, (label, bw, measured) in enumerate(memory):
        color = styles[i % 4]
        ax.plot([lo_x, hi_x], [bw * lo_x, bw * hi_x], linestyle="-" if measured else "--", color=color,
                linewidth=1.0, zorder=1)
        # the label sits on its own line, where the line is in view, each roof at another height
        x_from, x_to = max(lo_x, lo_y / bw), min(hi_x, hi_y / bw)
        if x_from >= x_to:
            continue
        x = x_from * (x_to / x_from) ** (0.06 + 0.16 * i)
        level = label.split(" peak")[0]
        # DRAM's own clock is the memory's, not one a reader compares across launches
        clock = "" if measured or level == "DRAM" else _clock(r.clocks_hz.get(level))
        ax.text(x, bw * x, f"{label} {bw / 1e9:,.0f} GB/s{clock}", fontsize=7, color=color, ha="left",
                va="bottom", rotation=_on_line_angle(ax, (x, bw * x), (x * 10, bw * x * 10)),
                rotation_mode="anchor", bbox=label_box, zorder=2)
    for label, peak, measured in compute:
        ax.axhline(peak, linestyle="-" if measured else "--", color="#555555", linewidth=1.0, zorder=1)
        precision = label.split(" peak")[0]
        clock = "" if measured else _clock(r.clocks_hz.get(precision))
        # peaks labelled above their line, measured rates below, so that close pairs stay legible
        ax.text(lo_x * 1.15, peak, f"{label} {peak / 1e12:.1f} TFLOP/s{clock}", fontsize=7, ha="left",
                va="top" if measured else "bottom", bbox=label_box, zorder=2)
    # one colour per kernel: tab20 has twenty, more than any recipe profiles at one size
    colors = plt.get_cmap("tab20").colors
    handles = []
    for i, p in enumerate(r.points):
        color = colors[i % len(colors)]
        for level in p.drawn_levels():
            ax.scatter([p.intensity(level)], [p.flop_per_s], marker=LEVEL_MARKERS[level], s=40, color=color,
                       zorder=3)
        handles.append(Line2D([], [], marker="o", linestyle="none", color=color,
                              label=f"{p.variant}: {_short(p.kernel)} ({p.precision})"))
    handles += [Line2D([], [], marker=LEVEL_MARKERS[level], linestyle="none", color="#777777",
                       label=f"{level} bytes") for level in LEVELS]
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.06, (h_legend + h_side) / height), ncol=2,
               fontsize=7, frameon=False)
    for j, group in enumerate(side):
        fig.text(0.08 + 0.31 * j, h_side / height, group, fontsize=6.5, ha="left", va="top")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("arithmetic intensity (FLOPs per byte at each memory level, ncu)")
    ax.set_ylabel("achieved FLOP/s (ncu)")
    ax.set_title(f"{title}: hierarchical roofline, size {r.size}\n(dashed: device peaks from ncu at the clock the "
                 "launches ran at; solid: rates measured by the suite)", fontsize=9)
    plotting.save_figure(fig, path)
    return True
