"""Where a pipeline run's GPU time went: GPU-job seconds by kind of job, by recipe and by variant,
and the run's wall time, from the GPU job records every GPU job writes (workloads.tools.gpu_jobs).

    python -m analysis.cli.pipeline_time results            # the latest run in results/gpu-jobs
    python -m analysis.cli.pipeline_time results --all-runs # every run the folder holds
    python -m analysis.cli.pipeline_time --captures reports/reference/h100   # phases only
    python -m analysis.cli.pipeline_time results --ncu      # and what each ncu run replayed

The records say when each job started and ended and what it ran, so the tables are the jobs' own
wall times: a job's setup (imports, input generation, the float64 check) counts with its
measurement, which is what a budget has to pay for. *Wall* is the first job's start to the last
job's end; *GPU held* is how long a job held its GPU: the whole job, or, for a measurement run that
takes turns on a shared GPU (workloads.harness.gpu_turn), its turn, from its setup until its memory is freed or its exit; *GPU busy*
is the union of those times (jobs on several GPUs overlap). What lies outside them on one GPU is
Snakemake, analysis, scheduling, and the imports and profiler start and finish of runs waiting for
their turn.

Inside the jobs, the runs' own records (``timing.json``, ``nsys-run.json``, ``ncu-run.json`` in
the capture folder) say how long each phase of the program took on the host (``host_wall_s``: setup,
warm-up, the calls, transfer and check; the timed runs' sampling and energy burst): the *phases*
tables. A job's time beyond its phases is the interpreter, imports, CUDA context and the profiler's
own start and finish.

The *start-ups* table sets each cold/warm job's GPU time against its processes' measured time to
their first result (``<captures>/coldstart/``): what the job held beyond what it measured.

With ``--ncu``, each ncu report's own record of its replay (analysis.readers.ncu.REPLAY_METRICS: passes,
device memory saved and restored) beside the profiled call's host time: where a step's Nsight
Compute run spends its time, pass by pass.
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

from analysis.model import gpu_jobs

from analysis.common import layout
from analysis.common.errors import AnalysisInputError
from analysis.common.gzfiles import existing_capture
from analysis.model.run_summary import load_json, union_ns


@dataclass(frozen=True)
class Row:
    key: str
    jobs: int
    job_s: float
    slowest_s: float
    failed: int
    held_s: float  # the jobs' time holding the GPU (GpuJob.held)


@dataclass(frozen=True)
class Budget:
    jobs: int
    wall_s: float
    job_s: float  # the jobs' durations summed: their time one after the other
    busy_s: float  # the union of the times the jobs held a GPU
    gpus: int
    by_kind: tuple[Row, ...]
    by_recipe: tuple[Row, ...]
    by_variant: tuple[Row, ...]


def _rows(groups: dict[str, list[gpu_jobs.GpuJob]]) -> tuple[Row, ...]:
    rows = [Row(k, len(js), sum(j.duration_s for j in js), max(j.duration_s for j in js),
                sum(1 for j in js if j.returncode != 0), sum(j.held_s for j in js)) for k, js in groups.items()]
    return tuple(sorted(rows, key=lambda r: (-r.job_s, r.key)))


def recipe_of(job: gpu_jobs.GpuJob) -> str:
    """The recipe a job ran (``what`` is ``recipe/variant/n<size>`` or a module), else ``(suite)``
    for the suite's own jobs (ceilings, preflight, counter probe)."""
    head = job.what.split("/")[0]
    return head if "/" in job.what or not head.startswith("tools.") else "(suite)"


def budget(jobs: Sequence[gpu_jobs.GpuJob]) -> Budget:
    """A pure function of the jobs of one run."""
    if not jobs:
        raise ValueError("no GPU jobs")
    by_kind: dict[str, list] = {}
    by_recipe: dict[str, list] = {}
    by_variant: dict[str, list] = {}
    for j in jobs:
        by_kind.setdefault(j.tool, []).append(j)
        by_recipe.setdefault(recipe_of(j), []).append(j)
        parts = j.what.split("/")
        if len(parts) >= 2:
            by_variant.setdefault("/".join(parts[:2]), []).append(j)
    start = min(j.started_ns for j in jobs)
    end = max(j.ended_ns for j in jobs)
    return Budget(jobs=len(jobs), wall_s=(end - start) / 1e9, job_s=sum(j.duration_s for j in jobs),
                  busy_s=union_ns(span for j in jobs for span in j.held) / 1e9,
                  gpus=len({j.gpu_label for j in jobs}),
                  by_kind=_rows(by_kind), by_recipe=_rows(by_recipe), by_variant=_rows(by_variant))


def _table(title: str, rows: Iterable[Row], total_s: float) -> list[str]:
    out = [f"| {title} | jobs | GPU-job s | share | slowest job s | GPU held s | failed |",
           "|---|---|---|---|---|---|---|"]
    out += [f"| {r.key} | {r.jobs} | {r.job_s:.1f} | {r.job_s / total_s:.0%} | {r.slowest_s:.1f} | {r.held_s:.1f} "
            f"| {r.failed} |" for r in rows]
    return out + [""]


def format_budget(b: Budget, heading: str) -> str:
    lines = [f"## {heading}", "",
             f"{b.jobs} GPU jobs on {b.gpus} GPU(s): wall {b.wall_s:.0f} s ({b.wall_s / 60:.1f} min) from the first "
             f"job's start to the last one's end; GPU-job time {b.job_s:.0f} s one after the other; GPU busy "
             f"(union of the times jobs held it) {b.busy_s:.0f} s, so {max(b.wall_s - b.busy_s, 0.0):.0f} s of the "
             "wall had no job on the GPU.", ""]
    lines += _table("kind", b.by_kind, b.job_s)
    lines += _table("recipe", b.by_recipe, b.job_s)
    lines += _table("recipe/variant", b.by_variant, b.job_s)
    return "\n".join(lines)


#: a run record's file name -> the kind of GPU job that wrote it
RECORD_KINDS = {"timing.json": "timed", "nsys-run.json": "nsys", "ncu-run.json": "ncu"}
#: the phases, in program order: the records' host_wall_s keys, then the timed runs' sampling and burst
PHASES = ("prepare_host", "setup", "warmup", "sampling", "energy burst", "compute", "transfer_and_check")
PHASES_ALWAYS_SHOWN = frozenset(PHASES) - {"prepare_host"}
PHASE_TITLES = {"prepare_host": "host arrays (before the turn)", "setup": "setup", "warmup": "warm-up", "sampling": "timed samples", "energy burst": "energy burst",
                "compute": "calls (profiled)", "transfer_and_check": "transfer + check"}


@dataclass(frozen=True)
class PhaseRow:
    key: str
    runs: int
    #: phase -> seconds summed over the runs
    seconds: dict[str, float]


def phase_seconds(record: dict) -> dict[str, float]:
    """Host seconds per phase of one run record."""
    out = {k: float(v) for k, v in (record.get("host_wall_s") or {}).items()}
    sampling = (record.get("sampling") or {}).get("elapsed_s")
    if sampling is not None:
        out["sampling"] = float(sampling)
    burst = ((record.get("telemetry") or {}).get("burst") or {}).get("wall_s")
    if burst is not None:
        out["energy burst"] = float(burst)
    return out


def run_folders(captures_dir: str) -> Iterator[tuple[list[str], str]]:
    """(``[recipe, variant, "n<size>"]``, folder) of every run folder under ``captures_dir``, in order."""
    for folder, _, _files in sorted(os.walk(captures_dir)):
        rel = os.path.relpath(folder, captures_dir).split(os.sep)
        if len(rel) == 3 and rel[2].startswith("n"):
            yield rel, folder


def phases(captures_dir: str) -> tuple[tuple[PhaseRow, ...], tuple[PhaseRow, ...]]:
    """Phase seconds by kind of run and by recipe, from every run record under ``captures_dir``
    (``<recipe>/<variant>/n<size>/``; plain or gzipped, as a reference keeps them)."""
    by_kind: dict[str, list[dict]] = {}
    by_recipe: dict[str, list[dict]] = {}
    for rel, folder in run_folders(captures_dir):
        for name, kind in RECORD_KINDS.items():
            if existing_capture(folder, name):
                seconds = phase_seconds(load_json(os.path.join(folder, name)))
                by_kind.setdefault(kind, []).append(seconds)
                by_recipe.setdefault(rel[0], []).append(seconds)
    if not by_kind:
        raise AnalysisInputError(captures_dir, "no run records (<recipe>/<variant>/n<size>/timing.json, "
                                               "nsys-run.json, ncu-run.json)")

    def rows(groups: dict[str, list[dict]]) -> tuple[PhaseRow, ...]:
        out = [PhaseRow(k, len(rs), {p: sum(r.get(p, 0.0) for r in rs) for p in PHASES}) for k, rs in groups.items()]
        return tuple(sorted(out, key=lambda r: (-sum(r.seconds.values()), r.key)))

    return rows(by_kind), rows(by_recipe)


def format_phases(by_kind: Sequence[PhaseRow], by_recipe: Sequence[PhaseRow], heading: str) -> str:
    # a phase no run has (records older than the phase, e.g. prepare_host) gets no column
    shown = [p for p in PHASES if p in PHASES_ALWAYS_SHOWN or any(r.seconds[p] for r in by_kind)]

    def table(title: str, rows: Sequence[PhaseRow]) -> list[str]:
        head = f"| {title} | runs | " + " | ".join(f"{PHASE_TITLES[p]} s" for p in shown) + " | phases s |"
        out = [head, "|---|---|" + "---|" * (len(shown) + 1)]
        out += [f"| {r.key} | {r.runs} | " + " | ".join(f"{r.seconds[p]:.1f}" for p in shown)
                + f" | {sum(r.seconds.values()):.1f} |" for r in rows]
        return out + [""]

    return "\n".join([f"## {heading}", ""] + table("kind", by_kind) + table("recipe", by_recipe))


@dataclass(frozen=True)
class StartupRow:
    """One cold/warm job: its processes' measured start-ups against what the job held the GPU."""
    step: str  # recipe/variant
    processes: int
    measured_s: float  # the processes' launch-to-first-result times, summed
    held_s: float  # what the job held the GPU (GpuJob.held_s)

    @property
    def beyond_s(self) -> float:
        """GPU time outside the measured start-ups: each process's steady calls, and where it keeps
        its turn (or its job holds the GPU throughout) its check and exit and the job's own work."""
        return self.held_s - self.measured_s


def startups(jobs: Sequence[gpu_jobs.GpuJob], captures_dir: str) -> tuple[tuple[StartupRow, ...], tuple[str, ...]]:
    """Per cold/warm job of the run (``coldwarm`` records), its start-ups from its record
    (``<captures>/coldstart/<recipe>_<variant>.json``, plain or gzipped); and the steps of finished
    jobs whose record is not (yet) there, which the table leaves out."""
    rows, missing = [], []
    for job in jobs:
        if job.tool != "coldwarm" or job.returncode != 0:
            continue
        recipe, variant = job.what.split("/")[:2]
        path = os.path.join(captures_dir, layout.COLDSTART, f"{recipe}_{variant}.json")
        if not existing_capture(os.path.dirname(path), os.path.basename(path)):
            missing.append(f"{recipe}/{variant}")
            continue
        runs = [r for r in load_json(path).get("runs", {}).values() if "phases" in r]
        rows.append(StartupRow(f"{recipe}/{variant}", len(runs),
                               sum(r["phases"]["time_to_first_result_s"] for r in runs), job.held_s))
    return tuple(sorted(rows, key=lambda r: (-r.beyond_s, r.step))), tuple(missing)


def format_startups(rows: Sequence[StartupRow], missing: Sequence[str], heading: str) -> str:
    lines = [f"## {heading}", "",
             "GPU held beyond: the job's GPU time outside its processes' measured start-ups (launch to first "
             "result): their steady calls, and where a process keeps its turn to its exit (or its job holds the "
             "GPU throughout) its check, record and exit and the job's work between processes.", "",
             "| recipe/variant | processes | launch to first result s | GPU held s | GPU held beyond s |",
             "|---|---|---|---|---|"]
    lines += [f"| {r.step} | {r.processes} | {r.measured_s:.1f} | {r.held_s:.1f} | {r.beyond_s:.1f} |" for r in rows]
    lines.append(f"| all | {sum(r.processes for r in rows)} | {sum(r.measured_s for r in rows):.1f} | "
                 f"{sum(r.held_s for r in rows):.1f} | {sum(r.beyond_s for r in rows):.1f} |")
    if missing:
        lines += ["", f"Left out, their record not written yet: {', '.join(missing)}."]
    return "\n".join(lines + [""])


@dataclass(frozen=True)
class ReplayRow:
    """One profiled step's Nsight Compute run: what ncu replayed, and the profiled call's host time."""
    step: str  # recipe/variant/n<size>
    launches: int
    passes: int | None  # None: a report older than ncu's replay record
    backed_up_bytes: float | None  # device memory ncu saved before the passes, summed over the passes
    call_s: float | None  # the profiled call's host seconds (ncu-run.json host_wall_s "compute")
    collection: str  # analysis.readers.ncu.Launch.collection of its launches ("full", "full_set_less", "metrics")

    @property
    def ms_per_pass(self) -> float | None:
        return self.call_s / self.passes * 1e3 if self.call_s is not None and self.passes else None


def ncu_replays(captures_dir: str) -> tuple[ReplayRow, ...]:
    """Every ncu capture under ``captures_dir`` (``<recipe>/<variant>/n<size>/ncu.ncu-rep``, or
    ``.gz``), read through analysis.readers.ncu (one child process per report: about a second each), the
    costliest profiled call first."""
    from analysis.readers import ncu as ncu_reader  # noqa: PLC0415 (the native module loads only when asked

    rows = []
    for rel, folder in run_folders(captures_dir):
        report = existing_capture(folder, layout.NCU_REPORT)
        if report is None:
            continue
        launches = ncu_reader.read_launches(report)

        def summed(metric: str) -> float | None:
            values = [launch.metrics.get(metric) for launch in launches]
            return None if any(v is None for v in values) else float(sum(values))

        call_s = (phase_seconds(load_json(os.path.join(folder, layout.NCU_RUN))).get("compute")
                  if existing_capture(folder, layout.NCU_RUN) else None)
        passes = summed("profiler__replayer_passes")
        rows.append(ReplayRow("/".join(rel), len(launches), None if passes is None else int(passes),
                              summed("profiler__replayer_bytes_mem_backed_up.sum"), call_s,
                              "/".join(sorted({launch.collection for launch in launches}))))
    if not rows:
        raise AnalysisInputError(captures_dir, "no ncu captures (<recipe>/<variant>/n<size>/ncu.ncu-rep)")
    return tuple(sorted(rows, key=lambda r: (-(r.call_s or 0.0), r.step)))


def format_replays(rows: Sequence[ReplayRow], heading: str) -> str:
    def num(x, fmt: str) -> str:
        return "n/a" if x is None else format(x, fmt)

    out = [f"## {heading}", "",
           "Passes and device memory saved before them and restored between them, summed over the step's profiled "
           "launches (ncu's own replay record); the profiled call's host time includes its unprofiled work "
           "(copies, other kernels), so its time per pass bounds a pass's cost from above.", "",
           "| step | collection | launches | passes | saved and restored GB | profiled call s | call ms per pass |",
           "|---|---|---|---|---|---|---|"]
    out += [f"| {r.step} | {r.collection} | {r.launches} | {num(r.passes, 'd')} | "
            f"{num(None if r.backed_up_bytes is None else r.backed_up_bytes / 1e9, '.1f')} | {num(r.call_s, '.1f')} | "
            f"{num(r.ms_per_pass, '.0f')} |" for r in rows]
    return "\n".join(out + [""])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.cli.pipeline_time", description=__doc__.split("\n\n")[0])
    p.add_argument("results_dir", nargs="?", default=None,
                   help="the pipeline's work folder (config work_dir, e.g. results): its gpu-jobs/ holds the GPU job "
                        "records (a folder of records is taken as it is), its captures/ the runs' own records")
    p.add_argument("--captures", default=None,
                   help="the run records whose phases to sum (default: RESULTS_DIR/captures where it exists); a "
                        "reference folder works too, alone: then only the phases are printed")
    p.add_argument("--ncu", action="store_true",
                   help="also what each ncu run replayed: launches, passes, device memory saved and restored, "
                        "and the profiled call's time per pass (reads each ncu report: about a second each)")
    p.add_argument("--all-runs", action="store_true",
                   help="one budget per run the folder holds (runs are split at pauses of over 30 minutes), "
                        "not only the latest")
    a = p.parse_args(argv)
    if a.results_dir is None and a.captures is None:
        p.error("give RESULTS_DIR, --captures DIR, or both")
    captures = a.captures or (os.path.join(a.results_dir, "captures")
                              if os.path.isdir(os.path.join(a.results_dir, "captures")) else None)
    try:
        if a.results_dir is not None:
            folder = os.path.join(a.results_dir, "gpu-jobs")
            if not os.path.isdir(folder):
                folder = a.results_dir
            runs = gpu_jobs.split_runs(gpu_jobs.load_gpu_jobs(folder))
            chosen = list(enumerate(runs, 1)) if a.all_runs else [(len(runs), runs[-1])]
            for number, jobs in chosen:
                print(format_budget(budget(jobs), f"Run {number} of {len(runs)} in {folder}"))
                if captures is not None and any(j.tool == "coldwarm" for j in jobs):
                    print(format_startups(*startups(jobs, captures),
                                          f"Cold/warm start-ups of run {number}, from the records in {captures}"))
        if captures is not None and (a.captures or any(run_folders(captures))):
            print(format_phases(*phases(captures), f"Phases inside the runs, from the records in {captures}"))
        elif captures is not None:
            # RESULTS_DIR/captures of a run whose steps have not written a record yet (cold/warm jobs only)
            print(f"No step's run records in {captures} yet: no phases.")
        if a.ncu:
            if captures is None:
                p.error("--ncu reads the captures: give RESULTS_DIR with a captures/ folder, or --captures DIR")
            print(format_replays(ncu_replays(captures), f"Nsight Compute's replays, from the reports in {captures}"))
    except AnalysisInputError as e:
        print(f"pipeline_time: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
