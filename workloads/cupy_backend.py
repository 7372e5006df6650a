"""CuPy plumbing shared by CuPy variants: synchronization and CUDA events on the current stream."""
from __future__ import annotations

from workloads.contract import EventPair, RecordedEventPair


class CupyEventPair(RecordedEventPair):
    def __init__(self) -> None:
        import cupy

        self._cupy = cupy
        self._start = cupy.cuda.Event()
        self._stop = cupy.cuda.Event()

    def _between_ms(self) -> float:
        return self._cupy.cuda.get_elapsed_time(self._start, self._stop)


class CupyDevice:
    """Mixin giving a Variant CuPy's synchronize() and event_pair()."""

    def synchronize(self) -> None:
        import cupy

        cupy.cuda.get_current_stream().synchronize()

    def event_pair(self) -> EventPair:
        return CupyEventPair()
