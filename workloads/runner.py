"""Command line shared by every workload: ``python -m workloads.<name> --variant V ...``.

Two modes:

``run`` (default)
    setup, ``--calls`` calls of the computation (each in its own ``compute``
    range, payload = call index), transfer, check. This is what runs under
    nsys and ncu: short, annotated, verified.
``timed``
    setup, ``--warmup`` calls, then ``--repeats`` calls each timed with device
    events; median and spread go to ``--output`` as JSON with provenance.
    The result of the last timed call is checked too.
``first``
    setup and one call, timestamped on the wall clock: with the launch time that
    ``workloads.tools.coldwarm`` passes in, the time to the first result of a new
    process (interpreter start, imports, JIT compilation, module load, first launch).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

#: when this module was imported: the interpreter and the suite are up, no GPU library yet
_IMPORTED_UNIX_NS = time.time_ns()
from typing import Sequence

import numpy as np

from workloads import annotate, provenance, sources
from workloads.contract import Recipe, Variant, WorkloadError, check_result


def _parser(recipe: Recipe) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m workloads.{recipe.name}",
        description=f"{recipe.title}, from {sources.cite(recipe.seed_document)}. Variants, in recipe order: "
        + ", ".join(recipe.variants),
    )
    p.add_argument("--variant", required=True, choices=recipe.variants, help="the step of the recipe to run")
    p.add_argument("--size", type=int, default=recipe.default_size, help=recipe.size_meaning)
    p.add_argument("--mode", choices=("run", "timed", "first"), default="run",
                   help="run: setup, --calls calls, check (what the profilers run); timed: warm-up, then "
                        "--repeats timed calls; first: time to the first result of a fresh process")
    p.add_argument("--calls", type=int, default=3, help="run mode: calls of the computation")
    p.add_argument("--warmup", type=int, default=5, help="timed mode: untimed calls first")
    p.add_argument("--repeats", type=int, default=30, help="timed mode: timed calls")
    p.add_argument("--seed", type=int, default=0, help="random inputs' seed")
    p.add_argument("--output", help="write the run's JSON record here (atomically)")
    return p


def write_json_atomic(path: str, record: dict) -> None:
    """Write JSON so that a reader never sees a half-written file."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def _summary_ms(times_ms: Sequence[float]) -> dict:
    a = np.asarray(times_ms, dtype=np.float64)
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return {
        "median_ms": float(med),
        "q1_ms": float(q1),
        "q3_ms": float(q3),
        "iqr_ms": float(q3 - q1),
        "min_ms": float(a.min()),
        "max_ms": float(a.max()),
        "mean_ms": float(a.mean()),
    }


def _capture_range(recipe: Recipe):
    """The profiler capture range around the compute calls, for recipes that declare one (seed 001's
    method: nsys --capture-range=cudaProfilerApi then records only these calls). It starts only when
    COOKBOOK_CAPTURE_RANGE=1, which the pipeline's nsys rule sets."""
    if not recipe.capture_range:
        return contextlib.nullcontext()
    from workloads.profiler_range import cuda_profiler_range

    return cuda_profiler_range()


def _check(v: Variant, recipe: Recipe, ph) -> float:
    with ph("transfer"):
        out = v.result()
    with ph("check"):
        ref = v.reference()
        return check_result(out, ref, v.tolerance, f"{recipe.name}/{v.name} size {v.size}")


def run(recipe: Recipe, args: argparse.Namespace) -> dict:
    # third-party functions named in COOKBOOK_NVTX_FUNCTIONS get NVTX ranges, unedited
    annotated = [w.path for w in annotate.annotate_from_environment()]
    cls = recipe.variant_class(args.variant)
    v = cls(size=args.size, seed=args.seed)

    def ph(name: str, payload: int | None = None):
        return annotate.phase(recipe.name, v.name, name, payload)

    wall_s: dict[str, float] = {}
    t0 = time.perf_counter()
    with ph("setup"):
        v.setup()
        v.synchronize()
    wall_s["setup"] = time.perf_counter() - t0
    setup_done = time.time_ns()
    record: dict = {
        "workload": recipe.name,
        "variant": v.name,
        "summary": v.summary,
        "size": v.size,
        "mode": args.mode,
        "work": v.work().as_dict(),
        "annotated_functions": annotated,
    }
    if args.mode == "first":
        with ph("compute", payload=0):
            v.step()
            v.synchronize()
        first_result = time.time_ns()
        # a few more calls in the same process: the steady state the first call is compared with
        steady_ms = []
        for i in range(1, 6):
            ev = v.event_pair()
            with ph("compute", payload=i):
                ev.start()
                v.step()
                ev.stop()
                steady_ms.append(ev.elapsed_ms())
        record["steady_call_ms"] = _summary_ms(steady_ms)["median_ms"]
        launch = os.environ.get("COOKBOOK_LAUNCH_UNIX_NS")
        record["first_result"] = {
            "launch_unix_ns": int(launch) if launch else None,
            "imported_unix_ns": _IMPORTED_UNIX_NS,
            "setup_done_unix_ns": setup_done,
            "first_result_unix_ns": first_result,
        }
    elif args.mode == "run":
        t0 = time.perf_counter()
        with _capture_range(recipe):
            for i in range(args.calls):
                with ph("compute", payload=i):
                    v.step()
                    # one synchronize per call, so each compute range holds its own GPU work
                    v.synchronize()
        wall_s["compute"] = time.perf_counter() - t0
        record["calls"] = args.calls
    else:
        t0 = time.perf_counter()
        with ph("warmup"):
            for _ in range(args.warmup):
                v.step()
            v.synchronize()
        wall_s["warmup"] = time.perf_counter() - t0
        times_ms, host_call_ms, host_synced_ms = [], [], []
        for i in range(args.repeats):
            ev = v.event_pair()
            with ph("compute", payload=i):
                t_start = time.perf_counter()
                ev.start()
                v.step()
                # what a host timer around the call alone sees (seed 003's time.time()):
                # launches return before the GPU is done
                t_returned = time.perf_counter()
                ev.stop()
                v.synchronize()
                t_synced = time.perf_counter()
                times_ms.append(ev.elapsed_ms())
            host_call_ms.append((t_returned - t_start) * 1e3)
            host_synced_ms.append((t_synced - t_start) * 1e3)
        record["warmup_calls"] = args.warmup
        record["times_ms"] = times_ms
        record["timing"] = _summary_ms(times_ms)
        record["host_call_ms"] = host_call_ms
        record["host_synced_ms"] = host_synced_ms
    t0 = time.perf_counter()
    record["relative_error"] = _check(v, recipe, ph)
    wall_s["transfer_and_check"] = time.perf_counter() - t0
    record["tolerance"] = v.tolerance
    record["host_wall_s"] = wall_s
    v.teardown()
    record["provenance"] = provenance.collect(recipe.requires)
    return record


def main(recipe: Recipe, argv: Sequence[str] | None = None) -> int:
    args = _parser(recipe).parse_args(argv)
    try:
        record = run(recipe, args)
    except WorkloadError as e:
        print(f"{recipe.name}: {e}", file=sys.stderr)
        return 1
    line = f"{recipe.name}/{record['variant']} size={record['size']} mode={record['mode']}"
    if "timing" in record:
        t = record["timing"]
        gbs = record["work"]["bytes_read"] + record["work"]["bytes_written"]
        line += f" median={t['median_ms']:.4f} ms iqr={t['iqr_ms']:.4f} ms ({gbs / t['median_ms'] / 1e6:.1f} GB/s)"
    line += f" rel_err={record['relative_error']:.2e}"
    print(line)
    if args.output:
        write_json_atomic(args.output, record)
    return 0
