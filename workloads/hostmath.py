"""Host-side helpers for large inputs and references: NumPy ufuncs release the GIL, so chunks
computed on threads use every core (a 2 GiB float64 reference takes seconds on one)."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

#: fixed chunk count, so that generated data do not depend on the number of cores
CHUNKS = 64


def chunk_bounds(n: int, chunks: int = CHUNKS) -> list[tuple[int, int]]:
    edges = np.linspace(0, n, min(chunks, max(n, 1)) + 1, dtype=np.int64)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]


#: threads :func:`parallel_chunks` uses at most (None: up to 32, one per core); see :func:`share_cores`
_max_threads: int | None = None


def available_cores() -> int:
    """The cores this process may run on (its affinity: the pipeline gives the run holding the GPU
    cores of its own, workloads.harness.gpu_turn.split_cores), else the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def share_cores() -> None:
    """From now on use half the cores it may run on: the process checks its result beside other
    processes' host work (workloads.harness.runner: the GPU turn given back before the check)."""
    global _max_threads
    _max_threads = max(1, available_cores() // 2)


def parallel_chunks(n: int, fn: Callable[[int, int, int], None], threads: int | None = None) -> None:
    """Call ``fn(index, start, stop)`` for every chunk of ``range(n)``, on threads."""
    bounds = chunk_bounds(n)
    threads = threads or min(32, available_cores())
    if _max_threads is not None:
        threads = min(threads, _max_threads)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(lambda ib: fn(ib[0], *ib[1]), enumerate(bounds)))


def standard_normal(n: int, seed: int, out: np.ndarray | None = None, dtype=np.float64) -> np.ndarray:
    """n standard normals (float64, or float32 with ``dtype``/a float32 ``out``), reproducible for a
    given seed, generated on all cores."""
    out = np.empty(n, dtype=dtype) if out is None else out
    seeds = np.random.SeedSequence(seed).spawn(len(chunk_bounds(n)))

    def fill(i: int, start: int, stop: int) -> None:
        np.random.Generator(np.random.PCG64(seeds[i])).standard_normal(stop - start, dtype=out.dtype,
                                                                        out=out[start:stop])

    parallel_chunks(n, fill)
    return out


def filled(n: int, value: float, out: np.ndarray | None = None, dtype=np.float64) -> np.ndarray:
    """``out`` (or a new array of n ``dtype``) set to ``value`` on every core: the first write faults
    its pages in, ~0.5 s per GiB on one core."""
    out = np.empty(n, dtype=dtype) if out is None else out
    flat = out.reshape(-1)
    parallel_chunks(flat.size, lambda _i, start, stop: flat[start:stop].fill(value))
    return out


def copy_into(dst: np.ndarray, src: np.ndarray) -> np.ndarray:
    """``src`` copied into ``dst`` (same size) on every core."""
    d, s = dst.reshape(-1), src.reshape(-1)
    if d.size != s.size:
        raise ValueError(f"copy_into: {s.size} elements into {d.size}")

    def copy(_i: int, start: int, stop: int) -> None:
        d[start:stop] = s[start:stop]

    parallel_chunks(d.size, copy)
    return dst


def parallel_map(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    """``fn`` applied to ``x`` chunk by chunk on threads (``fn`` must be elementwise)."""
    out = np.empty_like(x, dtype=np.float64)

    def work(_i: int, start: int, stop: int) -> None:
        out[start:stop] = fn(x[start:stop])

    parallel_chunks(x.size, work)
    return out
