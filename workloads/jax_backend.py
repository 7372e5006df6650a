"""JAX plumbing shared by JAX variants: synchronization and a host-clock timer.

JAX has no CUDA-event API: its arrays live on streams that XLA owns, and nothing public records an
event on them. So a JAX variant is timed with the host clock around ``block_until_ready()``:

* ``start()`` first waits until everything the variant queued before is done, then reads the clock;
* ``stop()`` waits until the arrays the call produced are ready (``jax.block_until_ready``), then
  reads the clock.

The interval therefore holds the call's Python dispatch, the GPU work and the latency of the
wake-up after the last kernel (tens of microseconds), which CUDA events would not count. Reports
label these numbers "host timer with block_until_ready". Works on every JAX backend (the CPU tests
use the same code).
"""
from __future__ import annotations

import time

from workloads.backend import Backend, EventPair
from workloads.contract import WorkloadError

#: how reports name the timer of JAX variants
TIMER = "host timer with block_until_ready"


def block_until_ready(arrays) -> None:
    """Wait until every JAX array in ``arrays`` (any pytree; None = nothing) is computed."""
    if arrays is None:
        return
    import jax

    jax.block_until_ready(arrays)


class HostClockPair(EventPair):
    """Host clock around ``block_until_ready``; ``wait`` blocks until the variant's queued work is done."""

    timer = TIMER

    def __init__(self, wait) -> None:
        self._wait = wait
        self._start_ns: int | None = None
        self._stop_ns: int | None = None

    def start(self) -> None:
        # work queued before must not be charged to this interval
        self._wait()
        self._start_ns = time.perf_counter_ns()

    def stop(self) -> None:
        self._wait()
        self._stop_ns = time.perf_counter_ns()

    def elapsed_ms(self) -> float:
        if self._start_ns is None or self._stop_ns is None:
            raise WorkloadError("HostClockPair.elapsed_ms() before start() and stop()")
        return (self._stop_ns - self._start_ns) / 1e6


class JaxDevice(Backend):
    """Mixin giving a Variant JAX's synchronize() and event_pair().

    The variant keeps the arrays its last :meth:`step` produced in ``self.pending`` (any pytree of
    JAX arrays); synchronizing means waiting for those. XLA runs one program's work in stream order,
    so the outputs being ready means the call is done."""

    pending = None

    def synchronize(self) -> None:
        block_until_ready(self.pending)

    def event_pair(self) -> EventPair:
        return HostClockPair(self.synchronize)
