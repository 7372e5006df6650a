"""Warp plumbing shared by Warp variants: configuration from the environment, the device,
synchronization and timing events.

Environment variables (read once, by :func:`configured_warp`, before Warp initializes):

``COOKBOOK_WARP_DEVICE``
    the Warp device the variants use (``cuda:0``, ``cuda:1``, ``cpu``); default ``cuda:0`` when
    CUDA is available, else ``cpu``.
``COOKBOOK_LINEINFO=1``
    ``warp.config.lineinfo = True``: modules are compiled with line information, so that Nsight
    Compute can relate SASS to the source (the first step of Warp's profiling guide, NVIDIA Warp documentation).
``COOKBOOK_WARP_LINE_DIRECTIVES=0``
    ``warp.config.line_directives = False``: SASS is related to the generated CUDA-C in the kernel
    cache instead of the Python lines.
``COOKBOOK_WARP_KERNEL_CACHE=DIR``
    ``warp.config.kernel_cache_dir = DIR`` (Warp adds a ``<version>`` folder below it). Without it
    Warp honours its own ``WARP_CACHE_PATH``, else the user's cache folder.
``COOKBOOK_WARP_COMPILE_TIME_TRACE=1``
    ``warp.config.compile_time_trace = True``: NVRTC writes a ``*_compile-time-trace.json`` (Trace
    Event Format) beside each module it compiles for a GPU (CUDA 12.8+).

Warp copies ``lineinfo`` and ``compile_time_trace`` into a module's options when the module's first
kernel is *defined*, so every module holding kernels must call :func:`configured_warp` before its
first ``@wp.kernel`` (and be imported only from inside a variant's methods).
"""
from __future__ import annotations

import sys
import time

from workloads import settings
from workloads.backend import Backend, EventPair
from workloads.errors import WorkloadError

ENV_DEVICE = "COOKBOOK_WARP_DEVICE"
ENV_LINEINFO = "COOKBOOK_LINEINFO"
ENV_LINE_DIRECTIVES = "COOKBOOK_WARP_LINE_DIRECTIVES"
ENV_KERNEL_CACHE = "COOKBOOK_WARP_KERNEL_CACHE"
ENV_COMPILE_TIME_TRACE = "COOKBOOK_WARP_COMPILE_TIME_TRACE"

#: what configured_warp() applied, for records and error messages
APPLIED: dict[str, object] = {}


def _initialized(wp) -> bool:
    """Whether Warp's runtime exists already (Warp 1.19 has no public call for this)."""
    try:
        return wp._src.context.runtime is not None
    except AttributeError:  # another layout: assume not, the cache setting then applies or is ignored
        return False


def configured_warp():
    """``warp``, configured from the environment and initialized; idempotent."""
    import warp as wp

    if APPLIED:
        return wp
    already = _initialized(wp)
    if settings.flag(ENV_LINEINFO):
        wp.config.lineinfo = True
    if not settings.flag(ENV_LINE_DIRECTIVES):
        wp.config.line_directives = False
    if settings.flag(ENV_COMPILE_TIME_TRACE):
        wp.config.compile_time_trace = True
    cache = settings.text(ENV_KERNEL_CACHE)
    if cache:
        if already:
            # Warp resolves the folder (and adds its version below it) in init(); setting it later
            # would bypass that, and modules loaded so far would stay in the old folder
            raise WorkloadError(f"{ENV_KERNEL_CACHE} is set but Warp was initialized before the "
                                "suite could apply it; set it before the workload starts")
        wp.config.kernel_cache_dir = cache
    wp.init()
    APPLIED.update(lineinfo=wp.config.lineinfo, line_directives=wp.config.line_directives,
                   compile_time_trace=wp.config.compile_time_trace,
                   kernel_cache_dir=wp.config.kernel_cache_dir)
    return wp


def device_name() -> str:
    """The Warp device the variants run on (see ``COOKBOOK_WARP_DEVICE``)."""
    wp = configured_warp()
    name = settings.text(ENV_DEVICE)
    if not name:
        return "cuda:0" if wp.is_cuda_available() else "cpu"
    try:
        wp.get_device(name)
    except Exception as e:  # Warp raises ValueError/RuntimeError for unknown aliases
        raise WorkloadError(f"{ENV_DEVICE}={name!r}: not a Warp device here ({e})") from None
    return name


def get_device():
    wp = configured_warp()
    return wp.get_device(device_name())


class WarpEventPair(EventPair):
    """CUDA events on the device's current stream (the one ``wp.launch`` uses); on the CPU device,
    where Warp has no events and every launch returns when done, a host clock."""

    def __init__(self, device) -> None:
        self._wp = configured_warp()
        self._device = device
        if device.is_cuda:
            self._start = self._wp.Event(device=device, enable_timing=True)
            self._stop = self._wp.Event(device=device, enable_timing=True)
        self._t0 = self._t1 = None

    def start(self) -> None:
        if self._device.is_cuda:
            self._wp.get_stream(self._device).record_event(self._start)
        else:
            self._t0 = time.perf_counter()

    def stop(self) -> None:
        if self._device.is_cuda:
            self._wp.get_stream(self._device).record_event(self._stop)
        else:
            self._t1 = time.perf_counter()

    def elapsed_ms(self) -> float:
        if self._device.is_cuda:
            # synchronizes on the stop event first
            return float(self._wp.get_event_elapsed_time(self._start, self._stop))
        if self._t0 is None or self._t1 is None:
            raise WorkloadError("WarpEventPair: elapsed_ms() before start() and stop()")
        return (self._t1 - self._t0) * 1e3


class WarpDevice(Backend):
    """Mixin giving a Variant Warp's device, synchronize() and event_pair()."""

    _device = None

    @property
    def device(self):
        if self._device is None:
            self._device = get_device()
        return self._device

    def synchronize(self) -> None:
        wp = configured_warp()
        wp.synchronize_device(self.device)

    def event_pair(self) -> EventPair:
        return WarpEventPair(self.device)


def describe() -> str:
    """One line for logs: the device and what configured_warp() applied."""
    return f"warp device={device_name()} " + " ".join(f"{k}={v}" for k, v in sorted(APPLIED.items()))


if __name__ == "__main__":  # python -m workloads.warp_backend: show what a workload would use
    configured_warp()
    print(describe(), file=sys.stdout)
