"""Report section: GPU memory and time under XLA's allocator settings (experiment ``allocator``).

Per setting, from the nsys export (``--cuda-memory-usage true``): the peak device memory held at
once and the allocations, in all and per call; from the run's JSON: JAX's ``memory_stats()``
(``bytes_limit``: what XLA's allocator may hold; ``peak_bytes_in_use``: what the program used),
the driver's used memory (cuMemGetInfo) and the median time per call (host timer with
block_until_ready).
"""
from __future__ import annotations

import os

from analysis.report.markdown import table
from analysis.model.run_summary import load_json
from analysis.report.sections import jax_matmul_readers as readers

GIB = 1 << 30

#: what render() reads, relative to the recipe's capture folder: the report rule's inputs
INPUTS: tuple[str, ...] = ("experiments/allocator",)
#: the figures render() writes into its figure folder (the report rule's outputs)
FIGURES: tuple[str, ...] = ()


def _gib(x) -> str:
    return "n/a" if x is None else f"{x / GIB:.2f}"


def _mib(x: int) -> str:
    return f"{x / (1 << 20):.0f} MiB" if x < GIB else f"{x / GIB:.0f} GiB"


def summarize(workload_root: str) -> dict:
    """The experiment's record with one flat row per setting (pure: files -> numbers)."""
    rec = readers.allocator_experiment(workload_root)
    rows = []
    for s in rec["settings"]:
        run, mem = s["run"], s["device_memory"] or {}
        stats = run.get("memory_stats") or {}
        total = mem.get("gpu_total_memory_bytes")
        per_call = s["allocations_per_call"]
        rows.append({
            "setting": s["setting"],
            "environment": " ".join(f"{k}={v}" for k, v in s.get("environment_added", {}).items()) or "(none)",
            "nsys_error": s.get("nsys_error"),
            # the setting crashed under nsys and was run once without it (exp_allocator)
            "timed_without_nsys": bool(s.get("timed_without_nsys")),
            "peak_bytes": mem.get("peak_bytes"),
            "peak_share": mem["peak_bytes"] / total if total else None,
            "allocations": mem.get("allocations"),
            "largest_allocation_bytes": mem.get("largest_allocation_bytes"),
            "doubling_bytes": readers.longest_doubling(mem.get("large_allocations_bytes") or []),
            "allocations_per_call": sorted(per_call)[len(per_call) // 2] if per_call else None,
            "bytes_limit": stats.get("bytes_limit"),
            "peak_bytes_in_use": stats.get("peak_bytes_in_use"),
            "driver_used_bytes": (run.get("driver_memory_after_calls") or {}).get("used_bytes"),
            "median_ms": run["timing"]["median_ms"],
            "iqr_ms": run["timing"]["iqr_ms"],
        })
    return {"variant": rec.get("variant"), "size": rec.get("size"), "rows": rows}


def render(workload_root: str, figure_dir: str) -> str:
    s = summarize(workload_root)
    rows = s["rows"]
    out = ["## XLA's allocator settings: GPU memory and time", "",
           f"One process per setting, the `{s['variant']}` step at N = {s['size']} under nsys "
           "(`--cuda-memory-usage true`). *Peak held* is the most device memory the process held at once in nsys' "
           "allocation events; *bytes_limit* and *peak in use* are JAX's `memory_stats()` (what XLA's allocator may "
           "hold, and what the program's buffers used at most); *driver used* is the GPU's used memory after the "
           "calls (cuMemGetInfo: every process's, the CUDA context's own included).", ""]
    # the experiment may come from another run than the recipe's other captures: say which
    prov = load_json(os.path.join(workload_root, "experiments", "allocator", "allocator.json")).get("provenance") or {}
    gpus = prov.get("gpus") or [{}]
    out += [f"Captured on {gpus[0].get('name', 'an unrecorded GPU')} at commit `{prov.get('git_commit', 'unknown')}`, "
            f"{prov.get('date_utc', 'date unrecorded')} (UTC).", ""]
    out.append(table(
        ("setting", "environment", "peak held GiB", "% of GPU", "allocations (per call)", "largest alloc GiB",
         "bytes_limit GiB", "peak in use GiB", "driver used GiB", "median ms/call", "IQR ms"),
        [(r["setting"], f"`{r['environment']}`", _gib(r["peak_bytes"]),
          "n/a" if r["peak_share"] is None else f"{100 * r['peak_share']:.1f}",
          "n/a" if r["allocations"] is None else f"{r['allocations']} ({r['allocations_per_call']})",
          _gib(r["largest_allocation_bytes"]), _gib(r["bytes_limit"]), _gib(r["peak_bytes_in_use"]),
          _gib(r["driver_used_bytes"]), f"{r['median_ms']:.3f}", f"{r['iqr_ms']:.3f}") for r in rows]))
    out.append("")
    for r in rows:
        if r["nsys_error"]:
            first = next((ln.strip() for ln in r["nsys_error"].splitlines() if ln.strip()), "")
            out.append(f"- {r['setting']}: no nsys columns: {first[:300]}")
    base = next((r for r in rows if r["setting"] == "default"), None)
    if base:
        if base["peak_bytes"] is not None:
            share = "n/a" if base["peak_share"] is None else f"{100 * base['peak_share']:.0f}"
            out.append(f"- default: the process holds {_gib(base['peak_bytes'])} GiB ({share}% of the GPU) while "
                       f"its buffers need at most {_gib(base['peak_bytes_in_use'])} GiB.")
        for r in rows:
            if r is base:
                continue
            if r["timed_without_nsys"]:
                out.append(f"- {r['setting']}: timed without nsys, the others under it: its time is not compared "
                           "with default's.")
                continue
            dt = (r["median_ms"] / base["median_ms"] - 1) * 100
            held = "" if r["peak_bytes"] is None else (f"peak held {_gib(r['peak_bytes'])} GiB, "
                                                      f"{r['allocations_per_call']} allocations per call, ")
            grows = ""
            if len(r["doubling_bytes"]) >= 3:
                d = r["doubling_bytes"]
                grows = (f"; the pool grows by doubling: {len(d)} allocations from {_mib(d[0])} to "
                         f"{_mib(d[-1])}, each twice the last")
            out.append(f"- {r['setting']}: {held}{dt:+.1f}% time per call against default{grows}.")
    return "\n".join(out) + "\n"
