"""A report without counters in words (the numbers: :mod:`analysis.model.no_counters`): each step's
limiter as far as the evidence reaches, the rate and kernel tables, and what counters would add."""
from __future__ import annotations

from typing import Sequence

from analysis.model import floors, limiter
from analysis.model.limiter.advice import next_move
from analysis.model.no_counters import (BOUND_SHARE, DERIVED, MEASURED_TRACE, NEEDS_COUNTERS, NOT_AVAILABLE,
                                        step_limiter)
from analysis.report.mdtext import table


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0f}%"


def coverage_line(preflight: dict | None = None) -> str:
    """The line that replaces ncu's coverage line in a report of a recipe without counters."""
    why = ""
    counters = (preflight or {}).get("counters") or {}
    if counters.get("reason"):
        why = f" ({counters['reason']})"
    return ("**No performance counters**: no variant ran under Nsight Compute" + why + ". The timings and every "
            f"nsys table are *{MEASURED_TRACE}*; the sections \"Without counters\" label each number *{MEASURED_TRACE}*, "
            f"*{DERIVED}* (`analysis/model/no_counters.py`) or *{NOT_AVAILABLE}*; the limiter goes only as far as that "
            "evidence reaches (\"evidence-limited\"), and what counters would add is listed under \"Needs counters\".")


def limiter_lines(runs: Sequence[dict], ceilings: dict) -> list[str]:
    """One bullet per step: its limiter as far as the evidence reaches, and the next move."""
    lines = []
    for r in runs:
        step = step_limiter(r, ceilings)
        source = MEASURED_TRACE if step.kind is not limiter.Kind.NO_COUNTERS else DERIVED
        lines.append(f"- `{r['variant']}` — **{step.label()}** ({source}): {step.detail}. "
                     f"*Next:* {next_move(step)}")
    return lines


def rate_table(runs: Sequence[dict], ceilings: dict) -> str:
    """Effective bandwidth and FLOP rate of the declared work over the median, against the
    measured reference rates (derived without counters), beside what only counters give."""
    rows = []
    for r in runs:
        median_ms = r["timing"]["median_ms"]
        try:
            terms = floors.floor(r["work"], ceilings).terms
        except ValueError:
            terms = ()
        shares = "; ".join(f"{t.resource}: {t.ms / median_ms:.0%}" for t in terms) or "n/a"
        rows.append((f"`{r['variant']}`", f"{median_ms:.3f}", f"{r['achieved_gb_per_s']:.0f}",
                     f"{r['achieved_gflop_per_s']:.3g}", shares, "n/a", "n/a"))
    return table(("variant", f"median ms ({MEASURED_TRACE.split(' (')[0]}, CUDA events)",
                  f"effective GB/s ({DERIVED}: declared bytes / median)",
                  f"effective GFLOP/s ({DERIVED}: declared FLOPs / median)",
                  f"share of the measured reference rate ({DERIVED})",
                  f"DRAM GB/s ({NOT_AVAILABLE})", f"executed FLOPs ({NOT_AVAILABLE})"), rows)


def kernel_table(runs: Sequence[dict]) -> str | None:
    rows = []
    for r in runs:
        for k in r.get("counter_free") or []:
            limited = ", ".join(k["occupancy_limited_by"] or []) or "n/a"
            rows.append((f"`{r['variant']}`", f"`{limiter.kernel_key(k['name'])[:60]}`",
                         f"{k['total_ns'] / k['launches'] / 1e3:.1f}",
                         f"({k['grid'][0]}, {k['grid'][1]}, {k['grid'][2]})",
                         f"({k['block'][0]}, {k['block'][1]}, {k['block'][2]})", k["registers_per_thread"],
                         k["shared_bytes_per_block"], _pct(k["theoretical_occupancy_pct"]), limited,
                         "n/a" if k["waves_per_sm"] is None else f"{k['waves_per_sm']:.3g}", "n/a"))
    if not rows:
        return None
    return table(("variant", "kernel", "avg µs (trace)", "grid (trace)", "block (trace)", "registers/thread (trace)",
                  "shared B/block (trace)", f"theoretical occupancy ({DERIVED})", f"limited by ({DERIVED})",
                  f"waves per SM ({DERIVED})", f"achieved occupancy ({NOT_AVAILABLE})"), rows)


def needs_counters_lines() -> list[str]:
    return [f"- {what} — {NOT_AVAILABLE}: {source}" for what, source in NEEDS_COUNTERS]


def size_section(runs: Sequence[dict], ceilings: dict, size: int) -> list[str]:
    """The no-counters evidence of one size: rates, per-kernel resources and occupancy, and the
    list of what needs counters (with the fix that would give them)."""
    lines = [f"### Without counters, size {size}", "",
             "Effective rates of the declared work (a step at or above "
             f"{BOUND_SHARE:.0%} of a measured reference rate is bound by that resource):", "",
             rate_table(runs, ceilings), ""]
    kernels = kernel_table(runs)
    if kernels:
        lines += ["Launch configuration and resources per kernel (CUPTI records them in the nsys trace for every "
                  "launch; theoretical occupancy from them and the device's per-SM limits in the trace):", "",
                  kernels, ""]
    else:
        lines += [f"Launch resources per kernel: {NOT_AVAILABLE} (the trace has no device limits)", ""]
    lines += [f"### Needs counters, size {size}", "",
              "Skipped, not dropped: with Nsight Compute allowed to read counters (the driver option "
              "`NVreg_RestrictProfilingToAdminUsers=0`, or profiling as an administrator) the report adds:", "",
              *needs_counters_lines(), ""]
    return lines
