"""Where a pipeline run's GPU time went: GPU-job seconds by kind of job, by recipe and by variant,
and the run's wall time, from the GPU job records every GPU job writes (workloads.tools.gpu_jobs).

    python -m workloads.tools.pipeline_time results            # the latest run in results/gpu-jobs
    python -m workloads.tools.pipeline_time results --all-runs # every run the folder holds

The records say when each job started and ended and what it ran, so the tables are the jobs' own
wall times: a job's setup (imports, input generation, the float64 check) counts with its
measurement, which is what a budget has to pay for. *Wall* is the first job's start to the last
job's end; *GPU busy* is the union of the jobs' intervals (jobs on several GPUs overlap); what lies
between jobs on one GPU is Snakemake, analysis and scheduling.
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Iterable, Sequence

from analysis import gpu_jobs
from analysis.errors import AnalysisInputError
from analysis.run_summary import union_ns


@dataclass(frozen=True)
class Row:
    key: str
    jobs: int
    job_s: float
    slowest_s: float
    failed: int


@dataclass(frozen=True)
class Budget:
    jobs: int
    wall_s: float
    job_s: float  # the jobs' durations summed: their time one after the other
    busy_s: float  # the union of the jobs' intervals
    gpus: int
    by_kind: tuple[Row, ...]
    by_recipe: tuple[Row, ...]
    by_variant: tuple[Row, ...]


def _rows(groups: dict[str, list[gpu_jobs.GpuJob]]) -> tuple[Row, ...]:
    rows = [Row(k, len(js), sum(j.duration_s for j in js), max(j.duration_s for j in js),
                sum(1 for j in js if j.returncode != 0)) for k, js in groups.items()]
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
                  busy_s=union_ns((j.started_ns, j.ended_ns) for j in jobs) / 1e9,
                  gpus=len({j.gpu_label for j in jobs}),
                  by_kind=_rows(by_kind), by_recipe=_rows(by_recipe), by_variant=_rows(by_variant))


def _table(title: str, rows: Iterable[Row], total_s: float) -> list[str]:
    out = [f"| {title} | jobs | GPU-job s | share | slowest job s | failed |", "|---|---|---|---|---|---|"]
    out += [f"| {r.key} | {r.jobs} | {r.job_s:.1f} | {r.job_s / total_s:.0%} | {r.slowest_s:.1f} | {r.failed} |"
            for r in rows]
    return out + [""]


def format_budget(b: Budget, heading: str) -> str:
    lines = [f"## {heading}", "",
             f"{b.jobs} GPU jobs on {b.gpus} GPU(s): wall {b.wall_s:.0f} s ({b.wall_s / 60:.1f} min) from the first "
             f"job's start to the last one's end; GPU-job time {b.job_s:.0f} s one after the other; GPU busy "
             f"(union of the jobs) {b.busy_s:.0f} s, so {max(b.wall_s - b.busy_s, 0.0):.0f} s of the wall had no "
             "GPU job running.", ""]
    lines += _table("kind", b.by_kind, b.job_s)
    lines += _table("recipe", b.by_recipe, b.job_s)
    lines += _table("recipe/variant", b.by_variant, b.job_s)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workloads.tools.pipeline_time", description=__doc__.split("\n\n")[0])
    p.add_argument("results_dir", help="the pipeline's work folder (config work_dir, e.g. results): its gpu-jobs/ "
                                       "holds the records; a folder of records is taken as it is")
    p.add_argument("--all-runs", action="store_true",
                   help="one budget per run the folder holds (runs are split at pauses of over 30 minutes), "
                        "not only the latest")
    a = p.parse_args(argv)
    folder = os.path.join(a.results_dir, "gpu-jobs")
    if not os.path.isdir(folder):
        folder = a.results_dir
    try:
        runs = gpu_jobs.split_runs(gpu_jobs.load_gpu_jobs(folder))
    except AnalysisInputError as e:
        print(f"pipeline_time: {e}", file=sys.stderr)
        return 2
    chosen = list(enumerate(runs, 1)) if a.all_runs else [(len(runs), runs[-1])]
    for number, jobs in chosen:
        print(format_budget(budget(jobs), f"Run {number} of {len(runs)} in {folder}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
