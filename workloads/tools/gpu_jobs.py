"""Which GPU a profiling job runs on, and a record of it when it ends.

Every GPU job of the pipeline (timed run, nsys, ncu, cold/warm start, experiment, kernel page)
goes through :func:`gpu_job`. It picks the GPU:

- ``scheduler``: ``CUDA_VISIBLE_DEVICES`` was set before the job started (SLURM sets it to the
  GPU it assigned; a user may set it by hand): it is kept.
- ``lock``: more than one GPU on this machine (config ``gpus``) and nobody chose: the job takes
  the first free one of ``<work-dir>/gpu-locks/<host>/gpu<i>.lock`` (an exclusive ``flock``). Snakemake's
  ``gpu`` resource caps how many jobs run at once; the locks decide which GPU each one gets, so two
  profilers never share one.
- ``default``: one GPU (config ``gpus: 1``): CUDA's device 0, one job at a time (the lock of
  GPU 0), whatever Snakemake's ``--resources gpu=K`` lets through.
- ``turns``: one GPU, and the job is one of a step's measurement runs or an experiment whose
  processes take turns (``turns=True``): the job does not hold GPU 0's lock; each run inside takes
  it for its GPU part (:mod:`workloads.gpu_turn`), so that K jobs let through at once start and
  finish beside each other and take turns on the GPU. Its record lists the turns (``gpu_turns``), one per run.

When the job ends (also when it fails), one JSON file per job is written to
``<work-dir>/gpu-jobs/``: when it started and ended (Unix ns), the command, how the GPU was chosen,
the GPU's UUID, PCI bus id and driver from ``nvidia-smi`` (the physical GPU, not an index that
depends on ordering), the host, the SLURM job id and the suite's commit. ``python -m analysis gpu-jobs`` turns the folder into
``reports/gpu_jobs.md``: which job ran on which GPU and when, and whether two ever shared one.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Iterator, MutableMapping, Sequence

from analysis.outputs import write_json_atomic
from workloads import gpu_turn
from workloads.provenance import git_commit, tool_output

#: the format of a job record; analysis/gpu_jobs.py refuses others
RECORD_VERSION = 1
RECORDS_FOLDER = "gpu-jobs"


def lock_folder(work_dir: str | os.PathLike) -> Path:
    """``<work-dir>/gpu-locks/<host>`` (per host: a work folder on a shared file system serves
    several nodes, each with its own GPU 0)."""
    lock_dir = Path(work_dir).resolve() / "gpu-locks" / platform.node()
    lock_dir.mkdir(parents=True, exist_ok=True)
    return lock_dir


@contextlib.contextmanager
def gpu_slot(work_dir: str | os.PathLike, n_gpus: int, poll_s: float = 0.5) -> Iterator[int]:
    """Hold one of ``n_gpus`` GPUs of this host for the duration: an exclusive lock on
    ``<work-dir>/gpu-locks/<host>/gpu<i>.lock``."""
    lock_dir = lock_folder(work_dir)
    said = False
    while True:
        for i in range(n_gpus):
            f = open(lock_dir / f"gpu{i}.lock", "w")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                continue
            try:
                yield i
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
                f.close()
            return
        if not said:  # every GPU busy: more jobs than GPUs were let through
            print(f"waiting for a GPU: all {n_gpus} are held by other jobs ({lock_dir})", file=sys.stderr, flush=True)
            said = True
        time.sleep(poll_s)


class GpuCountError(RuntimeError):
    """The configuration names more GPUs than this host has."""


def parse_gpu_list(text: str) -> list[dict]:
    """``nvidia-smi --query-gpu=index,uuid,pci.bus_id,name,driver_version --format=csv`` (with or
    without its header line) as one dict per GPU."""
    gpus = []
    for line in text.strip().splitlines():
        index, uuid, bus, name, driver = (x.strip() for x in line.split(","))
        if index == "index":
            continue  # the header
        gpus.append({"index": int(index), "uuid": uuid, "pci_bus_id": bus, "name": name, "driver_version": driver})
    return gpus


def physical_gpus() -> list[dict]:
    """This machine's GPUs as nvidia-smi lists them (index order = PCI bus order); [] without
    nvidia-smi. nvidia-smi ignores CUDA_VISIBLE_DEVICES, so this is every GPU of the host."""
    out = tool_output(["nvidia-smi", "--query-gpu=index,uuid,pci.bus_id,name,driver_version",
                       "--format=csv,noheader"])
    if not out:
        return []
    return parse_gpu_list(out)


def check_gpu_count(n_gpus: int, gpus: list[dict], host: str) -> None:
    """Refuse ``gpus: N`` above the GPUs nvidia-smi lists: a job sent to GPU N-1 would find no
    device and fail with a CUDA error far from the cause. Without nvidia-smi, nothing to check."""
    if gpus and n_gpus > len(gpus):
        raise GpuCountError(f"config gpus={n_gpus}, but nvidia-smi lists {len(gpus)} GPU(s) on {host}: "
                            f"set gpus (rules/config.yaml or --config gpus=N) to at most {len(gpus)}")


def visible_gpu(cuda_visible_devices: str | None, gpus: list[dict]) -> dict | None:
    """The physical GPU that is CUDA's device 0 under ``cuda_visible_devices`` (an index in PCI
    bus order, or a UUID), or None when that cannot be told: no nvidia-smi, or several GPUs and
    no CUDA_VISIBLE_DEVICES (CUDA's default order, fastest first, is not nvidia-smi's)."""
    if cuda_visible_devices is None:
        return gpus[0] if len(gpus) == 1 else None
    first = cuda_visible_devices.split(",")[0].strip()
    for gpu in gpus:
        if first == str(gpu["index"]) or (first.startswith("GPU-") and gpu["uuid"].startswith(first)):
            return gpu
    return None


def _write_record(work_dir: str | os.PathLike, record: dict) -> Path:
    folder = Path(work_dir) / RECORDS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    # one file per job: safe for jobs on several nodes writing to one shared folder
    name = f"{record['started_unix_ns']}-{record['host']}-{record['pid']}.json"
    write_json_atomic(folder / name, record)  # never a half-written record under the real name
    return folder / name


def _read_turns(prefix: Path) -> list[dict]:
    """The turns the job's runs wrote (workloads.gpu_turn, one file per process), in order, as the
    record's ``gpu_turns``; [] when every run ended before its turn. A turn without an end (its
    process was killed, or crashed, before it could write one) ended when the operating system let
    go of its lock: at the latest when the job's next turn started, else when the job ended; its
    ``end_unknown`` says that this end is a bound (an allocator setting that crashed under nsys
    counted 70 s held instead of a few when every such turn ran to the job's end)."""
    turns = []
    for path in prefix.parent.glob(f"{prefix.name}-*.json"):
        try:
            with open(path) as f:
                turns.append(json.load(f))
        finally:
            path.unlink(missing_ok=True)
    turns.sort(key=lambda t: t["started_unix_ns"])
    job_end = time.time_ns()
    out = []
    for i, turn in enumerate(turns):
        entry = {"started_unix_ns": turn["started_unix_ns"], "waited_s": turn["waited_s"]}
        if "ended_unix_ns" in turn:
            entry["ended_unix_ns"] = turn["ended_unix_ns"]
            if turn.get("released_before_exit"):
                # the run gave the GPU back once its memory was free; its check ran after
                entry["released_before_exit"] = True
        else:
            entry["ended_unix_ns"] = turns[i + 1]["started_unix_ns"] if i + 1 < len(turns) else job_end
            entry["end_unknown"] = True
        if turn.get("cpu_cores"):
            entry["cpu_cores"] = turn["cpu_cores"]
        if turn.get("setup_cpu_cores"):
            # a step's run set up on every core and measured on cpu_cores (gpu_turn.take_turn)
            entry["setup_cpu_cores"] = turn["setup_cpu_cores"]
        if turn.get("handed_by_parent"):
            # a start-up: its parent took the turn before launching it (gpu_turn.turn_for_child)
            entry["handed_by_parent"] = True
        out.append(entry)
    return out


@contextlib.contextmanager
def gpu_job(work_dir: str | os.PathLike, n_gpus: int, env: MutableMapping[str, str], tag: str,
            argv: Sequence[str], turns: bool = False) -> Iterator[dict]:
    """Choose the job's GPU (setting ``env``), and write its record when the block ends. The
    caller sets ``record["returncode"]``; a block left by an exception is recorded with
    returncode None. ``turns``: on one GPU, the run inside takes the GPU's lock itself for its GPU
    part (:mod:`workloads.gpu_turn`) instead of this job holding it throughout."""
    if n_gpus < 1:
        raise ValueError(f"gpus must be at least 1, got {n_gpus}")
    gpus = physical_gpus()
    # a turn is only ever taken inside a job that does not hold the lock itself (else it would wait
    # for its own wrapper)
    env.pop(gpu_turn.LOCK_VARIABLE, None)
    env.pop(gpu_turn.RECORD_VARIABLE, None)
    holder_cores = None
    with contextlib.ExitStack() as stack:
        if env.get("CUDA_VISIBLE_DEVICES") is not None:
            assigned_by = "scheduler"
        elif n_gpus > 1:
            assigned_by = "lock"
            check_gpu_count(n_gpus, gpus, platform.node())
            env["CUDA_VISIBLE_DEVICES"] = str(stack.enter_context(gpu_slot(work_dir, n_gpus)))
        elif turns:
            assigned_by = "turns"
            locks = lock_folder(work_dir)
            turn_records = locks / f"turn-{os.getpid()}-{time.time_ns()}"
            env[gpu_turn.LOCK_VARIABLE] = str(locks / "gpu0.lock")
            env[gpu_turn.RECORD_VARIABLE] = str(turn_records)
        else:
            assigned_by = "default"
            # one GPU: jobs still take turns on it, even if more were let through at once
            # (--resources gpu=2 without --config gpus=2)
            stack.enter_context(gpu_slot(work_dir, 1))
            # the job holds the GPU throughout: its processes run on the holder's cores, away from
            # the other jobs' host work (workloads.gpu_turn.split_cores)
            holder_cores = gpu_turn.use_holder_cores(env)
        if env.get("CUDA_VISIBLE_DEVICES") is not None:
            # so that index i is nvidia-smi's (and SLURM's) GPU i, not the i-th fastest
            env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        visible = env.get("CUDA_VISIBLE_DEVICES")
        record = {
            "record_version": RECORD_VERSION,
            "tag": tag,
            "argv": list(argv),
            "host": platform.node(),
            "pid": os.getpid(),
            "slurm_job_id": env.get("SLURM_JOB_ID"),
            "gpus_configured": n_gpus,
            "assigned_by": assigned_by,
            "cuda_visible_devices": visible,
            "gpu": visible_gpu(visible, gpus),
            "host_gpu_count": len(gpus),
            "git_commit": git_commit(),
            "started_unix_ns": time.time_ns(),
            "returncode": None,
            "killed_by": None,  # the signal the wrapper passed on to the job (workloads/tools/cold.py)
        }
        if holder_cores:
            record["cpu_cores"] = holder_cores
        where = f"GPU {visible}" if visible is not None else "the default GPU"
        print(f"{tag}: on {where} ({assigned_by})"
              + (f", {record['gpu']['uuid']}" if record["gpu"] else ""), file=sys.stderr, flush=True)
        try:
            yield record
        finally:
            record["ended_unix_ns"] = time.time_ns()
            if assigned_by == "turns":
                record["gpu_turns"] = _read_turns(turn_records)
            _write_record(work_dir, record)
