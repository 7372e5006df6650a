"""The parent and the children of ``python -m workloads.nvtx_multiprocess``.

Nothing here imports CuPy at module level: the parent never needs it, and the
module must import on machines without a GPU. The array library is reached
through a small backend (:class:`CupyBackend`, or :class:`NumpyBackend`, a CPU
stand-in for tests and for seeing the processes and thread names without a GPU).
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import multiprocessing
import os
import queue as queue_module
import sys
import threading
import time
import traceback
from typing import Sequence

import numpy as np

from workloads import annotate

from workloads.harness import provenance
from workloads.contract import ResultMismatch, WorkloadError
from workloads.harness.runner import write_json_atomic
from workloads.nvtx_multiprocess import (CUPY_FUNCTIONS, DEFAULT_SIZES, NUMPY_FUNCTIONS, REQUIRES,
                                         SEED_DOCUMENT, WORKLOAD, role_name, variant_name)

#: largest accepted |mean - reference| / |reference|. Both sides sum 2^24 float64 values in
#: different orders (CuPy per-thread chunks then a tree, NumPy pairwise); rounding stays far
#: below 1e-10, while one wrong element out of 4096^2 moves the mean by ~1e-8.
MEAN_TOLERANCE = 1e-10
#: how far the mean of n^2 uniform [0, 1) values may stray from 0.5, in standard deviations
#: of that mean (sqrt(1/12) / n): catches a matrix of zeros or of unwritten memory
PLAUSIBLE_SIGMAS = 8.0
#: the parent's thread name (also the process name Linux shows for it)
PARENT_ROLE = "nvtx-parent"


class NumpyBackend:
    """The steps on the CPU with NumPy: no GPU work, the same processes, threads and ranges.
    Functions are looked up on the module at each call, so that wrappers installed by
    annotate_functions (``cupy.mean``) are the ones called."""

    name = "numpy"
    default_functions = NUMPY_FUNCTIONS

    def __init__(self) -> None:
        self.xp = np

    def generator(self, seed: int):
        return self.xp.random.default_rng(seed)

    def random(self, generator, shape: tuple[int, int]):
        return generator.random(shape, dtype=self.xp.float64)

    def mean(self, x):
        return self.xp.mean(x)

    def to_host(self, x) -> np.ndarray:
        return np.asarray(x)

    def synchronize(self) -> None:
        pass

    def version(self) -> str | None:
        return np.__version__


class CupyBackend(NumpyBackend):
    """The recipe on the GPU: the same calls on CuPy's NumPy-like API."""

    name = "cupy"
    default_functions = CUPY_FUNCTIONS

    def __init__(self) -> None:
        import cupy

        self.xp = cupy

    def to_host(self, x) -> np.ndarray:
        return self.xp.asnumpy(x)

    def synchronize(self) -> None:
        self.xp.cuda.get_current_stream().synchronize()

    def version(self) -> str | None:
        return provenance.package_version("cupy")


BACKENDS = {"cupy": CupyBackend, "numpy": NumpyBackend}


def check_mean(mean: float, host: np.ndarray, what: str) -> tuple[float, float]:
    """Raise :class:`ResultMismatch` unless ``mean`` is the float64 mean of ``host`` and plausible
    for uniform [0, 1) values. Returns (reference mean, relative error)."""
    if host.size == 0:
        raise ResultMismatch(f"{what}: empty matrix")
    lo, hi = float(host.min()), float(host.max())
    if not (0.0 <= lo and hi < 1.0):
        raise ResultMismatch(f"{what}: values outside [0, 1): min {lo!r}, max {hi!r}")
    # the array method, not np.mean: np.mean may be wrapped by annotate_functions right now
    reference = float(host.mean(dtype=np.float64))
    if not math.isfinite(mean):
        raise ResultMismatch(f"{what}: mean is {mean!r}")
    err = abs(mean - reference) / abs(reference) if reference != 0.0 else abs(mean)
    if not err <= MEAN_TOLERANCE:
        raise ResultMismatch(f"{what}: mean {mean!r} differs from the float64 reference {reference!r} "
                             f"(relative error {err:.3e} > {MEAN_TOLERANCE:.0e})")
    sigma = math.sqrt(1.0 / 12.0) / math.sqrt(host.size)
    if abs(reference - 0.5) > PLAUSIBLE_SIGMAS * sigma:
        raise ResultMismatch(f"{what}: mean {reference!r} is {abs(reference - 0.5) / sigma:.1f} standard "
                             "deviations from 0.5; the matrix is not uniform random values")
    return reference, err


def run_child(size: int, seed: int, backend, functions: Sequence[str]) -> dict:
    """One child's work, in the calling thread: name the thread, wrap the third-party
    functions, then setup (random matrix), compute (its mean), transfer, check.

    ``backend``: an object with generator/random/mean/to_host/synchronize (see
    :class:`CupyBackend`). Functions wrapped here are unwrapped before returning."""
    role, variant = role_name(size), variant_name(size)
    os_thread_name = annotate.name_current_thread(role)
    wrapped = annotate.annotate_functions(functions)
    try:
        wrapped += annotate.annotate_from_environment()

        def ph(name: str):
            return annotate.phase(WORKLOAD, variant, name)

        wall_s: dict[str, float] = {}
        t0 = time.perf_counter()
        with ph("setup"):
            x = backend.random(backend.generator(seed), (size, size))
            backend.synchronize()
        wall_s["setup"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        with ph("compute"):
            m = backend.mean(x)
            backend.synchronize()
        wall_s["compute"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        with ph("transfer"):
            host = backend.to_host(x)
            mean = float(backend.to_host(m))
        wall_s["transfer"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        with ph("check"):
            reference, err = check_mean(mean, host, f"{WORKLOAD}/{variant} ({role}, pid {os.getpid()})")
        wall_s["check"] = time.perf_counter() - t0
        annotate.mark(f"{WORKLOAD}/{variant}/checked", payload=size)
    finally:
        annotate.unannotate_functions(wrapped)
    return {
        "role": role,
        "variant": variant,
        "size": size,
        "seed": seed,
        "pid": os.getpid(),
        "native_thread_id": threading.get_native_id(),
        "os_thread_name": os_thread_name,
        "array_module": backend.name,
        "array_module_version": backend.version(),
        "matrix_bytes": size * size * 8,
        "mean": mean,
        "mean_reference": reference,
        "relative_error": err,
        "tolerance": MEAN_TOLERANCE,
        "thirdparty_functions": [w.path for w in wrapped],
        "host_wall_s": wall_s,
    }


def _child_main(size: int, seed: int, backend_name: str, functions: Sequence[str], results) -> None:
    """The target of each spawned process: run, then report a record or the error to the parent."""
    try:
        record = run_child(size, seed, BACKENDS[backend_name](), functions)
    except BaseException as e:  # the parent must hear about every failure; it prints it once
        # a WorkloadError (wrong result, bad path) explains itself; anything else needs its traceback
        detail = "" if isinstance(e, WorkloadError) else traceback.format_exc()
        results.put(("error", size, f"{type(e).__name__}: {e}", detail))
        sys.exit(1)
    results.put(("ok", size, record))


def run_parent(sizes: Sequence[int], seed: int, backend_name: str, functions: Sequence[str],
               timeout_s: float) -> dict:
    """Start one spawned process per size, collect their records, return the run's record."""
    if backend_name == "cupy" and importlib.util.find_spec("cupy") is None:
        raise WorkloadError("CuPy is not installed (pip install cupy-cuda13x); "
                            "--array-module numpy runs the same processes on the CPU")
    annotate.name_current_thread(PARENT_ROLE)
    # spawn, not fork: a forked child inherits the parent's CUDA state, which CUDA forbids using
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    procs = {size: ctx.Process(target=_child_main, name=role_name(size),
                               args=(size, seed + i, backend_name, tuple(functions), results))
             for i, size in enumerate(sizes)}
    t_start = time.perf_counter()
    annotate.mark(f"{WORKLOAD}/parent/start", payload=len(procs))
    for p in procs.values():
        p.start()
    records: dict[int, dict] = {}
    errors: dict[int, str] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(records) + len(errors) < len(procs):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                waiting = [role_name(s) for s in procs if s not in records and s not in errors]
                raise WorkloadError(f"children {', '.join(waiting)} gave no result within {timeout_s:g} s")
            try:
                msg = results.get(timeout=min(1.0, remaining))
            except queue_module.Empty:
                # a child killed by a signal or a crash in C never reports: notice it by its exit code
                for size, p in procs.items():
                    if size not in records and size not in errors and p.exitcode not in (None, 0):
                        errors[size] = f"exited with code {p.exitcode} before reporting a result"
                continue
            if msg[0] == "ok":
                records[msg[1]] = msg[2]
            else:
                errors[msg[1]] = f"{msg[2]}\n{msg[3]}".rstrip()
    finally:
        for p in procs.values():
            p.join(timeout=30)
            if p.is_alive():  # only after a timeout or an error elsewhere
                p.terminate()
                p.join(timeout=10)
    annotate.mark(f"{WORKLOAD}/parent/collected", payload=len(records))
    if errors:
        raise WorkloadError("; ".join(f"child {role_name(s)} failed: {msg}" for s, msg in errors.items()))
    return {
        "workload": WORKLOAD,
        "seed_document": SEED_DOCUMENT,
        "array_module": backend_name,
        "start_method": "spawn",
        "sizes": list(sizes),
        "seed": seed,
        "nvtx_enabled": annotate.ENABLED,
        "thirdparty_functions_requested": list(functions) + annotate.functions_from_environment(),
        "parent": {"pid": os.getpid(), "os_thread_name": PARENT_ROLE},
        "children": [records[s] for s in sizes],
        "host_wall_s": time.perf_counter() - t_start,
        "provenance": provenance.collect(REQUIRES if backend_name == "cupy" else ()),
    }


def positive(kind, what: str = "value"):
    """An argparse type: ``kind`` (int or float) parsed and required to be positive."""
    noun = "an integer" if kind is int else "a number"

    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} {text!r} is not {noun}") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"{what} must be positive, got {text}")
        return v
    return parse


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m workloads.{WORKLOAD}",
        description="The NVTX blog's multi-process example: one spawned process per matrix "
                    "size builds an n x n random float64 matrix and takes its mean, in named threads "
                    "and the suite's NVTX ranges.")
    p.add_argument("--sizes", type=positive(int, "size"), nargs="+", default=list(DEFAULT_SIZES), metavar="N",
                   help="matrix side n of each child, one process per size (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the first child (+1 per child)")
    p.add_argument("--output", help="write the run's JSON record here (atomically)")
    p.add_argument("--array-module", choices=sorted(BACKENDS), default="cupy",
                   help="cupy (the recipe, on the GPU) or numpy (a CPU stand-in: same processes, "
                        "threads and ranges, no GPU work)")
    p.add_argument("--functions", default=None, metavar="PATH[,PATH...]",
                   help="third-party functions to wrap in NVTX ranges in each child (default: "
                        f"{','.join(CUPY_FUNCTIONS)} for cupy, {','.join(NUMPY_FUNCTIONS)} for numpy; "
                        f"'' for none); {annotate.ENV_FUNCTIONS} adds more")
    p.add_argument("--timeout-s", type=float, default=600.0, help="give up on the children after this long")
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = parser()
    a = p.parse_args(argv)
    if len(set(a.sizes)) != len(a.sizes):
        # each size names a process, a thread and a range: two alike could not be told apart
        p.error(f"--sizes must differ, got {' '.join(map(str, a.sizes))}")
    if a.functions is None:
        a.functions = list(BACKENDS[a.array_module].default_functions)
    else:
        a.functions = [f.strip() for f in a.functions.split(",") if f.strip()]
    if a.timeout_s <= 0:
        p.error(f"--timeout-s must be positive, got {a.timeout_s}")
    return a


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        record = run_parent(args.sizes, args.seed, args.array_module, args.functions, args.timeout_s)
    except WorkloadError as e:
        print(f"{WORKLOAD}: {e}", file=sys.stderr)
        return 1
    for c in record["children"]:
        print(f"{WORKLOAD}/{c['variant']} pid={c['pid']} thread={c['os_thread_name']!r} "
              f"mean={c['mean']:.12f} rel_err={c['relative_error']:.2e} "
              f"wrapped={','.join(c['thirdparty_functions']) or '-'}")
    if args.output:
        write_json_atomic(args.output, record)
    return 0
