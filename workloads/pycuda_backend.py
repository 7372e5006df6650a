"""PyCUDA plumbing shared by PyCUDA variants: the context, synchronization and events."""
from __future__ import annotations

from workloads.backend import Backend, EventPair, RecordedEventPair


def driver():
    """pycuda.driver with a context current. ``autoprimaryctx`` (not ``autoinit``) uses the
    device's primary context, the one CuPy and Numba use too, so they can share a process."""
    import pycuda.autoprimaryctx  # noqa: F401
    import pycuda.driver as drv

    return drv


class PycudaEventPair(RecordedEventPair):
    """Events recorded on ``stream`` (None: the default stream)."""

    def __init__(self, stream=None) -> None:
        drv = driver()
        self._stream = stream
        self._start, self._stop = drv.Event(), drv.Event()

    def start(self) -> None:
        self._start.record(self._stream)

    def stop(self) -> None:
        self._stop.record(self._stream)

    def _between_ms(self) -> float:
        return self._start.time_till(self._stop)


class PycudaDevice(Backend):
    """Mixin giving a Variant PyCUDA's synchronize() and event_pair() (on the default stream)."""

    def synchronize(self) -> None:
        driver().Context.synchronize()

    def event_pair(self) -> EventPair:
        return PycudaEventPair()
