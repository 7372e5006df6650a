"""A recipe's report model (:mod:`analysis.model.report_model`) in words: the sentences and cells the
page and the index print. Every function here formats numbers the model holds; none reads a capture."""
from __future__ import annotations

from typing import Sequence

from analysis.model.floors import AT_RATE_FACTOR
from analysis.model.limiter import Unit
from analysis.model.report_model import (NcuCoverage, Provenance, ReportModel, ResultBox, Step, WorkCheckRow)
from analysis.readers.ncu import COLLECTION_FULL, COLLECTION_METRICS, INSTRUMENTED_SECTIONS, TENSOR_OPS_LEFT_OUT
from analysis.report import no_counters_text


def ratio_text(x: float) -> str:
    """A speed-up or time-over-floor ratio with the digits that matter: 1068×, 54.1×, 1.85×."""
    return f"{x:.0f}×" if x >= 100 else f"{x:.1f}×" if x >= 10 else f"{x:.2f}×"


def ms_text(x: float) -> str:
    """Milliseconds with three significant digits, never in exponent form: 0.0412, 2.82, 1190."""
    return f"{x:.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def change_text(step: Step) -> str:
    """What moved against the parent (:attr:`Step.moved`); without a parent, the step's own busy time."""
    busy = step.busy
    if step.moved is None:
        return (f"GPU busy {ms_text(busy.busy_ms)} of {ms_text(busy.wall_ms)} ms per call "
                f"(kernels {ms_text(busy.kernel_ms)} ms, "
                f"copies {ms_text(busy.h2d_ms + busy.d2h_ms + busy.other_copy_ms)} ms)")
    parts = []
    for m in step.moved:
        if m.unit == "ms":
            parts.append(f"{m.quantity} {ms_text(m.before)} → {ms_text(m.after)} ms")
        elif isinstance(m.before, tuple):
            parts.append(f"{m.quantity} {'/'.join(map(str, m.before))} → {'/'.join(map(str, m.after))}")
        else:
            parts.append(f"{m.quantity} {m.before} → {m.after}")
    return "; ".join(parts) or "no measured quantity moved by more than 5%"


def floors_text(step: Step) -> str:
    """Where a step stands against its measured limiter's floor, then against the minimum work (named
    for what it is: declared work at a measured reference rate, not a hardware limit)."""
    minimum = f"{ratio_text(step.time_over_floor)} its minimum-work floor ({step.floor_resource} at the " \
              f"{step.floor_rate_name})" if step.floor_rate_name else \
        f"{ratio_text(step.time_over_floor)} its minimum-work floor ({step.floor_resource})"
    if step.time_over_floor < AT_RATE_FACTOR and step.floor_rate_name:
        # the rates are measurements, not ceilings: a step near or under 1× runs at the rate
        minimum = (f"the {step.floor_rate_name} ({ratio_text(step.time_over_floor)} its minimum-work floor, "
                   f"{step.floor_resource})")
        lim = step.limiter
        # under it as printed (1.00× is not under): the copy rate is no DRAM limit, and the page says so
        if step.time_over_floor < 0.995 and lim.unit is Unit.DRAM and lim.pct_of_peak is not None:
            minimum += (f"; under it because that floor is a measured copy rate (reads and writes 1:1), not "
                        f"DRAM's limit: its kernels stream DRAM at {lim.pct_of_peak:.0f}% of peak (ncu)")
    if step.time_over_limiter_floor is None:
        return minimum
    unit = str(step.limiter.unit or step.limiter.kind)
    return f"{ratio_text(step.time_over_limiter_floor)} the floor of its measured limiter ({unit}) and {minimum}"


def baseline_label(box: ResultBox) -> str:
    """"the baseline", or what the first step at the box's size is (variant_sizes may start it later)."""
    return "the baseline" if box.starts_at_baseline else f"the first step run at size {box.baseline.size}"


def takeaway(box: ResultBox) -> str:
    """The result box's first sentence: the fastest step against the first, and where it runs."""
    base, best, cmp = box.baseline, box.best, box.best_vs_baseline
    if cmp is None:
        return f"No step beat {baseline_label(box)} `{base.variant}` at size {base.size}; it runs at {floors_text(base)}."
    return (f"`{best.variant}` ({best.summary}) is {cmp.label} than `{base.variant}`, "
            f"{ratio_text(cmp.speedup)}, and runs at {floors_text(best)}.")


def spread_text(timer: str) -> str:
    """How a step's interval in the result box reads."""
    return f"median (interquartile range) of repeated calls, {timer}"


def packages_text(prov: dict) -> str:
    """The recorded package versions on one line: "numpy 2.4.6, warp 1.19.0"."""
    return ", ".join(f"{k} {v}" for k, v in sorted((prov.get("packages") or {}).items())) or "not recorded"


def describe_commit(prov: dict) -> str:
    """The commit a capture names; a "-dirty" one (not in the history) says what it means."""
    commit = prov.get("git_commit")
    if not commit:
        return "not recorded"
    if commit.endswith("-dirty"):
        return f"{commit} (uncommitted changes on top of {commit.removesuffix('-dirty')}; no diff recorded)"
    return commit


def provenance_rows(p: Provenance) -> tuple[tuple[str, str], ...]:
    """The appendix's provenance table: GPU, driver, clocks, tools, packages, commit, date."""
    prov = p.record
    gpus = prov.get("gpus") or []
    exported = ", ".join(p.nsys_exported)
    nsys_text = (f"{p.nsys_cli} (its SQLite exports name {exported})" if p.nsys_cli and exported and exported != p.nsys_cli
                 else p.nsys_cli or exported or "not recorded")
    clocks = p.sm_clocks_mhz
    clocks_text = ("SM clock while timed (NVML) " + (f"{clocks[0]} MHz" if clocks[0] == clocks[-1]
                                                    else f"{clocks[0]}–{clocks[-1]} MHz") if clocks
                   else "SM clock not recorded")
    return (("GPU", gpus[0]["name"] if gpus else "not recorded"),
            ("driver; CUDA runtime / driver API", f"{prov.get('driver_version') or 'not recorded'}; "
                                                 f"{prov.get('cuda_runtime')} / {prov.get('cuda_driver_api')}"),
            ("clocks", f"{clocks_text} over the steps; not locked (the ncu runs pass --clock-control none)"),
            ("Nsight Systems; Nsight Compute", f"{nsys_text}; {p.ncu_version or 'not recorded for this run'}"),
            ("Python; packages", f"{prov.get('python') or 'not recorded'}; {packages_text(prov)}"),
            ("commit", describe_commit(prov)), ("captured (UTC)", prov.get("date_utc") or "not recorded"))


def other_run_rows(p: Provenance) -> tuple[tuple[str, str, str], ...]:
    """(run, commit, date; packages) of each step captured apart from the main run."""
    return tuple((f"`{o.variant}` n{o.size}", describe_commit(o.provenance),
                  f"{o.provenance.get('date_utc')}; "
                  + ", ".join(f"{k} {v}" for k, v in sorted((o.provenance.get("packages") or {}).items())))
                 for o in p.other_runs)


def commands_note(from_job_records: bool, commits: tuple[tuple[str, ...], tuple[str, ...]]) -> str:
    """Where the page's commands were read (:func:`analysis.model.report_model.commands`), and whether
    they belong to the captures' run (the GPU jobs' commits against the captures')."""
    if not from_job_records:
        return ("no GPU job records were committed with these captures, so the timed and ncu commands are not "
                "known exactly; below, the program each nsys capture recorded itself launching (nsys' own flags "
                "are in `rules/profile.smk`)")
    job_commits, capture_commits = commits
    note = "the argv of each GPU job, from the GPU job records"
    if job_commits != capture_commits:
        note += (f" of the run at commit {', '.join(job_commits)}: another run of the same pipeline than "
                 f"the one these captures come from (commit {', '.join(capture_commits)})")
    return note


def collection_words(kind: str, left_out: Sequence[str]) -> str:
    """How the coverage line names one way of profiling: the full set, the full set less the sections
    named (the instrumented ones with the reason they are left out, any others as `rules/config.yaml`
    gives their reason), or the page's metrics alone."""
    if kind == COLLECTION_METRICS:
        less = (", less the tensor-core operation counts (the recipe's kernels run none, as its full-set step "
                "counts: `tensor_ops` in `rules/config.yaml`)" if TENSOR_OPS_LEFT_OUT in left_out else "")
        return f"only the metrics this page reads{less} (`--metrics`; no ncu rules)"
    if kind == COLLECTION_FULL:
        return "`--set full`"
    instrumented = [s for s in INSTRUMENTED_SECTIONS if s in left_out]
    others = [s for s in left_out if s not in INSTRUMENTED_SECTIONS]
    parts = []
    if instrumented:
        parts.append(f"{' and '.join(instrumented)}, the sections that patch the kernel's code and whose "
                     "metrics only kernel pages read")
    if others:
        parts.append(f"{', '.join(others)}, left out for the replay passes "
                     f"{'it costs' if len(others) == 1 else 'they cost'} (`rules/config.yaml` gives the measurement)")
    return "`--set full` less " + "; and less ".join(parts)


def _names(variants: Sequence[str]) -> str:
    return ", ".join(f"`{v}`" for v in variants)


def collection_text(cov: NcuCoverage) -> str:
    """How ncu profiled the steps: "`--set full`" when it profiled every step so, else each way with
    the steps it names."""
    if [how for how, _ in cov.collections] == [(COLLECTION_FULL, ())]:
        return collection_words(COLLECTION_FULL, ())
    return "; ".join(f"{collection_words(*how)}: {_names(variants)}" for how, variants in cov.collections)


def ncu_coverage_text(cov: NcuCoverage | None) -> str:
    """Which variants ran under Nsight Compute, at which sizes, and what stands for the others."""
    if cov is None:
        return "No step ran under Nsight Compute."
    parts = []
    for sc in cov.profiled_sizes:
        names = ", ".join(f"`{v}`" + (" (raw page only)" if raw_only else "") for v, raw_only in sc.profiled)
        others = [f"`{v}`" + (f" (runs the kernels of {_names(src)})" if src else " (its kernels not profiled)")
                  for v, src in sc.not_profiled]
        parts.append(f"at size {sc.size}: {names}" + (f"; not profiled: {', '.join(others)}" if others else ""))
    if cov.unprofiled_sizes:
        parts.append(f"no step at size {', '.join(map(str, cov.unprofiled_sizes))}")
    return (f"Nsight Compute ({collection_text(cov)}) profiled " + "; ".join(parts) + ", limited to the launches "
            "`rules/config.yaml` names; a step that runs the kernels of a profiled one takes its limiter from "
            "that profile (matched by kernel name, launch shape and per-launch time).")


def coverage_text(m: ReportModel) -> str:
    """The page's line on Nsight Compute: what it profiled, or why no step has counters."""
    return ncu_coverage_text(m.ncu_coverage) if m.counters else no_counters_text.coverage_line(m.preflight)


def no_counters_lines(m: ReportModel, size: int) -> tuple[str, ...]:
    """Without any ncu profile: the evidence that reaches without counters, at one size."""
    if m.counters:
        return ()
    runs = m.runs[size]
    return ("What limits each step, as far as the evidence without counters reaches, and the next move:", "",
            *no_counters_text.limiter_lines(runs, m.ceiling_records), "",
            *no_counters_text.size_section(runs, m.ceiling_records, size))


def _mb(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1e6:,.1f}"


def work_check_cells(rows: Sequence[WorkCheckRow]) -> tuple[tuple[str, ...], ...]:
    """Declared work beside what ncu measured per steady call, and the effective rate (declared bytes
    over the median) beside the DRAM throughput the kernels achieved: one table row a step."""
    out = []
    for row in rows:
        check = row.check
        ge = "" if check.complete() else "≥ "
        flops = ", ".join(f"{prec} {v:.3g}" for prec, v in sorted(check.measured_flops.items())) or "none counted"
        br, fr = check.bytes_ratio(), check.flops_ratio()
        dram = check.dram_gb_per_s()
        out.append((f"`{row.variant}`", f"{check.covered_share:.0%}", _mb(check.declared_bytes),
                    ge + _mb(check.measured_dram_bytes), f"{br:.2f}×" if br is not None else "n/a",
                    f"{check.declared_bytes / row.median_ms / 1e6:.0f}",
                    f"{dram:.0f}" if dram is not None else "n/a",
                    f"{check.declared_flops:.3g} {check.declared_kind}", ge + flops,
                    f"{fr:.2f}×" if fr is not None else "n/a", "; ".join(check.mismatches()) or "—"))
    return tuple(out)
