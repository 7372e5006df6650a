"""Experiment ``allocator``: GPU memory and time under each XLA allocator setting (the HPC-center guide's warning).

The seed warns that "XLA ... by default allocates around 90% of the available GPU memory", and
that with ``XLA_PYTHON_CLIENT_ALLOCATOR=platform`` "the allocator will request double its current
allocation each time it grows". JAX's documentation today says 75%. This measures what happens:
one process per setting, each under ``nsys profile --cuda-memory-usage true``, running the
``float32`` step (by default) at ``--size`` and timing its calls:

=========================  ======================================================================
setting                    environment
=========================  ======================================================================
default                    (none: XLA's BFC allocator takes 75% of the GPU's memory at start)
preallocate_false          XLA_PYTHON_CLIENT_PREALLOCATE=false (BFC allocator, grown on demand)
allocator_platform         XLA_PYTHON_CLIENT_ALLOCATOR=platform (cudaMalloc/cudaFree per buffer)
mem_fraction_0.25          XLA_PYTHON_CLIENT_MEM_FRACTION=0.25 (the seed-era name)
client_mem_fraction_0.25   XLA_CLIENT_MEM_FRACTION=0.25 (the name JAX's documentation uses now)
=========================  ======================================================================

Every process starts from an environment with none of these variables, whatever the caller had.
Outputs in ``--out-dir``: ``<setting>.sqlite`` (the nsys export: memory-usage events in
CUDA_GPU_MEMORY_USAGE_EVENTS, the calls as the suite's NVTX ranges) and ``allocator.json``: per
setting the environment, the calls' times (host timer with block_until_ready), JAX's
``memory_stats()`` of the device, the driver's used memory (cuMemGetInfo) after setup and after the
calls, the relative error of the step's sampled check (its seeded rows; its timed run checks every
element), and the nsys command. The analysis
(``analysis/report/sections/jax_matmul_allocator.py``) reads peak GPU memory from the exports.

    python -m workloads.jax_matmul.exp_allocator --out-dir DIR --nsys NSYS --ncu NCU --python PYTHON

In the pipeline each setting's process waits for its turn on the GPU before JAX touches it
(``Recipe.experiments_in_turns``, ``workloads/harness/gpu_turn.py``): what it measures (the calls' times, the
memory held) starts after the wait, and its start-up and nsys's report go on beside other runs.

The settings load the programs from the recipe's shared compile cache, which the step's timed run
fills first (``Recipe.experiments_from_cache``; the pipeline runs the experiment with ``--shared-cache``):
none of them compiles or autotunes, so each peak is what its allocator holds for the program's own
buffers (XLA autotuned float32 at 8192 for ~17 s per process on an H200, in buffers of its own). A
cache folder without the programs makes the first setting compile them and the others load them.

PREDICTION: default reserves 0.75 x 140 GiB = 105 GiB at start whatever the program needs (the
seed's "around 90%" is an older default); the fractions 0.25 x 140 = 35 GiB under either name;
preallocate_false grows its pool on demand, each new region twice the last (the doubling the seed
attributes to "platform"), to a few GiB; platform allocates and frees every buffer (cuMemAlloc per
buffer, per call) and holds only ~2 GiB, but pays for it in time per call. The kernels do not
change, so the other settings' time per call is the default's. (A development run on an H200:
104.9 / 4.1 / 1.9 / 35.0 / 35.0 GiB held; 15 allocations per call and +9% time for platform.)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Sequence

import numpy as np

from analysis.common.sqlite_files import missing_tables
from workloads import annotate, frameworks
from workloads.contract import WorkloadError, check_result
from workloads.harness import gpu_turn, provenance
from workloads.harness.runner import at_least, timed_step, write_json_atomic
from workloads.jax_matmul import RECIPE
from workloads.profiler_range import CudaDriver, ProfilerRangeError

RECIPE_NAME = "jax_matmul"
EXPERIMENT = "allocator"

#: (setting, environment it adds), in report order
SETTINGS: tuple[tuple[str, dict[str, str]], ...] = (
    ("default", {}),
    ("preallocate_false", {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}),
    ("allocator_platform", {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}),
    ("mem_fraction_0.25", {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.25"}),
    ("client_mem_fraction_0.25", {"XLA_CLIENT_MEM_FRACTION": "0.25"}),
)
SETTING_NAMES = tuple(name for name, _ in SETTINGS)
#: variables that change XLA's GPU allocator: removed from every child's environment first
ALLOCATOR_VARIABLES = ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_ALLOCATOR",
                       "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION", "TF_GPU_ALLOCATOR")

#: nsys 2025.3.1 has failed now and then to turn one of these captures into a report ("Cannot find
#: string for an exterior index", with XLA compiling through ptxas child processes meanwhile): one
#: more try, and the record keeps what the failed one said. A setting's process that crashes under
#: nsys is not tried again under it (allocator_platform: exit 139 in 7 of 7 attempts over four
#: pipeline runs, H100 and H200): it runs once without nsys (_run_without_nsys)
NSYS_ATTEMPTS = 2
NSYS_FLAGS = ("-t", "cuda,nvtx", "--cuda-memory-usage", "true", "-s", "none", "--cpuctxsw", "none",
              # XLA launches through CUDA graphs: trace their kernels one by one
              "--cuda-graph-trace=node",
              # without XLA's own NVTX domains, whose strings nsys could not always resolve
              *frameworks.nsys_nvtx_flags(frameworks.framework("jax")))
#: the tables NSYS_FLAGS have nsys export: the memory events and the kernels the report reads
#: (analysis.readers.nsys.trace.Trace.device_memory_events); an export without them lost the CUDA events
MEMORY_CAPTURE_TABLES = ("CUDA_GPU_MEMORY_USAGE_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL")


def child_environment(parent: dict[str, str], setting: str) -> dict[str, str]:
    """The parent's environment without any allocator variable, plus the setting's own."""
    if setting not in SETTING_NAMES:
        raise WorkloadError(f"exp_allocator: no setting {setting!r} (have: {', '.join(SETTING_NAMES)})")
    env = {k: v for k, v in parent.items() if k not in ALLOCATOR_VARIABLES}
    env.update(dict(SETTINGS)[setting])
    return env


def _summary_ms(times_ms: Sequence[float]) -> dict:
    a = np.asarray(times_ms, dtype=np.float64)
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return {"median_ms": float(med), "q1_ms": float(q1), "q3_ms": float(q3), "iqr_ms": float(q3 - q1),
            "min_ms": float(a.min()), "max_ms": float(a.max())}


def _driver_memory() -> dict:
    """Used device memory by the driver's count, or why there is none (no GPU, no driver)."""
    try:
        return CudaDriver().memory_info()
    except ProfilerRangeError as e:
        return {"error": str(e)}


def _memory_stats() -> dict | None:
    import jax

    stats = jax.devices()[0].memory_stats()
    return None if stats is None else {k: int(v) for k, v in stats.items()}


def run_child(variant: str, size: int, warmup: int, repeats: int, setting: str) -> dict:
    """One setting, in this process (its environment already set): setup, calls, memory, check."""
    import jax

    v = RECIPE.variant_class(variant)(size=size)
    # CPU work first (nvidia-smi, versions); then, on a GPU the pipeline's runs share, wait for its
    # turn before JAX's backend touches the GPU, and hold it to the exit (a no-op by hand)
    provenance_record = provenance.collect(("jax", "jaxlib"))
    gpu_turn.take_turn(f"{RECIPE_NAME}/{EXPERIMENT} {setting}")

    def ph(name: str, payload: int | None = None):
        return annotate.phase(RECIPE_NAME, v.name, name, payload)

    t0 = time.perf_counter()
    with ph("setup"):
        v.setup()
        v.synchronize()
    setup_s = time.perf_counter() - t0
    after_setup = _driver_memory()
    with ph("warmup"):
        for _ in range(warmup):
            v.step()
        v.synchronize()
    # JAX's host-clock pair waits in stop(): reading it inside the range adds no wait there
    times_ms = [timed_step(v, ph, i) for i in range(repeats)]
    record = {
        "setting": setting,
        "environment": {k: os.environ[k] for k in ALLOCATOR_VARIABLES if k in os.environ},
        "variant": v.name,
        "size": v.size,
        "work": v.work().as_dict(),
        "warmup_calls": warmup,
        "times_ms": times_ms,
        "timing": _summary_ms(times_ms),
        "timer": "host timer with block_until_ready",
        "setup_s": setup_s,
        "jax_backend": jax.default_backend(),
        "memory_stats": _memory_stats(),
        "driver_memory_after_setup": after_setup,
        "driver_memory_after_calls": _driver_memory(),
    }
    # the step's own seeded sample of elements (whole rows of the largest product), as in its nsys
    # and ncu runs: this process holds the GPU to its exit (its allocator's pool is what is
    # measured), and the full float64 product at 8192 took ~3 s of that on an H200; the step's
    # timed run checks every element
    with ph("transfer"):
        out, idx, total = v.sampled_result()
    with ph("check"):
        record["relative_error"] = check_result(out, v.reference_at(idx), v.tolerance,
                                                f"{RECIPE_NAME}/{v.name} size {v.size} ({setting}, sampled check)")
    record["check"] = {"method": "sample", "elements": int(idx.size), "of": total}
    record["tolerance"] = v.tolerance
    v.teardown()
    record["provenance"] = provenance_record
    return record


def _tail(text: str, limit: int = 3000) -> str:
    return text[-limit:]


def run_streaming(cmd: Sequence[str], env: dict[str, str], label: str) -> subprocess.CompletedProcess:
    """Run ``cmd``, passing its output to our stderr line by line as it comes (prefixed with
    ``label``) and keeping it for the record. A run captured whole said nothing until it ended: a
    setting that hung or was killed left a log holding only "<setting> ...". The exit status is
    said when the run ends."""
    proc = subprocess.Popen(list(cmd), env=dict(env, PYTHONUNBUFFERED="1"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        print(f"  [{label}] {line}", end="" if line.endswith("\n") else "\n", file=sys.stderr, flush=True)
    returncode = proc.wait()
    how = f"killed by signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
    print(f"  [{label}] {how}", file=sys.stderr, flush=True)
    output = "".join(lines)
    return subprocess.CompletedProcess(list(cmd), returncode, stdout="", stderr=output)


class ChildCrashed(WorkloadError):
    """A setting's process under nsys ended without writing its record."""


def run_setting(setting: str, args: argparse.Namespace, tmp: str) -> dict:
    """One setting under nsys, exported to ``<out-dir>/<setting>.sqlite``; returns its entry."""
    env = child_environment(dict(os.environ), setting)
    rep_prefix = os.path.join(tmp, setting)
    child_json = os.path.join(tmp, f"{setting}.json")
    child_cmd = [args.python, "-m", "workloads.jax_matmul.exp_allocator", "--child", "--setting", setting,
                 "--variant", args.variant, "--size", str(args.size), "--warmup", str(args.warmup),
                 "--repeats", str(args.repeats), "--output", child_json]
    profile_cmd = [args.nsys, "profile", *NSYS_FLAGS, "--force-overwrite", "true", "-o", rep_prefix, *child_cmd]
    sqlite = os.path.join(args.out_dir, f"{setting}.sqlite")
    export_cmd = [args.nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", sqlite,
                  f"{rep_prefix}.nsys-rep"]
    t0 = time.perf_counter()
    attempts, crashes = [], []
    for _ in range(NSYS_ATTEMPTS):
        try:
            entry = _profile_once(setting, args, env, profile_cmd, child_cmd, child_json, rep_prefix, export_cmd,
                                  sqlite)
        except ChildCrashed as e:
            # the child ended under nsys without its record (allocator_platform: SIGSEGV, exit 139,
            # every time so far): a second try under nsys held the GPU ~10-20 s for the same crash
            crashes.append(str(e))
            break
        attempts.append(entry.get("nsys_error"))
        if entry["sqlite"] is not None:
            break
    if crashes:
        entry = _run_without_nsys(setting, env, profile_cmd, child_cmd, child_json, crashes)
    entry["nsys_attempts"] = len(attempts) + len(crashes)
    entry["crashes_before"] = crashes
    entry["nsys_errors_before"] = [a for a in attempts[:-1] if a]
    entry["wall_s"] = time.perf_counter() - t0
    return entry


def _run_without_nsys(setting, env, profile_cmd, child_cmd, child_json, crashes) -> dict:
    """A setting whose process crashed under nsys: once more without nsys, so that the record says
    whether the setting itself crashes (then the experiment fails) or only its run under nsys does.
    allocator_platform crashes so under nsys in full pipeline runs (docs/measurement.md). Its time and JAX's own memory figures then come from this run,
    which the report does not compare with the nsys runs' times."""
    if os.path.exists(child_json):
        os.unlink(child_json)
    r = run_streaming(child_cmd, env, f"{setting} without nsys")
    if not os.path.exists(child_json):
        raise WorkloadError(f"exp_allocator: setting {setting}: the run under nsys wrote no record, "
                            f"nor the run without nsys (exit "
                            f"{r.returncode}: {_tail(r.stdout + r.stderr, 800)}); under nsys, the last:\n{crashes[-1]}")
    with open(child_json) as f:
        child = json.load(f)
    exits = [m.group(1) for c in crashes for m in [re.search(r"exited with (-?\d+):", c)] if m]
    return {
        "setting": setting,
        "environment_added": dict(SETTINGS)[setting],
        "sqlite": None,
        "nsys_command": profile_cmd[:profile_cmd.index(child_cmd[0])] + ["<child>"],
        "nsys_returncode": None,
        "child_command": child_cmd,
        "child_stderr_tail": _tail(r.stderr, 2000),
        "run": child,
        "timed_without_nsys": True,
        "nsys_error": (f"the process crashed under nsys (exit status {', '.join(exits) or 'unknown'}) and ran "
                       "once without it: its time and JAX's memory figures "
                       "are from that run\n" + crashes[-1]),
    }


def _profile_once(setting, args, env, profile_cmd, child_cmd, child_json, rep_prefix, export_cmd, sqlite) -> dict:
    for stale in (child_json, f"{rep_prefix}.nsys-rep"):
        if os.path.exists(stale):
            os.unlink(stale)
    r = run_streaming(profile_cmd, env, f"{setting} under nsys")
    if not os.path.exists(child_json):
        raise ChildCrashed(f"`{' '.join(profile_cmd)}` exited with {r.returncode}:\n{_tail(r.stdout + r.stderr)}")
    with open(child_json) as f:
        child = json.load(f)
    entry = {
        "setting": setting,
        "environment_added": dict(SETTINGS)[setting],
        "sqlite": None,
        "nsys_command": profile_cmd[:profile_cmd.index(args.python)] + ["<child>"],
        "nsys_returncode": r.returncode,
        "child_command": child_cmd,
        # JAX's own warnings (a deprecated variable, say) end up here
        "child_stderr_tail": _tail(r.stderr, 2000),
        "run": child,
    }
    # nsys can fail to turn a capture into a report: the run's own numbers still stand, and the
    # report says what nsys said instead of its memory columns
    if not os.path.exists(f"{rep_prefix}.nsys-rep"):
        entry["nsys_error"] = f"nsys made no report (exit {r.returncode}): {_tail(r.stdout + r.stderr, 1500)}"
    else:
        e = run_streaming(export_cmd, dict(os.environ), f"{setting} nsys export")
        if e.returncode != 0 or not os.path.exists(sqlite):
            entry["nsys_error"] = f"nsys export exited with {e.returncode}: {_tail(e.stdout + e.stderr, 1500)}"
        else:
            missing = missing_tables(sqlite, MEMORY_CAPTURE_TABLES)
            if missing:
                # nsys exits 0 when it loses the CUDA events while processing them: check the export
                os.unlink(sqlite)
                entry["nsys_error"] = (f"nsys's export has no {', '.join(missing)} (nsys said: "
                                       f"{_tail(r.stdout + r.stderr, 1500)})")
            else:
                entry["sqlite"] = os.path.basename(sqlite)
    return entry


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m workloads.jax_matmul.exp_allocator",
                                description=__doc__.split("\n")[0])
    p.add_argument("--out-dir", help="where allocator.json and <setting>.sqlite go")
    p.add_argument("--nsys", default=os.environ.get("NSYS", "nsys"))
    p.add_argument("--ncu", default=os.environ.get("NCU", "ncu"), help="accepted for the experiment CLI; unused")
    p.add_argument("--python", default=sys.executable)
    # the step and size whose timed run compiles the programs the settings load (the recipe's
    # experiments_from_cache): with others, each setting compiles for itself
    variant, size = next((v, n) for e, v, n in RECIPE.experiments_from_cache if e == EXPERIMENT)
    p.add_argument("--variant", default=variant, help="the step each setting runs")
    p.add_argument("--size", type=at_least(1), default=size, help="its size (the largest matrix side)")
    p.add_argument("--warmup", type=at_least(0), default=2)
    p.add_argument("--repeats", type=at_least(1), default=10)
    p.add_argument("--settings", default=",".join(SETTING_NAMES), help="comma-separated subset, in report order")
    # the process nsys profiles: one setting, its environment already set by the parent
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--setting", help=argparse.SUPPRESS)
    p.add_argument("--output", help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.child:
            if not args.setting or not args.output:
                raise WorkloadError("exp_allocator --child needs --setting and --output")
            record = run_child(args.variant, args.size, args.warmup, args.repeats, args.setting)
            write_json_atomic(args.output, record)
            t = record["timing"]
            print(f"{RECIPE_NAME}/{EXPERIMENT} {args.setting}: median {t['median_ms']:.3f} ms/call, "
                  f"rel_err {record['relative_error']:.1e}")
            return 0
        if not args.out_dir:
            raise WorkloadError("exp_allocator: --out-dir is required")
        settings = [s for s in args.settings.split(",") if s]
        for s in settings:
            child_environment({}, s)  # unknown names fail before any run
        os.makedirs(args.out_dir, exist_ok=True)
        entries = []
        with tempfile.TemporaryDirectory(prefix="jax-allocator-") as tmp:
            for s in settings:
                print(f"{RECIPE_NAME}/{EXPERIMENT}: {s} ...", flush=True)
                entry = run_setting(s, args, tmp)
                t = entry["run"]["timing"]
                print(f"{RECIPE_NAME}/{EXPERIMENT}: {s}: median {t['median_ms']:.3f} ms/call, "
                      f"{entry['wall_s']:.1f} s, {entry['sqlite'] or 'no export: ' + entry['nsys_error'][:200]}",
                      flush=True)
                entries.append(entry)
        record = {"recipe": RECIPE_NAME, "experiment": EXPERIMENT, "variant": args.variant, "size": args.size,
                  "warmup": args.warmup, "repeats": args.repeats, "settings": entries,
                  "provenance": provenance.collect(("jax", "jaxlib"))}
        write_json_atomic(os.path.join(args.out_dir, "allocator.json"), record)
        return 0
    except WorkloadError as e:
        print(f"{RECIPE_NAME}/{EXPERIMENT}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
