"""Report section: cold and warm starts of the Warp recipe, per module.

Input: ``experiments/coldstart/coldstart.json`` of the recipe's capture folder, written by
``workloads/warp_sph/exp_coldstart.py``: per variant, new processes with Warp's kernel cache and
the CUDA driver's compute cache empty (a fresh ``CUDA_CACHE_PATH``, or ``CUDA_CACHE_DISABLE=1``
where the first left the driver's cache non-empty: ``skipped`` says where it did not), then
warm; each with Warp's own per-module load messages and wall-clock phases. Parsing is
:func:`read_coldstart` and :func:`table_data`; :func:`render_markdown` only formats.
"""
from __future__ import annotations

import os

from analysis.common.errors import AnalysisInputError
from analysis.report.markdown import table
from analysis.model.run_summary import load_json

EXPERIMENT = "coldstart"

#: what render() reads, relative to the recipe's capture folder: the report rule's inputs
INPUTS: tuple[str, ...] = (f"experiments/{EXPERIMENT}",)
#: the figures render() writes into its figure folder (the report rule's outputs)
FIGURES: tuple[str, ...] = ()
#: the states shown, in column order, with their headings
COLUMNS = (
    ("cold_fresh_cache", "cold, fresh CUDA_CACHE_PATH"),
    ("cold_cache_disabled", "cold, CUDA_CACHE_DISABLE=1"),
    ("warm", "warm"),
)
PHASE_ROWS = (
    ("warp_import_s", "import warp"),
    ("warp_init_s", "wp.init()"),
    ("setup_s", "setup (inputs; graph variants: module loads and capture)"),
    ("first_frame_s", "first frame (eager variants: module loads)"),
    ("time_to_first_result_s", "time to first result (process start to first frame done)"),
)


def read_coldstart(folder: str) -> dict:
    path = os.path.join(folder, "coldstart.json")
    if not os.path.isfile(path):
        raise AnalysisInputError(path, "no such file (run: python -m workloads.warp_sph.exp_coldstart)")
    record = load_json(path)
    runs = record.get("runs")
    if not isinstance(runs, list) or not runs:
        raise AnalysisInputError(path, "no runs recorded")
    for r in runs:
        for key in ("variant", "state", "phases", "module_loads"):
            if key not in r:
                raise AnalysisInputError(path, f"a run lacks {key!r}")
    return record


def table_data(record: dict) -> dict:
    """variant -> {"modules": {module: {state: (ms, how)}}, "phases": {phase: {state: s}},
    "binaries": {state: [...]}, "traces": [...], "driver_cache": {state: {"files", "bytes"}}}"""
    out: dict = {}
    for r in record["runs"]:
        v = out.setdefault(r["variant"], {"modules": {}, "phases": {}, "binaries": {}, "traces": [], "driver_cache": {}})
        state = r["state"]
        for m in r["module_loads"]:
            cell = v["modules"].setdefault(m["module"], {})
            ms, how = cell.get(state, (0.0, m["how"]))
            # a module loaded twice in one process (rare) counts both loads
            cell[state] = (ms + float(m["ms"]), how if how == m["how"] else f"{how}+{m['how']}")
        for key, value in r["phases"].items():
            v["phases"].setdefault(key, {})[state] = value
        v["binaries"][state] = r.get("binaries", [])
        if r.get("driver_cache_after_run") is not None:
            v["driver_cache"][state] = r["driver_cache_after_run"]
        if r.get("traces"):
            v["traces"] = r["traces"]
    return out


def _binary_kinds(names: list[str]) -> str:
    kinds = sorted({os.path.splitext(n)[1] for n in names})
    return ", ".join(kinds) if kinds else "none found"


def _binaries_note(kinds: str, driver_run_skipped: bool, driver_cache_kb: dict[str, float]) -> str:
    """What the kind of binaries Warp cached means for the driver's cache (``driver_cache_kb``:
    variant -> the cache's size after its cold run, for the records that have it)."""
    note = f"{kinds}. "
    if driver_run_skipped:
        return note + ("The driver's compute cache was still empty after the cold run: the driver JIT-compiled no "
                       "PTX, so a cold run with `CUDA_CACHE_DISABLE=1` could change nothing and was not made.")
    if kinds == ".cubin":
        note += "SASS compiled by Warp itself: no PTX of these modules for the driver to JIT"
        held = {v: kb for v, kb in driver_cache_kb.items() if kb}
        if held:
            sizes = " and ".join(f"{kb:.0f} kB (`{v}`)" for v, kb in held.items())
            return note + (f"; the driver's cache still held {sizes} after the cold run: PTX of other code in the "
                           "process, which the driver compiled, so the two cold columns differ by that compilation "
                           "and by cache I/O.")
        return note + ": the two cold columns differ only by the driver's other caching and cache I/O."
    if kinds == ".o":
        return note + "CPU object files: the CUDA driver and its cache play no part on Warp's CPU device."
    if ".ptx" in kinds:
        return note + ("Warp handed the driver PTX, which the driver JIT-compiles at load; that work is what the "
                       "compute cache keeps, so the two cold columns and the warm one differ by it.")
    return note


def render_markdown(record: dict, data: dict) -> str:
    lines = [
        "## Cold starts, per module",
        "",
        f"New processes of the recipe ({record.get('size')} particles, one frame each). Cold: Warp's kernel "
        "cache in a fresh folder, and the driver's compute cache emptied either way the Warp guide names "
        "(a fresh `CUDA_CACHE_PATH`, or `CUDA_CACHE_DISABLE=1`: no cache at all). Warm: the first cold run's "
        "folders again, filled. Module times are Warp's own (\"Module ... took ... ms\"): code generation, "
        "compilation when not cached, loading (\"—\": the variant does not load that module).",
        "",
    ]
    # one table for every variant, so that their modules and phases read side by side
    columns = [(variant, state, f"`{variant}`: {head}") for variant in data for state, head in COLUMNS
               if state not in record.get("skipped", {}).get(variant, {})]
    modules = sorted({m for v in data.values() for m in v["modules"]})
    rows = []
    for module in modules:
        row = [f"`{module}` (ms)"]
        for variant, state, _ in columns:
            ms, how = data[variant]["modules"].get(module, {}).get(state, (None, None))
            row.append("—" if ms is None else f"{ms:.1f} ({how})")
        rows.append(row)
    for key, label in PHASE_ROWS:
        row = [f"{label} (s)"]
        for variant, state, _ in columns:
            value = data[variant]["phases"].get(key, {}).get(state)
            row.append("n/a" if value is None else f"{value:.3f}")
        rows.append(row)
    lines += [table(["", *(head for _, _, head in columns)], rows), ""]
    # one note per kind of binaries (variants that cached the same kind share it), then the traces
    by_kind: dict[tuple[str, bool], dict[str, float]] = {}
    for variant, v in data.items():
        kinds = _binary_kinds(v["binaries"].get("cold_fresh_cache", []))
        skipped = "cold_cache_disabled" in record.get("skipped", {}).get(variant, {})
        cache = v["driver_cache"].get("cold_fresh_cache")
        by_kind.setdefault((kinds, skipped), {})[variant] = cache["bytes"] / 1e3 if cache else 0.0
    notes = [f"Binaries Warp cached for {', '.join(f'`{v}`' for v in sizes)}: {_binaries_note(kinds, skipped, sizes)}"
             for (kinds, skipped), sizes in by_kind.items()]
    traces = [t for v in data.values() for t in v["traces"]]
    if traces:
        notes.append("NVRTC compile-time traces (open in Perfetto) from a separate cold run with "
                     "`warp.config.compile_time_trace = True`, in `experiments/coldstart/`: "
                     + ", ".join(f"`{t}`" for t in traces) + ".")
    lines += [" ".join(notes), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def render(workload_root: str, figure_dir: str) -> str:
    record = read_coldstart(os.path.join(workload_root, "experiments", EXPERIMENT))
    return render_markdown(record, table_data(record))
