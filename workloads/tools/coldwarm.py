"""Cold and warm starts: time to the first result of a new process, with empty and with filled caches.

    python -m workloads.tools.coldwarm --work-dir results --output X.json -- \\
        python -m workloads.cupy_sqdiff --variant fused --size 4096

The command (a workload in ``--mode first``) runs up to three times, each a new process, all with the
same private cache folders (see :mod:`workloads.harness.cold`):

1. ``cold``: every cache empty: CuPy/NVRTC, Numba, PyCUDA/nvcc, Warp, JAX's persistent
   compilation cache (which JAX keeps only when given a folder: here it gets one), and the CUDA
   driver's PTX-to-SASS compute cache (``CUDA_CACHE_PATH``);
2. ``warm``: the same folders, now filled by the cold run;
3. ``warm_driver_cache_off``: the library caches still filled, but ``CUDA_CACHE_DISABLE=1``, the
   other way the Warp guide names to make the driver recompile; it shows what the driver cache
   alone saves. It runs only where the cold run left that cache non-empty: the driver writes it
   only when it JIT-compiles PTX, so an empty one means the process loaded binaries alone
   (nvcc's, NVRTC's cubins, XLA's), and turning the cache off could change nothing. The record
   then says so instead (``skipped``), with the cache's size after the cold run either way.
   ``--driver-cache-measured-on STEP`` leaves it out too: the pipeline measures the driver cache's
   share once a recipe, on one step (the recipe's profile.yaml: ``coldwarm_driver_cache_variant``), since the
   PTX the driver JIT-compiles is mostly its framework's and libraries', alike across the steps.

Each record splits the time: interpreter start and suite import, setup (GPU library import,
context, inputs), and the first call (JIT compilation, module load, launch, run). The cache
folder is removed at the end, through :func:`workloads.harness.cold.safe_rmtree`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Callable, Sequence

from workloads.harness import gpu_turn
from workloads.harness.runner import write_json_atomic
from workloads.harness.cold import cache_root, fresh_cache_env, run_command, safe_rmtree
from workloads.tools.gpu_jobs import gpu_job

RUNS = (
    ("cold", {}),
    ("warm", {}),
    ("warm_driver_cache_off", {"CUDA_CACHE_DISABLE": "1"}),
)
#: the run that only means something where the driver JIT-compiled PTX in the cold run
DRIVER_CACHE_RUN = "warm_driver_cache_off"
DRIVER_CACHE_VARIABLE = "CUDA_CACHE_PATH"


class ColdWarmError(RuntimeError):
    """A run of the command failed or wrote no record."""


def phases(first_result: dict) -> dict:
    """Seconds per phase from the runner's wall-clock stamps."""
    launch = first_result["launch_unix_ns"]
    imported = first_result["imported_unix_ns"]
    setup = first_result["setup_done_unix_ns"]
    done = first_result["first_result_unix_ns"]
    return {
        "time_to_first_result_s": (done - launch) / 1e9,
        "interpreter_and_suite_import_s": (imported - launch) / 1e9,
        "setup_s": (setup - imported) / 1e9,
        "first_call_s": (done - setup) / 1e9,
    }


def run_recording(build_cmd: Callable[[str], Sequence[str]], env: dict, what: str,
                  error: type[Exception] = ColdWarmError, job: dict | None = None) -> dict:
    """Run ``build_cmd(record_path)`` as a new process stamped with its launch time
    (``COOKBOOK_LAUNCH_UNIX_NS``) and return the JSON record it wrote to ``record_path``. It runs
    as the cold wrapper runs its command (signals passed on, stderr tail on failure); a signal
    passed on is recorded in ``job`` (the GPU job record) when given.

    In a job whose processes take turns on a shared GPU (``COOKBOOK_GPU_TURN_LOCK`` in ``env``), the
    turn is taken here, before the launch, and handed to the process (:func:`workloads.harness.gpu_turn.turn_for_child`):
    its start-up, timed from the launch, runs holding the GPU on the holder's cores, as in a job that
    holds the GPU throughout; the GPU goes to other runs once the process gives it back after its
    measurement (or exits), and between two processes."""
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        cmd = list(build_cmd(out))
        with gpu_turn.turn_for_child(what, env) as handed:
            env = dict(env, COOKBOOK_LAUNCH_UNIX_NS=str(time.time_ns()))
            returncode = run_command(cmd, env, job if job is not None else {}, what, handed)
        if returncode != 0:
            raise error(f"{what} exited with {returncode}: {' '.join(cmd)}")
        with open(out) as f:
            text = f.read()
        if not text:
            raise error(f"{what} wrote no record: {' '.join(cmd)}")
        return json.loads(text)
    finally:
        os.unlink(out)


def run_once(cmd: Sequence[str], env: dict, label: str, job: dict | None = None, provenance: bool = True) -> dict:
    """One process's first result; ``provenance=False``: the record leaves it out (only the cold
    run's is kept)."""
    extra = [] if provenance else ["--no-provenance"]
    # the step's seeded sample of elements: the step's timed run checks every element, and where the
    # process cannot give its turn back early (it holds over a tenth of the GPU's memory, or the job
    # holds the GPU throughout) the check holds the GPU (a full check of Numba's 16 M elements took ~1 s)
    record = run_recording(lambda out: [*cmd, "--mode", "first", "--check", "sample", *extra, "--output", out], env,
                           f"{label} run", job=job)
    return {"phases": phases(record["first_result"]), "relative_error": record["relative_error"],
            "check": record["check"], "steady_call_ms": record["steady_call_ms"],
            "provenance": record["provenance"], "workload": record["workload"], "variant": record["variant"],
            "size": record["size"]}


def folder_size(path: str) -> dict:
    """{"files": n, "bytes": b} of every file below ``path`` (0 and 0 for a missing folder)."""
    files = size = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                size += os.path.getsize(os.path.join(folder, name))
            except OSError:
                continue  # removed meanwhile
            files += 1
    return {"files": files, "bytes": size}


#: why a run with the driver's compute cache off is not made (coldwarm, Warp's coldstart experiment)
NO_PTX_JIT = ("the CUDA driver's compute cache was empty after the cold run: the driver JIT-compiled no PTX, "
              "so turning it off could change nothing")


#: the table's short form of that reason (analysis.report.markdown.coldstart_section)
NO_PTX_JIT_SHORT = "no PTX JIT"


def driver_cache_skip(driver_cache: dict, measured_on: str | None) -> dict | None:
    """Why the driver-cache run is not made, as its record (``skipped``, the table's ``short`` form, and
    ``measured_on`` where another step of the recipe makes it); None when it is made: it is left to
    ``measured_on`` where given, and left out where the cold run's driver cache (``driver_cache``,
    :func:`folder_size`) is empty."""
    if measured_on:
        return {"skipped": f"the driver cache's share is measured once a recipe, on its `{measured_on}` step (the "
                           "PTX the driver JIT-compiles is mostly its framework's and libraries', alike across the "
                           "steps)",
                "short": f"measured on `{measured_on}`", "measured_on": measured_on}
    if not driver_compiled(driver_cache):
        return {"skipped": NO_PTX_JIT, "short": NO_PTX_JIT_SHORT}
    return None


def driver_compiled(cache: dict) -> bool:
    """Whether the driver's compute cache (:func:`folder_size` of ``CUDA_CACHE_PATH`` after a cold
    run) holds anything: the driver writes it only when it JIT-compiles PTX."""
    return cache["files"] > 0


def measure(cmd: Sequence[str], work_dir: str, gpus: int = 1, driver_cache_measured_on: str | None = None) -> dict:
    """The runs of :data:`RUNS` (the driver-cache one as the module says), their phases and the driver
    cache's size after the cold run; ``driver_cache_measured_on``: the step of the recipe that makes
    the driver-cache run instead of this one."""
    env, run_dir = fresh_cache_env(work_dir, "coldwarm", os.environ)
    driver_cache = None
    try:
        # the processes are one job; on a GPU the pipeline's runs share, each takes its turn from
        # before its launch to the end of its measurement (run_recording)
        with gpu_job(work_dir, gpus, env, "coldwarm", cmd, turns=True) as job:
            results = {}
            for label, extra in RUNS:
                skip = driver_cache_skip(driver_cache, driver_cache_measured_on) if label == DRIVER_CACHE_RUN else None
                if skip is not None:
                    results[label] = skip
                    print(f"coldwarm: {label}: skipped ({skip['short']})", file=sys.stderr, flush=True)
                    continue
                print(f"coldwarm: {label}: {' '.join(cmd)}", file=sys.stderr, flush=True)
                results[label] = run_once(cmd, dict(env, **extra), label, job, provenance=label == RUNS[0][0])
                if label == "cold":
                    driver_cache = folder_size(env[DRIVER_CACHE_VARIABLE])
            job["returncode"] = 0
    finally:
        safe_rmtree(run_dir, cache_root(work_dir))
    first = results["cold"]
    return {"workload": first["workload"], "variant": first["variant"], "size": first["size"],
            "provenance": first["provenance"], "driver_cache_after_cold": driver_cache,
            "runs": {k: v if "skipped" in v else
                     {"phases": v["phases"], "relative_error": v["relative_error"], "check": v["check"],
                      "steady_call_ms": v["steady_call_ms"]} for k, v in results.items()}}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workloads.tools.coldwarm", description=__doc__.split("\n")[0])
    p.add_argument("--work-dir", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--gpus", type=int, default=1, help="GPUs on this machine (see workloads.harness.cold)")
    p.add_argument("--driver-cache-measured-on", metavar="STEP", default=None,
                   help="leave the driver-cache run out: the recipe's step STEP makes it")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the workload command (without --mode)")
    a = p.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        p.error("no command given after --")
    try:
        record = measure(cmd, a.work_dir, a.gpus, a.driver_cache_measured_on)
    except ColdWarmError as e:
        print(f"coldwarm: {e}", file=sys.stderr)
        return 1
    for label, r in record["runs"].items():
        if "skipped" in r:
            print(f"coldwarm: {label:22s} skipped: {r['skipped']}")
            continue
        ph = r["phases"]
        print(f"coldwarm: {label:22s} first result after {ph['time_to_first_result_s']:.2f} s "
              f"(start {ph['interpreter_and_suite_import_s']:.2f}, setup {ph['setup_s']:.2f}, "
              f"first call {ph['first_call_s']:.2f})")
    write_json_atomic(a.output, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
