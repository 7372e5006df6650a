"""The pipeline's GPU jobs: which ran on which GPU, when, and whether two ever shared one.

Reads the records :mod:`workloads.tools.gpu_jobs` writes, one JSON file per job, in
``<work-dir>/gpu-jobs/``. Pure functions of those files; the markdown is in
:mod:`analysis.report.gpu_jobs_markdown`, the figure in :func:`analysis.report.figures.gpu_jobs_figure`.

A job *holds* its GPU from its start to its end, except a measurement run (or an experiment whose
processes do) that takes turns on a GPU it shares with other jobs (``assigned_by: turns``,
:mod:`workloads.harness.gpu_turn`): that one holds it only during the turns its record lists
(``gpu_turns``), and its imports and the profiler's start and finish run beside another job's turn
by design. Two jobs *overlap* when the times they hold
the GPU intersect on one host. An overlap on one physical GPU (same UUID) is a *shared GPU*: two
profilers measured each other. An overlap where a GPU is unknown (no nvidia-smi, or several GPUs
and nobody chose) cannot be judged and says so.
"""
from __future__ import annotations

import dataclasses
import glob
import os
import re
from dataclasses import dataclass
from itertools import combinations

from analysis.common.errors import AnalysisInputError
from analysis.model.run_summary import check_json, load_json, union_ns

#: the record format this reader knows (workloads/tools/gpu_jobs.py RECORD_VERSION)
RECORD_VERSION = 1
REQUIRED = ("record_version", "tag", "argv", "host", "assigned_by", "cuda_visible_devices", "gpu",
            "started_unix_ns", "ended_unix_ns", "returncode")
_NS = {"type": "integer", "minimum": 0}
_TEXT_OR_NULL = {"type": ["string", "null"]}
#: the fields this reader uses, with their types (workloads/tools/gpu_jobs.py writes them)
RECORD_SCHEMA = {
    "type": "object",
    "required": list(REQUIRED),
    "properties": {
        "record_version": {"type": "integer"},
        "tag": {"type": "string"},
        "argv": {"type": "array", "items": {"type": "string"}},
        "host": {"type": "string"},
        "assigned_by": {"type": "string"},
        "cuda_visible_devices": _TEXT_OR_NULL,
        "gpu": {"oneOf": [{"type": "null"}, {
            "type": "object", "required": ["index", "uuid", "pci_bus_id", "name"],
            "properties": {"index": {"type": "integer"}, "uuid": {"type": "string"},
                           "pci_bus_id": {"type": "string"}, "name": {"type": "string"},
                           "driver_version": _TEXT_OR_NULL}}]},
        "started_unix_ns": _NS,
        "ended_unix_ns": _NS,
        "returncode": {"type": ["integer", "null"]},
        "slurm_job_id": _TEXT_OR_NULL,
        "git_commit": _TEXT_OR_NULL,
        "killed_by": _TEXT_OR_NULL,
        # a job that held the GPU throughout ran on these CPU cores alone (workloads.harness.gpu_turn.split_cores)
        "cpu_cores": {"type": "string"},
        "gpu_turns": {"type": "array", "items": {
            "type": "object", "required": ["started_unix_ns", "ended_unix_ns"],
            "properties": {"started_unix_ns": _NS, "ended_unix_ns": _NS, "waited_s": {"type": "number"},
                           # the process died before writing its end: the end is a bound (gpu_jobs._read_turns)
                           "end_unknown": {"type": "boolean"},
                           # the run gave the GPU back before its exit (workloads.harness.gpu_turn.GpuTurn.release)
                           "released_before_exit": {"type": "boolean"},
                           # the CPU cores the run measured on with the GPU (workloads.harness.gpu_turn.split_cores)
                           "cpu_cores": {"type": "string"},
                           # and those it set up on, every core of the split (gpu_turn.take_turn)
                           "setup_cpu_cores": {"type": "string"},
                           # a start-up whose parent took the turn before launching it (gpu_turn.turn_for_child)
                           "handed_by_parent": {"type": "boolean"}}}},
    },
}
#: a pause longer than this between jobs starts a new run (a pipeline resumed another day)
NEW_RUN_GAP_NS = 30 * 60 * 10**9


@dataclass(frozen=True)
class GpuJob:
    path: str
    tool: str            # the rule's tag: timed, nsys, ncu, coldwarm, experiment, kernel, ceilings
    what: str            # workload/variant/n<size>, or the module it ran
    host: str
    gpu_uuid: str | None
    gpu_label: str       # "GPU 1 (00000000:1B:00.0)", or what is known
    gpu_name: str | None
    assigned_by: str     # scheduler, lock, default
    started_ns: int
    ended_ns: int
    returncode: int | None
    slurm_job_id: str | None
    driver_version: str | None = None   # absent from the first records (optional fields)
    git_commit: str | None = None
    #: (start, end) ns of the turns a job that takes turns held the GPU in; None: the whole job
    turns: tuple[tuple[int, int], ...] | None = None
    #: per turn, whether its end is a bound only: its process died before writing it (``end_unknown``)
    turn_end_unknown: tuple[bool, ...] = ()

    @property
    def duration_s(self) -> float:
        return (self.ended_ns - self.started_ns) / 1e9

    @property
    def held(self) -> tuple[tuple[int, int], ...]:
        """When the job held its GPU: its turns, or its whole run."""
        return ((self.started_ns, self.ended_ns),) if self.turns is None else self.turns

    @property
    def held_s(self) -> float:
        return sum(end - start for start, end in self.held) / 1e9


def describe_command(argv: list[str]) -> str:
    """What a job ran, from its command: ``workload/variant/n<size>`` for a recipe (under nsys or
    ncu too), else the Python module or program."""
    module = None
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m" and argv[i + 1].startswith("workloads."):
            module = argv[i + 1]
            break
    if module is None:
        return os.path.basename(argv[0]) if argv else "?"

    def option(name: str) -> str | None:
        for i, arg in enumerate(argv[:-1]):
            if arg == name:
                return argv[i + 1]
        return None

    name = module.removeprefix("workloads.")
    variant, size = option("--variant"), option("--size")
    if variant is None:
        return name
    return f"{name}/{variant}" + (f"/n{size}" if size else "")


def _gpu_label(record: dict) -> str:
    gpu = record["gpu"]
    if gpu is not None:
        return f"GPU {gpu['index']} ({gpu['pci_bus_id']})"
    visible = record["cuda_visible_devices"]
    return f"CUDA_VISIBLE_DEVICES={visible} (not identified)" if visible is not None else "default GPU (not identified)"


def parse_record(path: str) -> GpuJob:
    record = load_json(path)
    if isinstance(record, dict):
        missing = [k for k in REQUIRED if k not in record]
        if missing:
            raise AnalysisInputError(path, f"GPU job record lacks {', '.join(missing)}")
    check_json(path, record, RECORD_SCHEMA, "a GPU job record")
    if record["record_version"] != RECORD_VERSION:
        raise AnalysisInputError(path, f"record_version {record['record_version']}, this reader knows {RECORD_VERSION}")
    if record["ended_unix_ns"] < record["started_unix_ns"]:
        raise AnalysisInputError(path, "the job ends before it starts")
    gpu = record["gpu"]
    turns = record.get("gpu_turns")
    unknown: tuple[bool, ...] = ()
    if turns is not None:
        unknown = tuple(bool(t.get("end_unknown")) for t in turns)
        turns = tuple((t["started_unix_ns"], t["ended_unix_ns"]) for t in turns)
        if any(end < start for start, end in turns):
            raise AnalysisInputError(path, "a GPU turn ends before it starts")
    return GpuJob(path=path, tool=record["tag"], what=describe_command(record["argv"]), host=record["host"],
                  gpu_uuid=gpu["uuid"] if gpu else None, gpu_label=_gpu_label(record),
                  gpu_name=gpu["name"] if gpu else None, assigned_by=record["assigned_by"],
                  started_ns=record["started_unix_ns"], ended_ns=record["ended_unix_ns"],
                  returncode=record["returncode"], slurm_job_id=record.get("slurm_job_id"),
                  driver_version=gpu.get("driver_version") if gpu else None, git_commit=record.get("git_commit"),
                  turns=turns, turn_end_unknown=unknown)


def bound_unknown_ends(jobs: list[GpuJob]) -> list[GpuJob]:
    """The jobs, each turn whose end is unknown ended no later than the first time another job took
    the same GPU after it started: a GPU's lock is exclusive, so that job's start proves the dead
    process had let go (its record could only bound the end by its own job's next turn: a crashed
    setting of JAX's allocator experiment then seemed to share the GPU with the runs that followed it)."""
    starts: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for j in jobs:
        if j.gpu_uuid is not None:
            starts.setdefault((j.host, j.gpu_uuid), []).extend((start, j.path) for start, _ in j.held)
    out = []
    for j in jobs:
        if not any(j.turn_end_unknown) or j.gpu_uuid is None:
            out.append(j)
            continue
        others = [start for start, path in starts[(j.host, j.gpu_uuid)] if path != j.path]
        turns = []
        for (start, end), unknown in zip(j.turns, j.turn_end_unknown):
            if unknown:
                end = min([end, *(s for s in others if start < s < end)])
            turns.append((start, end))
        out.append(dataclasses.replace(j, turns=tuple(turns)))
    return out


def load_gpu_jobs(folder: str) -> list[GpuJob]:
    """Every record in ``folder``, by start time. Half-written files (``.*.tmp``) are not records."""
    paths = sorted(glob.glob(os.path.join(folder, "*.json")))
    if not paths:
        raise AnalysisInputError(folder, "no GPU job records (*.json): did any GPU job run with this work folder?")
    return sorted(bound_unknown_ends([parse_record(p) for p in paths]), key=lambda j: (j.started_ns, j.path))


def split_runs(jobs: list[GpuJob], gap_ns: int = NEW_RUN_GAP_NS) -> list[list[GpuJob]]:
    """Jobs grouped into runs: a new run starts after a pause of more than ``gap_ns`` in which no
    job ran."""
    runs: list[list[GpuJob]] = []
    last_end = None
    for job in sorted(jobs, key=lambda j: j.started_ns):
        if last_end is None or job.started_ns - last_end > gap_ns:
            runs.append([])
        runs[-1].append(job)
        last_end = job.ended_ns if last_end is None else max(last_end, job.ended_ns)
    return runs


@dataclass(frozen=True)
class Overlap:
    first: GpuJob
    second: GpuJob
    seconds: float
    verdict: str   # "separate GPUs", "shared GPU", "GPU unknown"


def overlaps(jobs: list[GpuJob]) -> list[Overlap]:
    """Every pair of jobs on one host that held a GPU at the same time (:attr:`GpuJob.held`), with
    a verdict on their GPUs."""
    out = []
    for a, b in combinations(sorted(jobs, key=lambda j: j.started_ns), 2):
        if a.host != b.host:
            continue
        seconds = sum(max(0, min(a_end, b_end) - max(a_start, b_start))
                      for a_start, a_end in a.held for b_start, b_end in b.held) / 1e9
        if seconds <= 0:
            continue
        if a.gpu_uuid is None or b.gpu_uuid is None:
            verdict = "GPU unknown"
        else:
            verdict = "shared GPU" if a.gpu_uuid == b.gpu_uuid else "separate GPUs"
        out.append(Overlap(a, b, seconds, verdict))
    return out


def max_concurrent(jobs: list[GpuJob]) -> int:
    """The most jobs running at one instant (an end at t comes before a start at t)."""
    events = sorted([(j.started_ns, 1) for j in jobs] + [(j.ended_ns, -1) for j in jobs])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


@dataclass(frozen=True)
class GpuUse:
    label: str
    name: str | None
    jobs: int
    busy_s: float


def per_gpu(jobs: list[GpuJob]) -> list[GpuUse]:
    """Jobs and busy seconds per GPU (per label: an unidentified GPU is its own row)."""
    rows: dict[str, list[GpuJob]] = {}
    for j in jobs:
        rows.setdefault(j.gpu_label, []).append(j)
    return [GpuUse(label, js[0].gpu_name, len(js), union_ns(span for j in js for span in j.held) / 1e9)
            for label, js in sorted(rows.items(), key=lambda kv: gpu_label_order(kv[0]))]


def gpu_label_order(label: str) -> tuple:
    """GPU 2 before GPU 10: labels sorted by their numbers, then by text."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", label))


@dataclass(frozen=True)
class RunSummary:
    jobs: list[GpuJob]
    wall_s: float             # first start to last end
    job_s: float              # the jobs' durations summed: their time one after the other
    max_concurrent: int
    gpus: list[GpuUse]
    overlaps: list[Overlap]
    failed: list[GpuJob]

    @property
    def shared(self) -> list[Overlap]:
        return [o for o in self.overlaps if o.verdict == "shared GPU"]

    @property
    def unknown(self) -> list[Overlap]:
        return [o for o in self.overlaps if o.verdict == "GPU unknown"]


def summarize(jobs: list[GpuJob]) -> RunSummary:
    start = min(j.started_ns for j in jobs)
    end = max(j.ended_ns for j in jobs)
    return RunSummary(jobs=jobs, wall_s=(end - start) / 1e9, job_s=sum(j.duration_s for j in jobs),
                      max_concurrent=max_concurrent(jobs), gpus=per_gpu(jobs), overlaps=overlaps(jobs),
                      failed=[j for j in jobs if j.returncode != 0])

