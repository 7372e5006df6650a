"""Numba CUDA plumbing shared by Numba variants: synchronization and events."""
from __future__ import annotations

from workloads.backend import Backend, EventPair, RecordedEventPair


def _event(cuda):
    try:
        return cuda.event(timing=True)
    except TypeError:  # the CUDA simulator's events take no arguments (and time nothing real)
        return cuda.event()


class NumbaEventPair(RecordedEventPair):
    """Events on the legacy default stream: it waits for the work of every blocking stream,
    so a pair around a multi-stream call times the whole call."""

    def __init__(self) -> None:
        from numba import cuda

        self._cuda = cuda
        self._start = _event(cuda)
        self._stop = _event(cuda)

    def _between_ms(self) -> float:
        return self._start.elapsed_time(self._stop)


class NumbaDevice(Backend):
    """Mixin giving a Variant Numba's synchronize(), event_pair() and its deferred frees done."""

    def synchronize(self) -> None:
        from numba import cuda

        cuda.synchronize()

    def event_pair(self) -> EventPair:
        return NumbaEventPair()

    def free_cached_device_memory(self) -> None:
        import gc

        from numba import cuda

        gc.collect()
        # Numba defers cudaFree until enough frees pile up: do them now (its CUDA simulator keeps
        # no such list)
        deallocations = getattr(cuda.current_context(), "deallocations", None)
        if deallocations is not None:
            deallocations.clear()
