"""CuPy plumbing shared by CuPy variants: synchronization and CUDA events on the current stream."""
from __future__ import annotations

from workloads.backend import Backend, EventPair, RecordedEventPair


class CupyEventPair(RecordedEventPair):
    def __init__(self) -> None:
        import cupy

        self._cupy = cupy
        self._start = cupy.cuda.Event()
        self._stop = cupy.cuda.Event()

    def _between_ms(self) -> float:
        return self._cupy.cuda.get_elapsed_time(self._start, self._stop)


class CupyDevice(Backend):
    """Mixin giving a Variant CuPy's synchronize(), event_pair() and the return of its pools."""

    def synchronize(self) -> None:
        import cupy

        cupy.cuda.get_current_stream().synchronize()

    def event_pair(self) -> EventPair:
        return CupyEventPair()

    def free_cached_device_memory(self) -> None:
        free_cupy_and_rmm_pools()


def free_cupy_and_rmm_pools() -> None:
    """Give back the blocks CuPy's pool keeps, and an RMM pool made CuPy's allocator
    (``rmm.reinitialize``): RMM's default resource again, and CuPy's own allocator."""
    import gc
    import sys

    import cupy

    if "rmm" in sys.modules:
        import rmm

        rmm.reinitialize(pool_allocator=False)
        cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)
    gc.collect()  # arrays in reference cycles hold their blocks until collected
    cupy.get_default_memory_pool().free_all_blocks()
