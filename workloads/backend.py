"""What a framework gives every variant written with it: synchronization, device events and the
return of its allocator's cached memory. Each framework has one mixin implementing
:class:`Backend` (``workloads/<framework>_backend.py``: ``CupyDevice``, ``NumbaDevice``, ...); a
variant lists it before :class:`~workloads.contract.Variant`, so a recipe author writes none of it::

    class SquaredDifference(CupyDevice, Variant): ...
"""
from __future__ import annotations

import abc


class EventPair(abc.ABC):
    """Device events around a region; elapsed time is read after both completed."""

    @abc.abstractmethod
    def start(self) -> None: ...

    @abc.abstractmethod
    def stop(self) -> None: ...

    @abc.abstractmethod
    def elapsed_ms(self) -> float:
        """Milliseconds between start and stop, waiting for stop if needed."""


class RecordedEventPair(EventPair):
    """A pair of a framework's CUDA events, each with ``record()`` and ``synchronize()``: the
    subclass makes ``_start`` and ``_stop`` and reads the time between them."""

    _start: object
    _stop: object

    def start(self) -> None:
        self._start.record()

    def stop(self) -> None:
        self._stop.record()

    def elapsed_ms(self) -> float:
        self._stop.synchronize()
        return float(self._between_ms())

    @abc.abstractmethod
    def _between_ms(self) -> float:
        """Milliseconds from the start event to the stop event, both complete."""


class Backend(abc.ABC):
    """The device plumbing the runner calls on a variant; a framework's mixin implements it."""

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Wait until all work this variant queued has finished."""

    @abc.abstractmethod
    def event_pair(self) -> EventPair:
        """A (start, stop) pair of device events on the stream the variant's ``step`` uses."""

    def free_cached_device_memory(self) -> None:
        """After the variant's ``teardown``: give back what the framework's allocator keeps cached
        for reuse (CuPy's pool, RMM's, Numba's deferred frees). The default keeps everything (then
        the process keeps its GPU turn if it holds much)."""
