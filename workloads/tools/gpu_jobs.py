"""Which GPU a profiling job runs on, one measurement per physical GPU of a host at a time, and a
record of the job when it ends.

Every GPU job of the pipeline (timed run, nsys, ncu, cold/warm start, experiment, kernel page)
goes through :func:`gpu_job`. Each GPU has one lock file per host, named by its UUID (nvidia-smi;
without nvidia-smi, its index in PCI bus order), in one folder for the whole host
(``COOKBOOK_GPU_LOCK_DIR``, default ``/tmp/gpu-cookbook-locks``, :func:`lock_folder`): every work
folder, clone and user of the host locks the same file for the same GPU, however the GPU is named.
The job picks its GPU:

- ``scheduler``: ``CUDA_VISIBLE_DEVICES`` was set before the job started and a scheduler's own
  variables say it allocated the GPUs (SLURM: ``SLURM_JOB_ID`` with ``SLURM_STEP_GPUS`` or
  ``SLURM_JOB_GPUS``): it is kept, and the GPUs it names are locked (one allocation may serve
  several jobs of a pipeline).
- ``user``: ``CUDA_VISIBLE_DEVICES`` set by hand: kept, and its GPUs locked the same way, so that
  jobs let through at once (the default profile's ``gpu=4``) never share one.
- ``lock``: more than one GPU on this machine (config ``gpus``) and nobody chose: the job takes
  the first free one (an exclusive ``flock`` of its lock file). Snakemake's ``gpu`` resource caps
  how many jobs run at once; the locks decide which GPU each one gets.
- ``default``: one GPU (config ``gpus: 1``): CUDA's device 0, one job at a time (its lock),
  whatever Snakemake's ``--resources gpu=K`` lets through.
- ``turns``: one GPU, and the job is one of a step's measurement runs or an experiment whose
  processes take turns (``turns=True``): the job does not hold the GPU's lock; each run inside takes
  it for its GPU part (:mod:`workloads.harness.gpu_turn`), so that K jobs let through at once start and
  finish beside each other and take turns on the GPU. Its record lists the turns (``gpu_turns``),
  one per run. A job given one GPU by a scheduler or a user takes turns the same way.

The lock is let go only once every process of the job has exited: ``workloads/harness/cold.py``
runs the command from a keeper process that holds a copy of the lock and survives the wrapper.

When the job ends (also when it fails, or when its wrapper was killed), one JSON file per job is
written to ``<work-dir>/gpu-jobs/``: when it started and ended (Unix ns), the command, how the GPU
was chosen, the GPU's UUID, PCI bus id and driver from ``nvidia-smi`` (the physical GPU, not an
index that depends on ordering), the host, the SLURM job id and the suite's commit. ``python -m
analysis gpu-jobs`` turns the folder into ``reports/gpu_jobs.md``: which job ran on which GPU and
when, and whether two ever shared one.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import re
import stat
import sys
import time
from pathlib import Path
from typing import Iterator, Mapping, MutableMapping, Sequence

from analysis.common.outputs import write_json_atomic
from workloads import settings
from workloads.harness import gpu_turn
from workloads.harness.provenance import git_commit, tool_output

#: the format of a job record; analysis/model/gpu_jobs.py refuses others
RECORD_VERSION = 1
RECORDS_FOLDER = "gpu-jobs"
#: where a job's runs write their turns until the job's record collects them (under the work folder)
TURNS_FOLDER = "gpu-turns"
#: the host-wide folder of the GPUs' lock files (workloads/settings.py)
LOCK_DIR_VARIABLE = "COOKBOOK_GPU_LOCK_DIR"
#: a scheduler's own variables, set where it allocated the job's GPUs: CUDA_VISIBLE_DEVICES is then
#: its choice, not a user's (SLURM sets SLURM_JOB_ID and, with --gres/--gpus, the GPUs it assigned)
SCHEDULER_GPU_VARIABLES = (("SLURM_JOB_ID", ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS")),)


class LockFolderError(RuntimeError):
    """The host's GPU lock folder is not a folder this suite can trust: a symlink, not a folder, or
    writable by other users without the sticky bit (they could replace a lock file)."""


#: the folder's mode when this suite creates it: every user of the host locks the same GPUs, and the
#: sticky bit keeps each user's lock files from being removed or replaced by another
LOCK_FOLDER_MODE = 0o1777


def lock_folder(environ: Mapping[str, str] = os.environ) -> Path:
    """The host-wide folder of the GPUs' lock files (``COOKBOOK_GPU_LOCK_DIR``): one for every work
    folder and every user of the host, so that two clones of the suite, or two users, never measure
    on one GPU at once. Created sticky and world-writable (like ``/tmp``); an existing one is
    refused if it is a symlink, not a folder, or writable by others without the sticky bit."""
    folder = Path(settings.text(LOCK_DIR_VARIABLE, environ))
    if not folder.is_absolute():
        raise LockFolderError(f"{LOCK_DIR_VARIABLE}={folder}: the GPU lock folder must be an absolute path "
                              "(one folder for the whole host, whatever the working folder)")
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(folder, LOCK_FOLDER_MODE)
        os.chmod(folder, LOCK_FOLDER_MODE)  # mkdir's mode is cut by the umask
    except FileExistsError:
        pass
    except OSError as e:
        raise LockFolderError(f"{folder}: cannot create the GPU lock folder ({e.strerror}); set {LOCK_DIR_VARIABLE} "
                              "to a folder every run on this host can use") from None
    info = os.lstat(folder)
    if stat.S_ISLNK(info.st_mode):
        raise LockFolderError(f"{folder}: the GPU lock folder is a symlink (to {os.readlink(folder)}); it must be a "
                              "real folder")
    if not stat.S_ISDIR(info.st_mode):
        raise LockFolderError(f"{folder}: the GPU lock folder exists and is not a folder")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
        raise LockFolderError(f"{folder}: others may write to the GPU lock folder without the sticky bit (mode "
                              f"{stat.S_IMODE(info.st_mode):o}): they could remove or replace its lock files; "
                              f"`chmod +t` it or set {LOCK_DIR_VARIABLE} to another folder")
    return folder


#: what a lock file's name may hold (a GPU or MIG UUID, or an index)
_LOCK_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def lock_key(gpu: dict | None, named: str) -> str:
    """The lock's name for one GPU: its UUID where nvidia-smi listed it (the physical GPU, whatever
    index or UUID prefix named it), else what named it, an index in PCI bus order
    (``index-<i>``) or a UUID as given."""
    if gpu is not None and _LOCK_KEY.fullmatch(gpu["uuid"]):
        return gpu["uuid"]
    named = named.strip()
    key = f"index-{named}" if named.isdigit() else named
    if not _LOCK_KEY.fullmatch(key):
        raise LockFolderError(f"CUDA_VISIBLE_DEVICES names {named!r}: not a GPU index or UUID to lock")
    return key


def lock_path(key: str, environ: Mapping[str, str] = os.environ) -> Path:
    """The lock file of the GPU ``key`` (:func:`lock_key`) in the host's lock folder."""
    return lock_folder(environ) / f"{key}.lock"


@contextlib.contextmanager
def hold_gpus(keys: Sequence[str], environ: Mapping[str, str] = os.environ) -> Iterator[list[Path]]:
    """Hold the locks of the GPUs ``keys`` for the duration, waiting for each (in sorted order, so
    that two jobs naming the same GPUs in another order never wait for each other)."""
    with contextlib.ExitStack() as stack:
        paths = []
        for key in sorted(set(keys)):
            path = lock_path(key, environ)
            f = stack.enter_context(gpu_turn.open_lock_file(path))
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(f"waiting for GPU {key}: another job holds it ({path})", file=sys.stderr, flush=True)
                fcntl.flock(f, fcntl.LOCK_EX)
            paths.append(path)
        yield paths


@contextlib.contextmanager
def gpu_slot(n_gpus: int, gpus: list[dict], environ: Mapping[str, str] = os.environ,
             poll_s: float = 0.5) -> Iterator[tuple[int, Path]]:
    """Hold one of the first ``n_gpus`` GPUs of this host for the duration: (its index in PCI bus
    order, its lock file), the first whose lock (keyed by UUID, :func:`lock_key`) is free."""
    said = False
    while True:
        for i in range(n_gpus):
            path = lock_path(lock_key(gpus[i] if i < len(gpus) else None, str(i)), environ)
            f = gpu_turn.open_lock_file(path)
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                continue
            try:
                yield i, path
            finally:
                # closed, not unlocked: a keeper process that still holds a copy keeps the GPU
                f.close()
            return
        if not said:  # every GPU busy: more jobs than GPUs were let through
            print(f"waiting for a GPU: all {n_gpus} are held by other jobs ({lock_folder(environ)})", file=sys.stderr,
                  flush=True)
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


def _read_turns(prefix: Path, job_end_unix_ns: int | None = None) -> list[dict]:
    """The turns the job's runs wrote (workloads.harness.gpu_turn, one file per process), in order, as the
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
    job_end = time.time_ns() if job_end_unix_ns is None else job_end_unix_ns
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


def scheduler_allocated(env: Mapping[str, str]) -> bool:
    """Whether a scheduler allocated this job's GPUs (:data:`SCHEDULER_GPU_VARIABLES`): its own
    variables are set, not only ``CUDA_VISIBLE_DEVICES``, which a user may set by hand."""
    return any(env.get(job) and any(env.get(g) for g in gpu_variables)
               for job, gpu_variables in SCHEDULER_GPU_VARIABLES)


def named_gpus(cuda_visible_devices: str, gpus: list[dict]) -> list[str]:
    """The lock keys (:func:`lock_key`) of every GPU ``cuda_visible_devices`` names: each index (PCI
    bus order, as the job's ``CUDA_DEVICE_ORDER``) or UUID prefix, resolved to the UUID nvidia-smi
    lists where it can be; an empty value names none."""
    keys = []
    for named in filter(None, (x.strip() for x in cuda_visible_devices.split(","))):
        if named.lstrip("-").isdigit() and int(named) < 0:
            break  # CUDA stops at an invalid index: what follows is invisible
        keys.append(lock_key(visible_gpu(named, gpus) if gpus else None, named))
    return keys


def first_gpu_key(env: Mapping[str, str], gpus: list[dict]) -> str | None:
    """The lock key of CUDA's device 0 for a process started with ``env`` in PCI bus order (what a
    one-kernel probe uses): the first GPU ``CUDA_VISIBLE_DEVICES`` names, else nvidia-smi's GPU 0;
    None where ``CUDA_VISIBLE_DEVICES`` hides every GPU."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return lock_key(gpus[0] if gpus else None, "0")
    keys = named_gpus(visible, gpus)
    return keys[0] if keys else None


class JobRecord(dict):
    """A GPU job's record, and :meth:`write`, which writes it once: at the job's end, or from the
    keeper process of a wrapper that was killed (``workloads/harness/cold.py``)."""

    def __init__(self, work_dir: str | os.PathLike, fields: dict, turn_records: Path | None = None) -> None:
        super().__init__(fields)
        self._work_dir, self._turn_records, self._written = work_dir, turn_records, False

    def write(self) -> Path | None:
        if self._written:
            return None
        self._written = True
        self["ended_unix_ns"] = time.time_ns()
        if self._turn_records is not None:
            self["gpu_turns"] = _read_turns(self._turn_records, self["ended_unix_ns"])
        return _write_record(self._work_dir, dict(self))


@contextlib.contextmanager
def gpu_job(work_dir: str | os.PathLike, n_gpus: int, env: MutableMapping[str, str], tag: str,
            argv: Sequence[str], turns: bool = False) -> Iterator[JobRecord]:
    """Choose the job's GPU (setting ``env``), hold its host-wide lock (:func:`lock_folder`), and write
    its record when the block ends. The caller sets ``record["returncode"]``; a block left by an
    exception is recorded with returncode None. ``turns``: on one GPU, the run inside takes the GPU's
    lock itself for its GPU part (:mod:`workloads.harness.gpu_turn`) instead of this job holding it throughout.

    ``CUDA_VISIBLE_DEVICES`` set before the job is kept, whoever set it (``assigned_by``: ``scheduler``
    where a scheduler's own variables say it allocated the GPUs, else ``user``), and the GPUs it names
    are locked all the same: a scheduler's allocation may be shared by the jobs of one pipeline, and a
    user's setting by anything."""
    if n_gpus < 1:
        raise ValueError(f"gpus must be at least 1, got {n_gpus}")
    gpus = physical_gpus()
    # a turn is only ever taken inside a job that does not hold the lock itself (else it would wait
    # for its own wrapper)
    env.pop(gpu_turn.LOCK_VARIABLE, None)
    env.pop(gpu_turn.RECORD_VARIABLE, None)
    holder_cores = None
    turn_records = None
    with contextlib.ExitStack() as stack:
        if env.get("CUDA_VISIBLE_DEVICES") is not None:
            assigned_by = "scheduler" if scheduler_allocated(env) else "user"
            # so that index i is nvidia-smi's (and SLURM's) GPU i, not the i-th fastest
            env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
            keys = named_gpus(env["CUDA_VISIBLE_DEVICES"], gpus)
        elif n_gpus > 1:
            assigned_by = "lock"
            check_gpu_count(n_gpus, gpus, platform.node())
            index, _ = stack.enter_context(gpu_slot(n_gpus, gpus, env))
            env["CUDA_VISIBLE_DEVICES"] = str(index)
            env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
            keys = None  # held by the slot
        else:
            assigned_by = "default"
            if len(gpus) > 1:
                # CUDA's device 0 is then nvidia-smi's GPU 0, the one locked, not the fastest
                env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
            keys = [lock_key(gpus[0] if gpus else None, "0")]
        if keys is not None and turns and len(keys) == 1:
            # the runs inside take the GPU's lock in turns; the job holds none
            assigned_by = "turns" if assigned_by == "default" else assigned_by
            turn_records = Path(work_dir).resolve() / TURNS_FOLDER / f"turn-{os.getpid()}-{time.time_ns()}"
            turn_records.parent.mkdir(parents=True, exist_ok=True)
            env[gpu_turn.LOCK_VARIABLE] = str(lock_path(keys[0], env))
            env[gpu_turn.RECORD_VARIABLE] = str(turn_records)
        elif keys is not None:
            # one GPU, or the GPUs a scheduler or user named: the job holds them throughout, even if
            # more jobs were let through at once (--resources gpu=2 without --config gpus=2)
            stack.enter_context(hold_gpus(keys, env))
            # its processes run on the holder's cores, away from the other jobs' host work
            # (workloads.harness.gpu_turn.split_cores)
            holder_cores = gpu_turn.use_holder_cores(env)
        visible = env.get("CUDA_VISIBLE_DEVICES")
        # CUDA's device 0 is nvidia-smi's GPU 0 only in PCI bus order
        pci_order = env.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID"
        record = JobRecord(work_dir, {
            "record_version": RECORD_VERSION,
            "tag": tag,
            "argv": list(argv),
            "host": platform.node(),
            "pid": os.getpid(),
            "slurm_job_id": env.get("SLURM_JOB_ID"),
            "gpus_configured": n_gpus,
            "assigned_by": assigned_by,
            "cuda_visible_devices": visible,
            "gpu": visible_gpu(visible, gpus) if visible is not None or not pci_order else gpus[0] if gpus else None,
            "host_gpu_count": len(gpus),
            "git_commit": git_commit(),
            "started_unix_ns": time.time_ns(),
            "returncode": None,
            "killed_by": None,  # the signal the wrapper passed on to the job (workloads/harness/cold.py)
        }, turn_records)
        if holder_cores:
            record["cpu_cores"] = holder_cores
        where = f"GPU {visible}" if visible is not None else "the default GPU"
        print(f"{tag}: on {where} ({assigned_by})"
              + (f", {record['gpu']['uuid']}" if record["gpu"] else ""), file=sys.stderr, flush=True)
        try:
            yield record
        finally:
            record.write()
