"""Every ``COOKBOOK_*`` environment variable the suite reads, in one place.

The pipeline and the tools pass settings to the processes they start through these variables (a
profiled workload runs under nsys or ncu, where command-line options would have to pass through the
profiler's). Code reads them only through :func:`text` and :func:`flag`, so that each one is
declared here with its default and meaning; ``tests/test_settings.py`` fails when code reads a
``COOKBOOK_*`` variable that is not declared. :func:`markdown_table` writes the README's table.

Nothing here imports more than the standard library: the analysis and Snakemake read it too.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Mapping

from workloads.errors import WorkloadError

FLAG_TRUE = ("1", "true", "on", "yes")
FLAG_FALSE = ("0", "false", "off", "no")


class SettingError(WorkloadError, ValueError):
    """A ``COOKBOOK_*`` variable holds a value its setting does not accept, or is not declared."""


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    #: the value when unset or empty ("" = none)
    default: str
    #: what it does, one or two sentences (the README's table)
    meaning: str
    #: who sets it in a normal run: "user", "pipeline" (rules set it for the processes they start),
    #: "tools" (a suite tool sets it for its child), "tests"
    set_by: str
    #: "flag" (1/0), "text"
    kind: str = "text"


SETTINGS: Mapping[str, Setting] = {s.name: s for s in (
    Setting("COOKBOOK_NVTX", "1", "`0` turns the suite's NVTX ranges off (workloads/annotate.py); the "
            "overhead experiment runs each recipe both ways.", "user", "flag"),
    Setting("COOKBOOK_NVTX_FUNCTIONS", "", "Comma-separated dotted paths of third-party functions the "
            "workload wraps in NVTX ranges without editing them (`cupy.mean`).", "pipeline"),
    Setting("COOKBOOK_CAPTURE_RANGE", "", "`1` (exactly): recipes that declare a capture range run their "
            "compute calls inside cuProfilerStart/Stop (nsys `--capture-range=cudaProfilerApi`).", "pipeline"),
    Setting("COOKBOOK_CUDA_DRIVER_LIBRARY", "libcuda.so.1", "The CUDA driver library the capture range "
            "loads.", "user"),
    Setting("COOKBOOK_LINEINFO", "0", "`1`: kernels compiled with line information (Warp, Numba, PyCUDA, "
            "CuPy raw kernels), for Nsight Compute's source view.", "tools", "flag"),
    Setting("COOKBOOK_WARP_DEVICE", "", "The Warp device (`cuda:0`, `cpu`); empty: `cuda:0` when CUDA is "
            "available, else `cpu`. `--device cpu` sets `cpu`.", "user"),
    Setting("COOKBOOK_WARP_LINE_DIRECTIVES", "1", "`0`: Warp's SASS relates to the generated CUDA-C "
            "instead of the Python lines.", "tools", "flag"),
    Setting("COOKBOOK_WARP_KERNEL_CACHE", "", "Warp's kernel cache folder (Warp adds a version folder "
            "below it); empty: Warp's own `WARP_CACHE_PATH` or the user's cache.", "tools"),
    Setting("COOKBOOK_WARP_COMPILE_TIME_TRACE", "0", "`1`: NVRTC writes a compile-time trace beside each "
            "Warp module it compiles (CUDA 12.8+).", "tools", "flag"),
    Setting("COOKBOOK_WARP_CPU_CAPTURE", "1", "`0`: graph variants on Warp's CPU device issue plain "
            "launches instead of Warp's CPU capture.", "user", "flag"),
    Setting("COOKBOOK_DATAFRAME", "cudf", "The data-frame library of the cuDF recipe: `cudf` or `pandas` "
            "(`--device cpu` sets `pandas`).", "user"),
    Setting("COOKBOOK_LAUNCH_UNIX_NS", "", "When the parent started the process (ns since the epoch), "
            "for the time to first result.", "tools"),
    Setting("COOKBOOK_GPU_LOCK_DIR", "/tmp/gpu-cookbook-locks", "Host-wide folder of the GPUs' lock files, one per "
            "GPU UUID, shared by every work folder and user of the host (`workloads/tools/gpu_jobs.py`); created "
            "sticky and world-writable, like `/tmp`. Point it at a folder every container of the host mounts.", "user"),
    Setting("COOKBOOK_GPU_TURN_LOCK", "", "The lock file of the GPU a measurement run takes its turn on, "
            "from its setup until its memory is freed or its exit (`workloads/harness/gpu_turn.py`); set by `workloads.harness.cold --turns`.",
            "pipeline"),
    Setting("COOKBOOK_GPU_TURN_RECORD", "", "File the run writes its GPU turn's start and end to, for the "
            "GPU job record; set by `workloads.harness.cold --turns`.", "pipeline"),
    Setting("COOKBOOK_GPU_TURN_HANDED", "", "The GPU turn a cold/warm start's parent took before launching it "
            "(the inherited lock file and the turn's start); the start-up holds it from its launch "
            "(`workloads/harness/gpu_turn.py: turn_for_child`). Set by `workloads.tools.coldwarm`.", "pipeline"),
    Setting("COOKBOOK_GPU_HOLDER_CORES", "", "CPU cores (a Linux CPU list) a run uses while it holds the "
            "shared GPU; set by the pipeline on a machine with one GPU (`workloads/harness/gpu_turn.py: split_cores`).",
            "pipeline"),
    Setting("COOKBOOK_OTHER_CORES", "", "CPU cores of every process of the pipeline that does not hold the "
            "GPU; set with `COOKBOOK_GPU_HOLDER_CORES`.", "pipeline"),
    Setting("COOKBOOK_REQUESTED_TARGETS", "", "The Snakemake targets asked for, named in the preflight's "
            "message; set by the pipeline when it starts.", "pipeline"),
    Setting("COOKBOOK_GIT_COMMIT", "", "The suite's commit, for records written on a copy without `.git`.",
            "user"),
    Setting("COOKBOOK_SLURM_PARTITION", "gpu", "SLURM partition with the GPUs (profiles/slurm).", "user"),
    Setting("COOKBOOK_SLURM_ACCOUNT", "", "SLURM account to charge; empty: the plugin's choice "
            "(profiles/slurm).", "user"),
    Setting("COOKBOOK_SLURM_GPU_TYPE", "", "GPU type for `--gres=gpu:TYPE:1`; empty: any (profiles/slurm).",
            "user"),
    Setting("COOKBOOK_REQUIRE_SLURM", "0", "`1`: the SLURM tests fail instead of skipping when no test "
            "cluster is there (CI).", "tests", "flag"),
    Setting("COOKBOOK_RULE_DUMP", "", "File the SLURM test's Snakefile writes the rules' resources to.",
            "tests"),
    Setting("COOKBOOK_MODULE_LOG", "", "File the SLURM test's fake `module` command logs to.", "tests"),
    Setting("COOKBOOK_TEST_FORKS", "1", "`0`: the tests start each Snakemake, JAX and Numba run as a fresh `python` "
            "instead of forking it from a process that imported them (`tests/python_forks.py`).", "tests",
            "flag"),
)}


def setting(name: str) -> Setting:
    try:
        return SETTINGS[name]
    except KeyError:
        raise SettingError(f"{name} is not declared in workloads/settings.py") from None


def text(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The variable's value, stripped; its default when unset or empty."""
    s = setting(name)
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    return raw or s.default


def raw(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable's value as set (None when unset), for records of what a process was given."""
    setting(name)
    return (os.environ if environ is None else environ).get(name)


def flag(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """A 1/0 variable (also true/false, on/off, yes/no); another value raises :class:`SettingError`."""
    s = setting(name)
    if s.kind != "flag":
        raise SettingError(f"{name} is not a 1/0 setting")
    value = text(name, environ).lower()
    if value in FLAG_TRUE:
        return True
    if value in FLAG_FALSE:
        return False
    raw = (os.environ if environ is None else environ).get(name)
    raise SettingError(f"{name}={raw!r}: use 1 or 0")


def markdown_table() -> str:
    """The README's table of the variables, generated from :data:`SETTINGS`: those a user or the
    suite sets (the test suite's own are declared, not listed)."""
    rows = ["| variable | default | set by | what it does |", "|---|---|---|---|"]
    for s in (s for s in SETTINGS.values() if s.set_by != "tests"):
        default = f"`{s.default}`" if s.default else "(none)"
        rows.append(f"| `{s.name}` | {default} | {s.set_by} | {s.meaning} |")
    return "\n".join(rows) + "\n"
