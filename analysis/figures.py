"""Figures for the reports, drawn from run summaries (never from raw files)."""
from __future__ import annotations

import os
from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # no display on GPU hosts and CI
import matplotlib.pyplot as plt  # noqa: E402

from analysis.floors import floor  # noqa: E402

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


def _save(fig, path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp.png"
    fig.savefig(tmp, dpi=110, metadata=_PNG_META)
    plt.close(fig)
    os.replace(tmp, path)
