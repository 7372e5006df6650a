"""Data-frame plumbing shared by the cuDF variants: which library runs the recipe, synchronization
and timing events.

``COOKBOOK_DATAFRAME`` chooses the library, read when a variant is made: ``cudf`` (the default) or
``pandas``. The recipe code is the same for both (cuDF copies pandas' API); pandas on the CPU is how
the tests check the recipe's numbers where there is no GPU.

Streams, and why CuPy's events time cuDF's work. libcudf queues its work on
``cudf::get_default_stream()``, and pylibcudf on rmm's ``DEFAULT_STREAM``: both are the legacy
default stream (stream 0) unless ``CUDF_PER_THREAD_STREAM=1`` or libcudf was built with
``CUDF_USE_PER_THREAD_DEFAULT_STREAM`` (the CMake option is OFF by default; only cuDF's Java build
turns it on), in which case they are the per-thread default stream (cudf 26.10 sources:
cpp/src/utilities/default_stream.cpp, python/pylibcudf/pylibcudf/utils.pyx). CuPy's current stream
is its ``Stream.null`` (handle 0, the legacy default stream), or ``Stream.ptds`` with
``CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1``. An event recorded on the legacy default stream waits for
all earlier work of every blocking stream, and the per-thread default stream is a blocking stream
(it synchronizes with the legacy one both ways), so a CuPy event pair on either default stream
brackets everything cuDF queued between the two records, whichever default stream cuDF uses:
:class:`workloads.cupy_backend.CupyEventPair` is reused as is. A non-blocking stream made current
would escape that ordering, so :meth:`CudfDevice.event_pair` refuses to time on one.

pandas computes synchronously on the host: its event pair is two host timestamps.
"""
from __future__ import annotations

import time

from workloads import settings
from workloads.backend import Backend, EventPair
from workloads.contract import WorkloadError
from workloads.cupy_backend import CupyEventPair, free_cupy_and_rmm_pools

ENV_DATAFRAME = "COOKBOOK_DATAFRAME"
LIBRARIES = ("cudf", "pandas")

#: CUDA's stream handles that order with the legacy default stream: 0 (the default stream, legacy
#: unless a program is compiled for per-thread), cudaStreamLegacy (1), cudaStreamPerThread (2)
DEFAULT_STREAM_HANDLES = (0, 1, 2)


def frame_library(environ: dict | None = None) -> str:
    """The data-frame library ``COOKBOOK_DATAFRAME`` names: ``cudf`` (default) or ``pandas``."""
    name = settings.text(ENV_DATAFRAME, environ).lower()
    if name not in LIBRARIES:
        raise WorkloadError(f"{ENV_DATAFRAME}={settings.raw(ENV_DATAFRAME, environ)!r}: use one of "
                            f"{', '.join(LIBRARIES)}")
    return name


def import_frame_library(name: str):
    """The library's module, imported now (never at import time of a variant module)."""
    if name == "cudf":
        try:
            import cudf
        except ImportError as e:
            raise WorkloadError(f"cuDF is not importable ({e}); run through pandas with "
                                f"{ENV_DATAFRAME}=pandas") from None
        return cudf
    if name == "pandas":
        import pandas

        return pandas
    raise WorkloadError(f"no data-frame library {name!r}; have {', '.join(LIBRARIES)}")


class HostEventPair(EventPair):
    """Host timestamps around a region: right for pandas, whose calls return when they are done."""

    def __init__(self) -> None:
        self._start_ns: int | None = None
        self._stop_ns: int | None = None

    def start(self) -> None:
        self._start_ns = time.perf_counter_ns()

    def stop(self) -> None:
        self._stop_ns = time.perf_counter_ns()

    def elapsed_ms(self) -> float:
        if self._start_ns is None or self._stop_ns is None:
            raise WorkloadError("host event pair read before both start() and stop() were called")
        return (self._stop_ns - self._start_ns) / 1e6


def default_stream_event_pair() -> EventPair:
    """CuPy events on CuPy's current stream, after checking that it orders with cuDF's default stream."""
    import cupy

    handle = int(cupy.cuda.get_current_stream().ptr)
    if handle not in DEFAULT_STREAM_HANDLES:
        raise WorkloadError(
            f"CuPy's current stream is {handle:#x}, not a default stream: events on it would not wait "
            "for cuDF's work on the default stream; leave CuPy's current stream at its default")
    return CupyEventPair()


class CudfDevice(Backend):
    """Mixin giving a Variant synchronize() and event_pair() for the library in ``self.library``."""

    library: str

    def synchronize(self) -> None:
        if self.library == "pandas":
            return  # nothing runs behind the caller's back
        import cupy

        # the whole device: cuDF's default stream is the legacy or the per-thread one (see above)
        cupy.cuda.runtime.deviceSynchronize()

    def event_pair(self) -> EventPair:
        if self.library == "pandas":
            return HostEventPair()
        return default_stream_event_pair()

    def free_cached_device_memory(self) -> None:
        if self.library == "cudf":
            # cuDF allocates through RMM, and makes RMM CuPy's allocator too
            free_cupy_and_rmm_pools()
