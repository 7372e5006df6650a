"""Figures for the reports, drawn from run summaries (never from raw files)."""
from __future__ import annotations

from typing import Sequence

from analysis.model.gpu_jobs import gpu_label_order
from analysis.report import roofline
from analysis.report import plotting
from analysis.report.mdtext import short_kernel_name
from analysis.report.plotting import matplotlib, plt

# Stable colours per kind of GPU time, as Nsight Systems draws them (kernels blue, copies red...)
KIND_COLORS = {"kernel": "#4c72b0", "memcpy": "#c44e52", "memset": "#dd8452", "idle": "#cccccc"}


def _log_if_wide(ax, values, axis: str = "x") -> bool:
    """A log axis when the values span more than 10×: on a linear one the fastest steps vanish."""
    positive = [v for v in values if v > 0]
    wide = bool(positive) and max(positive) / min(positive) > 10
    if wide:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
        # minor tick labels of a log axis spanning about a decade run into each other
        (ax.xaxis if axis == "x" else ax.yaxis).set_minor_formatter(matplotlib.ticker.NullFormatter())
    return wide


def _size_panels(model):
    """A figure with one panel per size of ``model``'s ladder, side by side (largest size first), tall
    enough for the longest ladder: (figure, [(axes, size, steps), ...])."""
    sizes = list(reversed(model.sizes))
    fig, axes = plt.subplots(1, len(sizes), squeeze=False,
                             figsize=(6.2 * len(sizes), 1.1 + 0.45 * max(len(model.ladder[s]) for s in sizes)))
    return fig, [(ax, size, model.ladder[size]) for ax, size in zip(axes[0], sizes)]


def ladder_figure(model, path: str) -> None:
    """The step ladder at each size: each step's median time per call (dot, IQR whiskers) against its
    minimum-work floor (red tick), joined by a line: the gap left; the floor of its measured limiter
    (open diamond) where it has one. Ladder order top to bottom; a log axis where the
    times span more than 10× (a :class:`analysis.model.report_model.ReportModel`; nothing is computed here)."""
    fig, panels = _size_panels(model)
    for ax, size, steps in panels:
        y = list(range(len(steps)))
        for i, s in enumerate(steps):
            ax.plot([s.floor_ms, s.median_ms], [i, i], color="#bbbbbb", linewidth=1.5, zorder=1)
        ax.errorbar([s.median_ms for s in steps], y,
                    xerr=[[s.median_ms - s.q1_ms for s in steps], [s.q3_ms - s.median_ms for s in steps]],
                    fmt="o", color=KIND_COLORS["kernel"], capsize=3, zorder=3, label="median (IQR)")
        ax.scatter([s.floor_ms for s in steps], y, marker="|", s=250, color="#c44e52", zorder=2, linewidths=2.5,
                   label="minimum-work floor")
        limited = [(i, s.limiter.floor_ms) for i, s in enumerate(steps) if s.limiter.floor_ms]
        if limited:
            ax.scatter([ms for _, ms in limited], [i for i, _ in limited], marker="D", s=28, facecolors="none",
                       edgecolors="#8172b2", zorder=2, linewidths=1.5, label="floor of the measured limiter")
        wide = _log_if_wide(ax, [s.median_ms for s in steps] + [s.floor_ms for s in steps]
                            + [ms for _, ms in limited])
        ax.set_yticks(y, [s.variant for s in steps], fontsize=8)
        ax.set_ylim(len(steps) - 0.5, -0.5)
        ax.set_xlabel(f"ms per call, {'log' if wide else 'linear'} scale ({model.timer.split(' (')[0]})", fontsize=8)
        ax.set_title(f"size {size}", fontsize=9)
    bottom = _legend_below(fig, [ax for ax, _, _ in panels])
    _suptitle(fig, f"{model.title}: time per step against its floors")
    fig.tight_layout(rect=(0, bottom, 1, 1))
    plotting.save_figure(fig, path)


def _legend_below(fig, axes) -> float:
    """One legend for all panels, centred under them (off the data); the share of the figure's height
    it takes, for tight_layout's rect."""
    entries: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    if not entries:
        return 0.0
    fig.legend(list(entries.values()), list(entries), loc="lower center", ncol=min(len(entries), 3), frameon=False,
               fontsize=8)
    rows = -(-len(entries) // 3)
    return min(0.4, (0.3 * rows + 0.1) / fig.get_figheight())


def _suptitle(fig, text: str, fontsize: int = 10) -> None:
    """The figure's title, wrapped to the figure's width so that no side of it is cut."""
    import textwrap

    # about 0.085 inch per character at 10 points in matplotlib's default font
    chars = max(30, int(fig.get_figwidth() / (0.085 * fontsize / 10)))
    fig.suptitle(textwrap.fill(text, chars), fontsize=fontsize)


def busy_figure(model, path: str) -> None:
    """Per size and step, a steady call's wall time as 100%: the share the GPU was busy (the union of
    its kernels, copies and memsets: overlapping work counts once) and idle, labelled in ms."""
    fig, panels = _size_panels(model)
    for ax, size, steps in panels:
        y = list(range(len(steps)))
        busy = [100 * s.busy.busy_ms / s.busy.wall_ms if s.busy.wall_ms else 0.0 for s in steps]
        ax.barh(y, busy, color=KIND_COLORS["kernel"], label="GPU busy (union of kernels, copies, memsets)")
        ax.barh(y, [100 - b for b in busy], left=busy, color=KIND_COLORS["idle"], label="GPU idle")
        for i, s in enumerate(steps):
            text = f"{s.busy.busy_ms:.3g} of {s.busy.wall_ms:.3g} ms busy"
            if s.busy.overlap_ms > 0.05 * s.busy.busy_ms:
                text += f"; {s.busy.overlap_ms:.3g} ms of kernels and copies overlapped"
            ax.text(1, i, text, va="center", fontsize=7, color="white")
        ax.set_yticks(y, [s.variant for s in steps], fontsize=8)
        ax.set_ylim(len(steps) - 0.5, -0.5)
        ax.set_xlim(0, 100)
        ax.set_xlabel("% of a steady call's wall time (nsys: NVTX compute range, mean of calls after the first)",
                      fontsize=8)
        ax.set_title(f"size {size}", fontsize=9)
    bottom = _legend_below(fig, [ax for ax, _, _ in panels])
    _suptitle(fig, f"{model.title}: how much of each steady call the GPU was busy")
    fig.tight_layout(rect=(0, bottom, 1, 1))
    plotting.save_figure(fig, path)


# NVTX phases in the colours the workloads give them (workloads/annotate.py PHASE_COLORS)
PHASE_COLORS = {"setup": "#1f77b4", "warmup": "#7f7f7f", "compute": "#2ca02c", "transfer": "#ff7f0e",
                "check": "#9467bd"}
# timeline rows below the NVTX row, as Nsight Systems stacks a GPU's rows, and their colours
GPU_ROWS = {"kernels": KIND_COLORS["kernel"], "memcpy HtoD": "#17becf", "memcpy DtoH": KIND_COLORS["memcpy"],
            "memcpy other": "#8172b2", "memsets": KIND_COLORS["memset"]}


def _time_unit(span_ns: float) -> tuple[str, float]:
    return ("s", 1e9) if span_ns >= 5e9 else ("ms", 1e6) if span_ns >= 5e6 else ("µs", 1e3)


#: the CUDA API row of a compute call: allocations and synchronization stand out
#: (one colour per kind across the whole figure: none repeats a phase's or a GPU row's colour)
API_COLORS = {"allocation": "#e377c2", "sync": "#8c564b", "launch": "#bcbd22", "memcpy": "#aec7e8", "other": "#dddddd"}


def _api_color(name: str) -> str:
    low = name.lower()
    if "alloc" in low or "free" in low:
        return API_COLORS["allocation"]
    if "synchronize" in low:
        return API_COLORS["sync"]
    if "launch" in low:
        return API_COLORS["launch"]
    if "memcpy" in low:
        return API_COLORS["memcpy"]
    return API_COLORS["other"]


def _timeline_panel(ax, rows: dict[str, list], x0: int, x1: int, title: str, min_width: float = 0.0,
                    labels: bool = False) -> None:
    """One panel, rows from the top: ``rows`` maps a row name to (start, end, colour, label) bars;
    rows without bars are left out. Bars narrower than ``min_width`` (of the window) are widened
    so that they show."""
    unit, scale = _time_unit(x1 - x0)
    shown = [name for name, bars in rows.items() if bars]
    width = (x1 - x0) / scale
    # the limits are set below: without this, matplotlib autoscales the view after each of the hundreds
    # of bars, most of the figure's time
    ax.set_autoscale_on(False)
    for y, name in enumerate(shown):
        for start, end, color, label in rows[name]:
            left, w = (start - x0) / scale, max((end - start) / scale, min_width * width)
            # white edges part adjacent bars; on bars widened to show, they would hide the bar
            edge = "white" if (labels or name == "NVTX") and w > 0.01 * width else "none"
            ax.broken_barh([(left, w)], (y - 0.4, 0.8), facecolors=color, edgecolors=edge, linewidth=0.6)
            if labels and label and w > 0.12 * width:
                ax.text(left + w / 2, y, label[:36], ha="center", va="center", fontsize=7, color="white",
                        clip_on=True)
    ax.set_yticks(range(len(shown)), shown, fontsize=8)
    ax.set_ylim(len(shown) - 0.5, -0.5)
    ax.set_xlim(0, width)
    ax.set_xlabel(f"{unit} from the start of the window", fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    ax.set_title(title, fontsize=9)


def timeline_variants(runs: Sequence[dict]) -> list[dict]:
    """The runs a timeline figure shows: the baseline and the last variant."""
    return [runs[0], runs[-1]] if len(runs) > 1 else list(runs)


def trace_span(runs: Sequence[dict]) -> str:
    """What the nsys traces of ``runs`` (run summaries) hold: a capture range (nsys --capture-range)
    leaves only the calls in the trace."""
    spans = {bool(r["nsys_capture_range"]) for r in runs}
    if spans == {True}:
        return "capture range (the calls only)"
    return "whole run" if spans == {False} else "whole run or capture range (the calls only), by step"


def timeline_figure(summaries_by_size: dict[int, Sequence[dict]], path: str, title: str) -> None:
    """Nsight-Systems-style timelines (nsys) of the baseline and the last variant at the largest size:
    the whole run (phases; GPU work merged at the figure's resolution) and the last compute call."""
    size = max(summaries_by_size)
    shown = timeline_variants(summaries_by_size[size])
    fig, axes = plt.subplots(len(shown), 2, figsize=(13, 2.3 * len(shown) + 0.6), squeeze=False,
                             gridspec_kw={"width_ratios": [3, 2]})
    for (ax_all, ax_call), run in zip(axes, shown):
        t = run["nsys"]["timeline"]
        ov, zoom = t["overview"], t["zoom"]
        rows = {"NVTX": sorted((a, b, PHASE_COLORS.get(phase, "#999999"), phase)
                               for phase, spans in ov["nvtx"].items() for a, b in spans)}
        rows.update({row: [(a, b, GPU_ROWS[row], "") for a, b in ov["gpu"].get(row, [])] for row in GPU_ROWS})
        _timeline_panel(ax_all, rows, 0, t["end_ns"], f"`{run['variant']}`: {trace_span([run])}", min_width=0.002)
        rows = {"NVTX": [(a, b, PHASE_COLORS["compute"], label) for a, b, label in zoom["nvtx"]],
                "CUDA API": [(a, b, _api_color(name), "") for a, b, name in zoom.get("api", [])]}
        rows.update({row: [(a, b, GPU_ROWS[row], short_kernel_name(label) if row == "kernels" else label)
                           for a, b, label in zoom["gpu"].get(row, [])]
                     for row in GPU_ROWS})
        end, what = zoom["end_ns"], f"compute call {zoom['call']}"
        if zoom["dropped_ops"] or zoom.get("dropped_api_calls", 0):
            # the summary keeps the call's first operations: zoom on the window they cover, and say so,
            # rather than draw a call whose rest looks idle
            drawn_ends = [b for bars in zoom["gpu"].values() for _, b, _ in bars]
            end = max(drawn_ends) if drawn_ends else end
            shown_ops = sum(len(v) for v in zoom["gpu"].values())
            shown_ms, call_ms = (end - zoom["start_ns"]) / 1e6, (zoom["end_ns"] - zoom["start_ns"]) / 1e6
            what += (f"\nzoomed on its first {shown_ops} of {shown_ops + zoom['dropped_ops']} GPU operations: "
                     f"{shown_ms:.3g} of {call_ms:.3g} ms shown")
            rows = {k: [bar for bar in v if bar[0] < end] for k, v in rows.items()}
        _timeline_panel(ax_call, rows, zoom["start_ns"], end, f"`{run['variant']}`: {what}",
                        min_width=0.002, labels=True)
    legend = {**PHASE_COLORS, **GPU_ROWS, **{f"API: {k}": c for k, c in API_COLORS.items()}}
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in legend.values()]
    fig.legend(handles, list(legend), loc="lower center", ncol=8, frameon=False, fontsize=8)
    fig.suptitle(f"{title}: timelines at size {size} (nsys)")
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    plotting.save_figure(fig, path)


def roofline_figure(summaries_by_size: dict[int, Sequence[dict]], ceilings: dict, path: str, title: str) -> bool:
    """The recipe's hierarchical roofline (analysis.report.roofline): each profiled kernel at its own
    measured FLOPs and its bytes per memory level, under the device's peaks and the measured rates;
    False, and nothing written, where no kernel has floating-point work to place."""

    return roofline.figure(summaries_by_size, ceilings, path, title)


#: one colour per kind of GPU job in the job chart
_TOOL_COLORS = {"timed": "#4c72b0", "nsys": "#55a868", "ncu": "#c44e52", "coldwarm": "#8172b2",
                "experiment": "#ccb974", "kernel": "#64b5cd", "ceilings": "#8c8c8c"}


def gpu_jobs_figure(jobs: Sequence, path: str, title: str) -> None:
    """One row per GPU, one bar per job from its start to its end, coloured by tool: jobs side by
    side on separate rows ran at once; a row never holds two bars at one time unless two
    profilers shared that GPU."""
    labels = sorted({j.gpu_label for j in jobs}, key=gpu_label_order)
    t0 = min(j.started_ns for j in jobs)
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.7 * len(labels)))
    seen = set()
    for row, label in enumerate(labels):
        for j in (j for j in jobs if j.gpu_label == label):
            color = _TOOL_COLORS.get(j.tool, "#dd8452")
            ax.barh(row, j.duration_s, left=(j.started_ns - t0) / 1e9, height=0.6, color=color,
                    edgecolor="white", linewidth=0.5, label=None if j.tool in seen else j.tool)
            seen.add(j.tool)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first job started")
    ax.set_title(f"{title}: GPU jobs by GPU and time", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.tight_layout()
    plotting.save_figure(fig, path)
