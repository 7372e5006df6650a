"""Check, before any profiling, that a GPU, nsys and ncu are there; record their versions.

    python -m workloads.harness.preflight --nsys nsys --ncu ncu --output results/preflight.json

Exits 2 with one message naming everything that is missing and how to point
the suite at it. Writes its JSON only when everything is present, so a failed
preflight leaves nothing behind that looks valid.

It also learns whether Nsight Compute may read the GPU's performance counters (one empty kernel
under ncu, workloads.tools.counter_probe) and records it under ``counters``: where they are
refused (ERR_NVGPUCTRPERM) or ncu is switched off (``--ncu none``), the pipeline runs without
counters (no ncu rule; the reports use analysis.model.no_counters) and says so once, with the fix.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import os
import shutil
import subprocess
import sys
from typing import Sequence

from workloads import settings

from workloads.harness import gpu_turn, provenance
from workloads.registry import RECIPES
from workloads.harness.runner import write_json_atomic
from workloads.tools import gpu_jobs

#: the targets the user asked Snakemake for, space-separated (set by the pipeline's onstart)
TARGETS_VARIABLE = "COOKBOOK_REQUESTED_TARGETS"


def tool_version(exe: str) -> str | None:
    """First line of ``exe --version`` that names a version, or None if it does not run."""
    if shutil.which(exe) is None:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "version" in ln.lower():
            return ln
    return lines[-1] if lines else None


#: ncu's error code when the driver restricts the counters to administrators
COUNTERS_REFUSED = "ERR_NVGPUCTRPERM"
#: ``--ncu`` value that switches Nsight Compute off (``snakemake --config ncu=none``)
NCU_OFF = "none"
COUNTERS_FIX = (
    "let every user read them (driver option `options nvidia NVreg_RestrictProfilingToAdminUsers=0` in "
    "/etc/modprobe.d, then reload the driver or reboot; in a container the host must allow it), or run the "
    "pipeline as an administrator (root, or CAP_SYS_ADMIN; CAP_PERFMON from driver R565)"
)
NO_COUNTERS_PLAN = (
    "this run goes on without counters: every step is timed and traced under nsys; no step runs under ncu; the "
    "reports give kernel durations, launch configurations, registers and shared memory per kernel (from the nsys "
    "trace), theoretical occupancy and effective rates (derived), each labelled, and list what needs counters"
)


def counter_access(ncu: str, python: str = sys.executable, timeout_s: float = 300) -> dict:
    """Whether ``ncu`` may read performance counters here: one empty kernel launched under it.
    ``readable`` None: the probe failed for another reason (``detail`` has ncu's last lines)."""
    if ncu == NCU_OFF:
        return {"readable": False, "reason": "Nsight Compute switched off (--config ncu=none)"}
    # clocks left as found, as in every ncu run of the suite: ncu's default locks them to base for the
    # profiled kernel, and the suite never changes the GPU's clocks
    cmd = [ncu, "--clock-control", "none", "--metrics", "sm__cycles_elapsed.sum", python, "-m",
           "workloads.tools.counter_probe"]
    # the probe's kernel runs on CUDA's device 0, in PCI bus order: that GPU's lock is held around
    # it, so that it never runs beside another work folder's or user's measurement on the host
    env = {**os.environ, "CUDA_DEVICE_ORDER": os.environ.get("CUDA_DEVICE_ORDER", "PCI_BUS_ID")}
    key = gpu_jobs.first_gpu_key(env, gpu_jobs.physical_gpus())
    try:
        with gpu_jobs.hold_gpus([key] if key else []):
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except (gpu_jobs.LockFolderError, gpu_turn.LockFileError) as e:
        return {"readable": None, "reason": f"the GPU's lock for the counter probe: {e}"}
    except (OSError, subprocess.SubprocessError) as e:
        return {"readable": None, "reason": f"`{' '.join(cmd)}` did not run ({e})"}
    text = out.stdout + out.stderr
    refused = [ln.strip() for ln in text.splitlines() if COUNTERS_REFUSED in ln]
    if refused:
        return {"readable": False, "reason": f"counters refused by the driver ({COUNTERS_REFUSED})",
                "exit_status": out.returncode, "message": refused[0]}
    # ncu names each kernel it profiles ("==PROF== Profiling ..."): without that line nothing was measured
    if out.returncode == 0 and "==ERROR==" not in text and "==PROF== Profiling" in text:
        return {"readable": True}
    tail = " | ".join(ln.strip() for ln in text.splitlines()[-5:] if ln.strip())
    return {"readable": None, "reason": f"the counter probe under ncu failed (exit status {out.returncode})",
            "detail": tail}


def recipe_availability() -> dict:
    """Per recipe: None when it can run here, else the reason it will be skipped."""
    reasons = {}
    for r in RECIPES:
        missing = [m for m in r.requires if importlib.util.find_spec(m) is None]
        reasons[r.name] = f"not importable here: {', '.join(missing)}" if missing else None
    return reasons


def _no_gpu_hint(targets: Sequence[str]) -> str:
    """What can be done without a GPU instead of the targets asked for."""
    if any(t == "kernel_page" or t.startswith("reports/kernels/") for t in targets):
        return "`snakemake rebuild_kernel_pages` rebuilds the committed kernel pages from their captures"
    return "`snakemake rebuild_reports` rebuilds the reports from the committed captures"


def check(nsys: str, ncu: str, targets: Sequence[str] = ()) -> tuple[dict, list[str]]:
    """The record to write, and the problems that stop ``targets`` (what the user asked Snakemake
    for; unknown when empty) from running here."""
    problems = []
    # the slow parts (two profilers starting, a kernel under ncu, nvidia-smi) run side by side: every
    # GPU job of the pipeline waits for this one; the counter probe's answer counts only when nothing
    # else is missing
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        probe = pool.submit(counter_access, ncu) if ncu != NCU_OFF else None
        tool_versions = {key: pool.submit(tool_version, exe) for key, exe in (("nsys", nsys), ("ncu", ncu))
                         if not (key == "ncu" and exe == NCU_OFF)}
        collected = pool.submit(provenance.collect)
        gpu = provenance.gpu_info()
        if not gpu["gpus"]:
            problems.append(
                f"no NVIDIA GPU: `nvidia-smi` is missing or lists no GPU. Run {' '.join(targets) or 'it'} on a machine "
                "with an NVIDIA GPU and driver (on a cluster: inside a GPU job; see profiles/slurm). Without a GPU, "
                f"{_no_gpu_hint(targets)}."
            )
        versions = {}
        for key, exe, var in (("nsys", nsys, "NSYS"), ("ncu", ncu, "NCU")):
            if key == "ncu" and exe == NCU_OFF:
                versions[key] = {"executable": None, "version": "switched off (--config ncu=none)"}
                continue
            v = tool_versions[key].result()
            versions[key] = {"executable": shutil.which(exe) or exe, "version": v}
            if v is None:
                problems.append(
                    f"{key}: `{exe} --version` did not run. Install Nsight "
                    f"{'Systems' if key == 'nsys' else 'Compute'}, or point the suite at it with "
                    f"`snakemake --config {key}=/path/to/{key}` or the environment variable {var}."
                )
        record = {"tools": versions, "recipes_skipped": recipe_availability(), "provenance": collected.result()}
        if not problems:
            record["counters"] = probe.result() if probe is not None else counter_access(ncu)
            if record["counters"]["readable"] is None:
                problems.append(f"ncu: {record['counters']['reason']}: {record['counters'].get('detail', '')}. "
                                "Fix ncu, or run without counters with `snakemake --config ncu=none`.")
    return record, problems


def counters_note(counters: dict) -> str | None:
    """The one message a run without counters prints: why, the fix, and what the run does instead."""
    if counters.get("readable"):
        return None
    if counters.get("message"):
        return (f"preflight: Nsight Compute may not read the GPU's performance counters: {counters['message']} "
                f"(ncu exit status {counters.get('exit_status')}). Fix: {COUNTERS_FIX}. Meanwhile {NO_COUNTERS_PLAN}.")
    return f"preflight: {counters['reason']}: {NO_COUNTERS_PLAN}."


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workloads.harness.preflight", description=__doc__.split("\n")[0])
    p.add_argument("--nsys", required=True, help="Nsight Systems executable to check (a path or a name on PATH)")
    p.add_argument("--ncu", required=True, help="Nsight Compute executable to check (a path or a name on PATH)")
    p.add_argument("--output", required=True, help="JSON record to write when everything is present")
    p.add_argument("--target", action="append", default=[], metavar="NAME",
                   help=f"what the user asked Snakemake for (repeatable), named in the message; default: the "
                        f"targets in {TARGETS_VARIABLE} (the pipeline sets it)")
    args = p.parse_args(argv)
    targets = args.target or settings.text(TARGETS_VARIABLE).split()
    record, problems = check(args.nsys, args.ncu, targets)
    if problems:
        what = " and ".join(targets) or "GPU profiling"
        print(f"preflight: {what} cannot run here:", file=sys.stderr)
        for prob in problems:
            print(f"  - {prob}", file=sys.stderr)
        return 2
    write_json_atomic(args.output, record)
    note = counters_note(record["counters"])
    if note:
        print(note, file=sys.stderr)
    gpu = record["provenance"]["gpus"][0]["name"]
    print(f"preflight: {gpu}; nsys {record['tools']['nsys']['version']}; ncu {record['tools']['ncu']['version']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
