"""reports/gpu_jobs.md: the pipeline's GPU jobs, from :mod:`analysis.model.gpu_jobs`."""
from __future__ import annotations

import datetime as _dt

from analysis.model.gpu_jobs import GpuJob, RunSummary
from analysis.report.markdown import table

#: the longest jobs listed in the report's "where the time went" table
LONGEST = 10


def _utc(ns: int) -> str:
    return _dt.datetime.fromtimestamp(ns / 1e9, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _known(values: set) -> str:
    """The values the records carry; records from before a field existed say so."""
    known = sorted(v for v in values if v)
    if not known:
        return "not recorded"
    return ", ".join(known) + (" (some records: not recorded)" if None in values or "" in values else "")


def _verdict_lines(s: RunSummary) -> list[str]:
    if s.shared:
        lines = [f"- **Two profilers shared a GPU {len(s.shared)} time(s):** their numbers disturbed each "
                 "other; rerun those jobs. (Jobs overlap on one GPU when `CUDA_VISIBLE_DEVICES` was set by "
                 "hand to one GPU for several jobs, or `gpus` in the config exceeds the GPUs there are.)"]
        lines += [f"  - `{o.first.tool}` {o.first.what} and `{o.second.tool}` {o.second.what} on "
                  f"{o.first.gpu_label}, {o.seconds:.1f} s" for o in s.shared]
        return lines
    separate = len(s.overlaps) - len(s.unknown)
    lines = []
    if s.max_concurrent == 1:
        lines.append("- **One job at a time:** no two GPU jobs overlapped.")
    elif not s.overlaps:
        # one GPU shared through its lock: the jobs in flight held it by turns
        lines.append(f"- **Up to {s.max_concurrent} jobs at once, never two holding a GPU together:** the jobs in "
                     "flight took turns on it (their records' GPU turns do not overlap).")
    else:
        lines.append(f"- **Up to {s.max_concurrent} jobs at once; never two on one GPU:** {separate} pairs of "
                     "jobs held GPUs at the same time, each pair on separate GPUs (by UUID).")
    if s.unknown:
        lines.append(f"- **{len(s.unknown)} overlapping pairs could not be checked:** a job's GPU is not known "
                     "(no `nvidia-smi`, or several GPUs and no `CUDA_VISIBLE_DEVICES`).")
    return lines


def _job_row(j: GpuJob, t0: int) -> list[object]:
    rc = "—" if j.returncode is None else j.returncode
    return [f"{(j.started_ns - t0) / 1e9:.1f}", f"{(j.ended_ns - t0) / 1e9:.1f}", f"{j.duration_s:.1f}",
            j.gpu_label, j.assigned_by, f"`{j.tool}`", j.what, j.slurm_job_id or "—", rc]


def gpu_jobs_report(runs: list[RunSummary], figure: str | None) -> str:
    """The latest run in full (figure, GPUs, verdict, longest jobs, every job); earlier runs in
    the same work folder as one line each."""
    s = runs[-1]
    t0 = min(j.started_ns for j in s.jobs)
    hosts = sorted({j.host for j in s.jobs})
    per_name: dict[str, set] = {}
    for j in s.jobs:
        if j.gpu_uuid:
            per_name.setdefault(j.gpu_name, set()).add(j.gpu_uuid)
    names = [f"{len(uuids)} × {name}" for name, uuids in sorted(per_name.items())]
    scheduler = "SLURM" if any(j.slurm_job_id for j in s.jobs) else "this machine's Snakemake"
    out = ["# GPU jobs: which ran where and when", "",
           "Every GPU job of the pipeline (timed runs, nsys, ncu, cold/warm starts, experiments, kernel "
           "pages) records when it ran and on which physical GPU (UUID and PCI bus id from `nvidia-smi`). "
           "This page is made from those records (`<work_dir>/gpu-jobs/`, one JSON file per job).", "",
           table(["", ""], [["first job started", _utc(t0)], ["host(s)", ", ".join(hosts)],
                            ["GPUs", ", ".join(names) or "not identified"],
                            ["driver", _known({j.driver_version for j in s.jobs})],
                            ["suite commit", _known({j.git_commit for j in s.jobs})],
                            ["jobs scheduled by", scheduler]]), "",
           "## Verdict", "", *_verdict_lines(s)]
    if s.failed:
        out.append(f"- **{len(s.failed)} job(s) failed** (non-zero exit status): "
                   + ", ".join(f"`{j.tool}` {j.what}" for j in s.failed))
    out += ["", "## Time", "",
            f"The run's GPU jobs took {s.wall_s:.1f} s from the first start to the last end; one after the "
            f"other they would take {s.job_s:.1f} s ({s.job_s / s.wall_s:.2f}× the wall time).", "",
            table(["GPU", "name", "jobs", "busy s", "busy % of the run"],
                  [[g.label, g.name or "—", g.jobs, f"{g.busy_s:.1f}", f"{100 * g.busy_s / s.wall_s:.0f}%"]
                   for g in s.gpus]), ""]
    if figure:
        out += [f"![GPU jobs by GPU and time]({figure})", ""]
    by_tool: dict[str, list[GpuJob]] = {}
    for j in s.jobs:
        by_tool.setdefault(j.tool, []).append(j)
    out += ["By kind of job:", "",
            table(["job", "count", "total s", "longest s"],
                  [[f"`{t}`", len(js), f"{sum(j.duration_s for j in js):.1f}", f"{max(j.duration_s for j in js):.1f}"]
                   for t, js in sorted(by_tool.items(), key=lambda kv: -sum(j.duration_s for j in kv[1]))]), "",
            f"The {min(LONGEST, len(s.jobs))} longest jobs:", "",
            table(["start s", "end s", "seconds", "GPU", "chosen by", "job", "what", "SLURM job", "exit"],
                  [_job_row(j, t0) for j in sorted(s.jobs, key=lambda j: -j.duration_s)[:LONGEST]]), "",
            "<details><summary>Every job, by start time</summary>", "",
            table(["start s", "end s", "seconds", "GPU", "chosen by", "job", "what", "SLURM job", "exit"],
                  [_job_row(j, t0) for j in s.jobs]), "", "</details>", ""]
    if len(runs) > 1:
        out += ["## Earlier runs in this work folder", ""]
        out += [f"- {_utc(min(j.started_ns for j in r.jobs))}: {len(r.jobs)} jobs, {r.wall_s:.0f} s, "
                f"up to {r.max_concurrent} at once" for r in runs[:-1]]
        out.append("")
    return "\n".join(out)
