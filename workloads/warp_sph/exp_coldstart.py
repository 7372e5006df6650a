"""Experiment: cold starts the Warp way, per module, with the driver's cache emptied two ways.

    python -m workloads.warp_sph.exp_coldstart --out-dir DIR --nsys NSYS --ncu NCU --python PYTHON

Warp's profiling guide (its section "Benchmarking Cold-Start Compilation") names two cache layers: Warp's
kernel cache (generated CUDA-C and compiled binaries; the LTO cache lives inside it, under
``lto/``) and the CUDA driver's compute cache (binaries the driver JIT-compiled from PTX). A true
cold start needs both gone, and the driver's can go two ways that "can produce different
timings": an empty cache folder (lookups and writes still happen) or ``CUDA_CACHE_DISABLE=1``.

Per variant (default ``baseline``, the example's loop with one module, and ``pruned``, which loads
all three float32 kernel modules) this runs new processes of the recipe, one frame each:

``cold_fresh_cache``     fresh Warp kernel cache folder (so kernel and LTO caches are empty) and a
                         fresh ``CUDA_CACHE_PATH``
``warm``                 the same two folders again, now filled
``cold_cache_disabled``  another fresh kernel cache folder and ``CUDA_CACHE_DISABLE=1``; run only where
                         ``cold_fresh_cache`` left the driver's cache non-empty (the driver writes it only
                         when it JIT-compiles PTX: with SASS alone, as Warp compiles for a GPU its NVRTC
                         knows, turning it off could change nothing), else recorded as skipped
``trace``                fresh folders and ``warp.config.compile_time_trace = True``: the NVRTC
                         trace JSON of each module (kept apart: tracing slows compilation)

Each child records Warp's own per-module messages, "Module <name> <hash> load on device ... took
<ms> ms (compiled|cached)", captured through ``warp.set_logger``, and wall-clock phases: import,
``wp.init``, setup (inputs, module loads of graph variants, capture), first frame, a second frame.
Caches live in ``DIR/cache/<tag>-*`` and are deleted through ``workloads.harness.cold.safe_rmtree``
(never a user's cache). Files: ``coldstart.json`` and ``compile_time_trace_<variant>_<module>.json``.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import sys
import time
from typing import Sequence

#: when this module was imported: the child's interpreter and the suite are up, Warp not yet
_IMPORTED_UNIX_NS = time.time_ns()

from workloads import settings  # noqa: E402

from workloads.harness import gpu_turn, provenance
from workloads.commands import run_command  # noqa: E402
from workloads.contract import WorkloadError  # noqa: E402
from workloads.harness.runner import free_device_and_end_turn, write_json_atomic  # noqa: E402
from workloads.harness.cold import cache_root, fresh_cache_env, safe_rmtree  # noqa: E402
from workloads.tools.coldwarm import NO_PTX_JIT, driver_compiled, folder_size, run_recording  # noqa: E402
from workloads.warp_backend import APPLIED, configured_warp  # noqa: E402
from workloads.warp_sph import RECIPE  # noqa: E402

#: Warp's module-load line (warp/_src/context.py, Module.load's ScopedTimer)
MODULE_LOAD = re.compile(
    r"^Module (?P<module>\S+)(?: (?P<hash>[0-9a-f]{7}))? load on device '(?P<device>[^']+)'"
    r"(?: \(block_dim=\d+\))? took (?P<ms>[0-9.]+) ms\s+\((?P<how>[a-z]+)\)\s*$"
)
STATES = ("cold_fresh_cache", "warm", "cold_cache_disabled", "trace")
TRACE_GLOB = "*compile-time-trace*.json"


def parse_module_load(line: str) -> dict | None:
    """One Warp module-load message -> {module, hash, device, ms, how}; None for other lines."""
    m = MODULE_LOAD.match(line.strip())
    if m is None:
        return None
    return {"module": m["module"], "hash": m["hash"], "device": m["device"], "ms": float(m["ms"]), "how": m["how"]}


class RecordingLogger:
    """A Warp logger (``warp.set_logger``) that keeps the module-load messages and prints all."""

    def __init__(self) -> None:
        self.loads: list[dict] = []

    def debug(self, message: str) -> None:
        print(message, flush=True)

    def info(self, message: str) -> None:
        rec = parse_module_load(message)
        if rec is not None:
            rec["unix_ns"] = time.time_ns()
            self.loads.append(rec)
        print(message, flush=True)

    def warning(self, message: str, category=None, stacklevel: int = 1) -> None:
        import warnings

        warnings.warn(message, category, stacklevel=stacklevel)

    def error(self, message: str) -> None:
        print("Warp Error: " + message, file=sys.stderr, flush=True)


def run_child(variant: str, size: int, turn=None) -> dict:
    """One process's cold or warm start: setup, one frame, one more frame; wall-clock stamps. ``turn``:
    the GPU turn its parent handed it (None: none), given back once its frames are done."""
    import numpy as np

    t = {"imported_unix_ns": _IMPORTED_UNIX_NS}
    import warp as wp

    t["warp_imported_unix_ns"] = time.time_ns()
    logger = RecordingLogger()
    wp.set_logger(logger)  # before init: the init banner and every module load pass through it
    configured_warp()
    t["warp_initialized_unix_ns"] = time.time_ns()
    v = RECIPE.variant_class(variant)(size=size, seed=0)
    v.setup()
    v.synchronize()
    t["setup_done_unix_ns"] = time.time_ns()
    v.step()
    v.synchronize()
    t["first_frame_unix_ns"] = time.time_ns()
    v.step()
    v.synchronize()
    t["second_frame_unix_ns"] = time.time_ns()
    out = v.result()
    # the start-up and its frames are measured: the GPU goes to other runs while this process checks,
    # records and exits (the turn its parent took for it, gpu_turn.turn_for_child), as a step's run's
    free_device_and_end_turn(v, turn)
    if not np.isfinite(out).all():
        raise WorkloadError(f"exp_coldstart: {variant} produced non-finite positions")
    launch = settings.text("COOKBOOK_LAUNCH_UNIX_NS")
    t["launch_unix_ns"] = int(launch) if launch else None
    cache = APPLIED.get("kernel_cache_dir")
    binaries = sorted(os.path.relpath(p, cache) for p in glob.glob(os.path.join(cache, "wp_*", "*"))
                      if p.endswith((".cubin", ".ptx", ".o")))
    return {"variant": variant, "size": size, "device": str(v.device), "frame_mode": v.frame_mode,
            "stamps": t, "module_loads": logger.loads, "kernel_cache_dir": cache, "binaries": binaries,
            "env": {**{k: os.environ.get(k) for k in ("CUDA_CACHE_PATH", "CUDA_CACHE_DISABLE", "WARP_CACHE_PATH")},
                    **{k: settings.raw(k) for k in ("COOKBOOK_WARP_KERNEL_CACHE",
                                                    "COOKBOOK_WARP_COMPILE_TIME_TRACE")}},
            "provenance": provenance.collect(("warp",))}


def phases(stamps: dict) -> dict:
    """Seconds per phase from a child's wall-clock stamps."""
    def s(a: str, b: str) -> float | None:
        if stamps.get(a) is None or stamps.get(b) is None:
            return None
        return (stamps[b] - stamps[a]) / 1e9

    return {
        "time_to_first_result_s": s("launch_unix_ns", "first_frame_unix_ns"),
        "interpreter_and_suite_import_s": s("launch_unix_ns", "imported_unix_ns"),
        "warp_import_s": s("imported_unix_ns", "warp_imported_unix_ns"),
        "warp_init_s": s("warp_imported_unix_ns", "warp_initialized_unix_ns"),
        "setup_s": s("warp_initialized_unix_ns", "setup_done_unix_ns"),
        "first_frame_s": s("setup_done_unix_ns", "first_frame_unix_ns"),
        "second_frame_s": s("first_frame_unix_ns", "second_frame_unix_ns"),
    }


def _state_env(base: dict, warp_cache: str, cuda_cache: str, state: str) -> dict:
    env = dict(base)
    env["COOKBOOK_WARP_KERNEL_CACHE"] = warp_cache
    env["WARP_CACHE_PATH"] = warp_cache
    env["CUDA_CACHE_PATH"] = cuda_cache
    env.pop("CUDA_CACHE_DISABLE", None)
    env.pop("COOKBOOK_WARP_COMPILE_TIME_TRACE", None)
    if state == "cold_cache_disabled":
        env["CUDA_CACHE_DISABLE"] = "1"
    if state == "trace":
        env["COOKBOOK_WARP_COMPILE_TIME_TRACE"] = "1"
    return env


def _run_child(python: str, variant: str, size: int, env: dict, label: str) -> dict:
    print(f"coldstart: {variant} {label}", flush=True)
    rec = run_recording(
        lambda out: [python, "-m", "workloads.warp_sph.exp_coldstart", "--child", out, "--variant", variant,
                     "--size", str(size)],
        env, f"exp_coldstart: {variant} {label}", WorkloadError)
    rec["state"] = label
    rec["phases"] = phases(rec["stamps"])
    return rec


def _keep_traces(cache: str, out_dir: str, variant: str) -> list[str]:
    kept = []
    for path in sorted(glob.glob(os.path.join(cache, "**", TRACE_GLOB), recursive=True)):
        module_dir = os.path.basename(os.path.dirname(path))  # wp_<module>_<hash>
        module = re.sub(r"^wp_|_[0-9a-f]{7}$", "", module_dir)
        name = f"compile_time_trace_{variant}_{module}.json"
        shutil.copyfile(path, os.path.join(out_dir, name))
        kept.append(name)
    return kept


def run_experiment(out_dir: str, python: str, variants: Sequence[str], size: int) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    root = cache_root(out_dir)
    made_root = not root.exists()
    runs: list[dict] = []
    traces: dict[str, list[str]] = {}
    skipped: dict[str, dict[str, str]] = {}
    try:
        for variant in variants:
            fresh = {}
            try:
                # one cache folder per cold state; "warm" reuses cold_fresh_cache's, now filled
                for state in ("cold_fresh_cache", "cold_cache_disabled", "trace"):
                    fresh[state] = fresh_cache_env(out_dir, f"coldstart-{state}", os.environ)
                for state in STATES:
                    env, run_dir = fresh["cold_fresh_cache" if state == "warm" else state]
                    if state == "cold_cache_disabled" and not driver_compiled(runs[-1]["driver_cache_after_run"]):
                        skipped.setdefault(variant, {})[state] = NO_PTX_JIT
                        print(f"coldstart: {variant} {state}: skipped (driver cache empty after the cold run)",
                              flush=True)
                        continue
                    rec = _run_child(python, variant, size,
                                     _state_env(env, env["WARP_CACHE_PATH"], env["CUDA_CACHE_PATH"], state), state)
                    rec["driver_cache_after_run"] = folder_size(env["CUDA_CACHE_PATH"])
                    if state == "trace":
                        traces[variant] = _keep_traces(env["WARP_CACHE_PATH"], out_dir, variant)
                        rec["traces"] = traces[variant]
                    runs.append(rec)
                    ph = rec["phases"]
                    loads = ", ".join(f"{m['module']} {m['ms']:.0f} ms ({m['how']})" for m in rec["module_loads"])
                    print(f"coldstart: {variant} {state}: first result after {ph['time_to_first_result_s']:.2f} s; "
                          f"{loads}", flush=True)
            finally:
                for _env, run_dir in fresh.values():
                    safe_rmtree(run_dir, root)
    finally:
        if made_root and root.exists() and not any(root.iterdir()):
            root.rmdir()  # the folder this experiment made, now empty
    record = {"experiment": "coldstart", "workload": "warp_sph", "size": size, "variants": list(variants),
              "states": list(STATES), "runs": runs, "skipped": skipped, "traces": traces,
              "provenance": runs[0]["provenance"] if runs else provenance.collect(("warp",))}
    write_json_atomic(os.path.join(out_dir, "coldstart.json"), record)
    return record


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workloads.warp_sph.exp_coldstart", description=__doc__.split("\n")[0])
    p.add_argument("--out-dir")
    p.add_argument("--nsys", default="nsys", help="unused: module loads are timed by Warp itself")
    p.add_argument("--ncu", default="ncu", help="unused")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--variants", default="baseline,pruned")
    p.add_argument("--size", type=int, default=62500)
    p.add_argument("--child", metavar="JSON", help=argparse.SUPPRESS)
    p.add_argument("--variant", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    return run_command("exp_coldstart", lambda: _command(p, a))


def _command(p: argparse.ArgumentParser, a: argparse.Namespace) -> str | None:
    if a.size < 1:
        raise WorkloadError("--size must be positive")
    if a.child:
        # the turn the experiment took before launching this process (gpu_turn.turn_for_child)
        turn = gpu_turn.adopt_handed_turn()
        write_json_atomic(a.child, run_child(a.variant, a.size, turn))
        return None
    if not a.out_dir:
        p.error("--out-dir is required")
    variants = [v for v in a.variants.split(",") if v]
    for v in variants:
        RECIPE.variant_class(v)
    run_experiment(a.out_dir, a.python, variants, a.size)
    return f"coldstart: wrote {os.path.join(a.out_dir, 'coldstart.json')}"


if __name__ == "__main__":
    sys.exit(main())
