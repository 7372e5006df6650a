"""Figures for the reports, drawn from run summaries (never from raw files)."""
from __future__ import annotations

import os
from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # no display on GPU hosts and CI
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

from analysis.floors import floor  # noqa: E402
from analysis.gpu_jobs import gpu_label_order  # noqa: E402
from analysis.outputs import save_figure_atomic  # noqa: E402

# Stable colours per kind of GPU time, as Nsight Systems draws them (kernels blue, copies red...)
KIND_COLORS = {"kernel": "#4c72b0", "memcpy": "#c44e52", "memset": "#dd8452", "idle": "#cccccc"}
# Deterministic PNGs: no timestamp or version in the file's metadata
_PNG_META = {"Software": None}


def _steady_calls(summary: dict) -> list[dict]:
    calls = summary["nsys"]["calls"]
    return calls[1:] if len(calls) > 1 else calls


def steady_breakdown_ms(summary: dict) -> dict[str, float]:
    """Mean per-call GPU time by kind over the calls after the first (the first is cold)."""
    calls = _steady_calls(summary)
    n = len(calls)
    return {
        "kernel": sum(c["gpu_kernel_ns"] for c in calls) / n / 1e6,
        "memcpy": sum(c["gpu_memcpy_ns"] for c in calls) / n / 1e6,
        "memset": sum(c["gpu_memset_ns"] for c in calls) / n / 1e6,
        "idle": sum(c["gpu_idle_ns"] for c in calls) / n / 1e6,
    }


def gpu_time_figure(summaries_by_size: dict[int, Sequence[dict]], path: str, title: str) -> None:
    """Per size, one stacked bar per variant: where each steady call's wall time went on the GPU."""
    sizes = sorted(summaries_by_size)
    fig, axes = plt.subplots(1, len(sizes), figsize=(5.5 * len(sizes), 3.2), squeeze=False)
    for ax, size in zip(axes[0], sizes):
        runs = summaries_by_size[size]
        names = [r["variant"] for r in runs]
        left = [0.0] * len(runs)
        for kind, color in KIND_COLORS.items():
            vals = [steady_breakdown_ms(r)[kind] for r in runs]
            ax.barh(names, vals, left=left, color=color, label=kind if size == sizes[0] else None)
            left = [a + b for a, b in zip(left, vals)]
        ax.invert_yaxis()
        ax.set_xlabel("ms per call (mean of steady calls, from nsys)")
        ax.set_title(f"size {size}")
    fig.suptitle(title)
    fig.legend(loc="lower center", ncol=len(KIND_COLORS), frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    _save(fig, path)


def timing_figure(summaries_by_size: dict[int, Sequence[dict]], ceilings: dict, path: str, title: str) -> None:
    """Per size, median time per call with IQR whiskers, and each variant's floor as a red tick."""
    sizes = sorted(summaries_by_size)
    fig, axes = plt.subplots(1, len(sizes), figsize=(5.5 * len(sizes), 3.4), squeeze=False)
    for ax, size in zip(axes[0], sizes):
        runs = summaries_by_size[size]
        names = [r["variant"] for r in runs]
        med = [r["timing"]["median_ms"] for r in runs]
        lo = [r["timing"]["median_ms"] - r["timing"]["q1_ms"] for r in runs]
        hi = [r["timing"]["q3_ms"] - r["timing"]["median_ms"] for r in runs]
        ax.bar(names, med, yerr=[lo, hi], color="#4c72b0", capsize=3)
        floors_ms = [floor(r["work"], ceilings).ms for r in runs]
        ax.scatter(names, floors_ms, marker="_", s=900, color="#c44e52", zorder=3, label="floor")
        if max(med) / max(min(med), 1e-9) > 30:
            ax.set_yscale("log")  # host-data and device-resident steps differ by orders of magnitude
        ax.set_ylabel("median ms per call (CUDA events)")
        ax.set_title(f"size {size}")
        ax.tick_params(axis="x", rotation=20)
        ax.legend(loc="upper right", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    _save(fig, path)


# NVTX phases in the colours the workloads give them (workloads/annotate.py PHASE_COLORS)
PHASE_COLORS = {"setup": "#1f77b4", "warmup": "#7f7f7f", "compute": "#2ca02c", "transfer": "#ff7f0e",
                "check": "#9467bd"}
# timeline rows below the NVTX row, as Nsight Systems stacks a GPU's rows, and their colours
GPU_ROWS = {"kernels": KIND_COLORS["kernel"], "memcpy HtoD": "#17becf", "memcpy DtoH": KIND_COLORS["memcpy"],
            "memcpy other": "#8172b2", "memsets": KIND_COLORS["memset"]}


def _time_unit(span_ns: float) -> tuple[str, float]:
    return ("s", 1e9) if span_ns >= 5e9 else ("ms", 1e6) if span_ns >= 5e6 else ("µs", 1e3)


#: the CUDA API row of a compute call: allocations and synchronization stand out
API_COLORS = {"allocation": "#c44e52", "sync": "#7f7f7f", "launch": "#4c72b0", "memcpy": "#17becf", "other": "#bbbbbb"}


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


def short_kernel_name(name: str) -> str:
    """A kernel's name without return type, namespaces, template arguments, ABI tags or parameter
    list, for labels: ``void ns::k<int>(float)`` -> ``k``."""
    depth, end = 0, len(name)
    for i, ch in enumerate(name):
        if ch in "<[":
            depth += 1
        elif ch in ">]":
            depth -= 1
        elif ch == "(" and depth == 0:
            end = i
            break
    out, depth = [], 0
    for ch in name[:end]:
        if ch in "<[":
            depth += 1
        elif ch in ">]":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    short = "".join(out).split("::")[-1].strip().split(" ")[-1]
    return short or name


def _timeline_panel(ax, rows: dict[str, list], x0: int, x1: int, title: str, min_width: float = 0.0,
                    labels: bool = False) -> None:
    """One panel, rows from the top: ``rows`` maps a row name to (start, end, colour, label) bars;
    rows without bars are left out. Bars narrower than ``min_width`` (of the window) are widened
    so that they show."""
    unit, scale = _time_unit(x1 - x0)
    shown = [name for name, bars in rows.items() if bars]
    width = (x1 - x0) / scale
    for y, name in enumerate(shown):
        for start, end, color, label in rows[name]:
            left, w = (start - x0) / scale, max((end - start) / scale, min_width * width)
            # white edges part adjacent bars; on bars widened to show, they would hide the bar
            edge = "white" if labels or name == "NVTX" else "none"
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
        _timeline_panel(ax_all, rows, 0, t["end_ns"], f"`{run['variant']}`: whole run", min_width=0.002)
        rows = {"NVTX": [(a, b, PHASE_COLORS["compute"], label) for a, b, label in zoom["nvtx"]],
                "CUDA API": [(a, b, _api_color(name), "") for a, b, name in zoom.get("api", [])]}
        rows.update({row: [(a, b, GPU_ROWS[row], short_kernel_name(label) if row == "kernels" else label)
                           for a, b, label in zoom["gpu"].get(row, [])]
                     for row in GPU_ROWS})
        dropped = zoom["dropped_ops"] + zoom.get("dropped_api_calls", 0)
        more = f", {dropped} more events not drawn" if dropped else ""
        _timeline_panel(ax_call, rows, zoom["start_ns"], zoom["end_ns"],
                        f"`{run['variant']}`: compute call {zoom['call']}{more}", min_width=0.002, labels=True)
    legend = {**PHASE_COLORS, **GPU_ROWS, "API: alloc/free": API_COLORS["allocation"],
              "API: synchronize": API_COLORS["sync"], "API: launch": API_COLORS["launch"]}
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in legend.values()]
    fig.legend(handles, list(legend), loc="lower center", ncol=7, frameon=False, fontsize=8)
    fig.suptitle(f"{title}: timelines at size {size} (nsys)")
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    _save(fig, path)


def roofline_points(summaries_by_size: dict[int, Sequence[dict]]) -> list[dict]:
    """One point per (size, variant, kernel) that ncu profiled, from the kernel's first profiled launch:
    FLOPs as ncu counted them (FP64 + FP32 instructions, an FMA as two), else the variant's declared
    FLOPs over its kernels per call; bytes from DRAM (read + write); time from ncu."""
    points = []
    for size in sorted(summaries_by_size):
        for run in summaries_by_size[size]:
            seen = set()
            calls = _steady_calls(run)
            per_call = max(sum(c["kernels"] for c in calls) / len(calls), 1) if calls else 1
            for launch in run.get("ncu") or []:
                name = launch["kernel_name"]
                ns = launch["metrics"].get("gpu__time_duration.sum")
                if name in seen or not launch.get("dram_bytes") or not ns:
                    continue
                seen.add(name)
                fp64, fp32 = launch.get("flops_fp64"), launch.get("flops_fp32")
                counted = (fp64 or 0) + (fp32 or 0)
                flops, source = (counted, "ncu") if counted else (run["work"]["flops"] / per_call, "declared")
                if not flops:
                    continue
                points.append({"size": size, "variant": run["variant"], "kernel": name, "flops": flops,
                               "flops_source": source, "fp32": bool(fp32 and fp32 > (fp64 or 0)),
                               "dram_bytes": launch["dram_bytes"], "duration_ns": ns,
                               "intensity": flops / launch["dram_bytes"], "flop_per_s": flops / (ns * 1e-9)})
    return points


def roofline_figure(summaries_by_size: dict[int, Sequence[dict]], ceilings: dict, path: str, title: str) -> None:
    """The recipe's hierarchical roofline (analysis.roofline): each profiled kernel at its own
    measured FLOPs and its bytes per memory level, under the device's peaks and the measured rates."""
    from analysis import roofline

    roofline.figure(summaries_by_size, ceilings, path, title)


def _save(fig, path: str) -> None:
    save_figure_atomic(fig, path, dpi=110, metadata=_PNG_META)


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
    _save(fig, path)
