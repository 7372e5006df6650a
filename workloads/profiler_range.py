"""The CUDA profiler API as a context manager, so that nsys records only the code inside it.

The HPC-center guide "GPU Profiling, Optimization, and Debugging" wraps its matmul loop in a
``CudaProfiler`` context manager that calls ``cudaProfilerStart``/``cudaProfilerStop`` from a
``libcudart`` whose path the reader must edit ("make sure to modify cuda_runtime_path depending on your host"), and runs
``nsys profile --capture-range cudaProfilerApi``. Here the same calls come from the CUDA *driver*
library, ``libcuda.so.1``: every machine with an NVIDIA driver has it on the loader's path, while
the runtime library lives wherever each framework's wheels put it (JAX, CuPy and PyTorch each
bring their own copy). ``cuProfilerStart``/``cuProfilerStop`` are what the runtime's functions
call, and nsys' ``--capture-range=cudaProfilerApi`` answers to either.

The driver functions act on the *current* context of the calling thread, and JAX (XLA) makes its
context current only on the threads that launch work: the Python thread may have none. So the
range retains the device's primary context (the one JAX, CuPy and Numba share) and makes it
current around each call, then restores whatever was current before. Before stopping it
synchronizes the context, so that the GPU work launched inside the range ends inside it.

    with cuda_profiler_range():     # a no-op unless COOKBOOK_CAPTURE_RANGE=1
        run_the_loop()

    nsys profile --capture-range=cudaProfilerApi --capture-range-end=stop ...

Every driver call's return code is checked; a failure raises :class:`ProfilerRangeError` naming
the library and the function.
"""
from __future__ import annotations

import contextlib
import ctypes
from typing import Iterator

from workloads import settings
from workloads.contract import WorkloadError

#: "1" turns the range on; anything else (or unset) leaves it a no-op
ENV_SWITCH = "COOKBOOK_CAPTURE_RANGE"
#: the driver library to load (default: the soname every driver installs)
ENV_LIBRARY = "COOKBOOK_CUDA_DRIVER_LIBRARY"
DEFAULT_LIBRARY = "libcuda.so.1"

CUDA_SUCCESS = 0


class ProfilerRangeError(WorkloadError):
    """The CUDA driver library could not be loaded, or one of its calls failed."""


def enabled_from_environment() -> bool:
    return settings.text(ENV_SWITCH) == "1"


class CudaDriver:
    """The few CUDA driver functions the suite calls directly, through ctypes."""

    def __init__(self, library: str | None = None, device: int = 0) -> None:
        self.library = library or settings.text(ENV_LIBRARY)
        self.device = device
        try:
            self._lib = ctypes.CDLL(self.library)
        except OSError as e:
            raise ProfilerRangeError(
                f"cannot load the CUDA driver library {self.library!r} ({e}); an NVIDIA driver installs "
                f"libcuda.so.1, or point {ENV_LIBRARY} at it") from None
        self._call("cuInit", ctypes.c_uint(0))

    def _function(self, *names: str):
        # the headers map some names to versioned symbols (cuCtxPushCurrent -> cuCtxPushCurrent_v2)
        for name in names:
            fn = getattr(self._lib, name, None)
            if fn is not None:
                fn.restype = ctypes.c_int
                return name, fn
        raise ProfilerRangeError(f"{self.library}: has no function {' or '.join(names)}")

    def _error_name(self, rc: int) -> str:
        try:
            _, fn = self._function("cuGetErrorName")
        except ProfilerRangeError:
            return "?"
        text = ctypes.c_char_p()
        if fn(ctypes.c_int(rc), ctypes.byref(text)) != CUDA_SUCCESS or not text.value:
            return "?"
        return text.value.decode(errors="replace")

    def _call(self, names: str | tuple[str, ...], *args) -> None:
        name, fn = self._function(*((names,) if isinstance(names, str) else names))
        rc = fn(*args)
        if rc != CUDA_SUCCESS:
            raise ProfilerRangeError(f"{self.library}: {name} returned {rc} ({self._error_name(rc)})")

    # --- the primary context, made current around a block ---------------------------------------

    @contextlib.contextmanager
    def primary_context(self) -> Iterator[None]:
        """The device's primary context current on this thread for the block (retained meanwhile)."""
        dev = ctypes.c_int()
        self._call("cuDeviceGet", ctypes.byref(dev), ctypes.c_int(self.device))
        ctx = ctypes.c_void_p()
        self._call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
        try:
            self._call(("cuCtxPushCurrent_v2", "cuCtxPushCurrent"), ctx)
            try:
                yield
            finally:
                popped = ctypes.c_void_p()
                self._call(("cuCtxPopCurrent_v2", "cuCtxPopCurrent"), ctypes.byref(popped))
        finally:
            self._call(("cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"), dev)

    # --- what the suite uses -------------------------------------------------------------------

    def profiler_start(self) -> None:
        with self.primary_context():
            self._call("cuProfilerStart")

    def profiler_stop(self) -> None:
        with self.primary_context():
            # the range's GPU work ends inside the range: flush it before the profiler stops
            self._call("cuCtxSynchronize")
            self._call("cuProfilerStop")

    def memory_info(self) -> dict:
        """Free and total device memory as the driver reports them (cuMemGetInfo), in bytes."""
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        with self.primary_context():
            self._call(("cuMemGetInfo_v2", "cuMemGetInfo"), ctypes.byref(free), ctypes.byref(total))
        return {"free_bytes": free.value, "total_bytes": total.value, "used_bytes": total.value - free.value}


@contextlib.contextmanager
def cuda_profiler_range(library: str | None = None, enabled: bool | None = None) -> Iterator[bool]:
    """cuProfilerStart on entry, cuProfilerStop on exit (also when the block raises).

    ``enabled`` None reads ``COOKBOOK_CAPTURE_RANGE`` ("1" = on); off, nothing is loaded or called.
    ``library``: the driver library (default ``COOKBOOK_CUDA_DRIVER_LIBRARY``, else libcuda.so.1).
    Yields whether the range is on."""
    if enabled is None:
        enabled = enabled_from_environment()
    if not enabled:
        yield False
        return
    driver = CudaDriver(library)
    driver.profiler_start()
    try:
        yield True
    finally:
        driver.profiler_stop()
