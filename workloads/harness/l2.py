"""L2 cache modes of a timed run, and the CUDA driver calls they need.

``warm``
    samples back to back: a working set that fits in L2 (H100: 50 MB, H200: 60 MB) is
    timed out of the cache.
``cold-l2``
    before each sample, a buffer twice the L2 size is written with ``cuMemsetD8`` and the
    context synchronized, so the sample starts with none of its data in L2 (the scrub
    nvbench and ``triton.testing.do_bench`` use). The scrub runs outside the event-timed
    window and is timed on its own.

The driver is reached through ``ctypes`` (libcuda), so the scrub works the same under every
framework of the suite: L2 is physical, whatever context fills it.
"""
from __future__ import annotations

import ctypes
import time

from workloads.contract import WorkloadError

L2_MODES = ("warm", "cold-l2")
_CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38


class CudaDriverError(WorkloadError):
    pass


class _Driver:
    """The few driver API calls needed, on the primary context of one device."""

    def __init__(self, ordinal: int = 0) -> None:
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise CudaDriverError(f"the CUDA driver (libcuda.so.1) cannot be loaded: {e}") from e
        self.call("cuInit", ctypes.c_uint(0))
        self.device = ctypes.c_int()
        self.call("cuDeviceGet", ctypes.byref(self.device), ctypes.c_int(ordinal))
        self._context = None

    @property
    def context(self) -> ctypes.c_void_p:
        """The device's primary context, retained on first use: the bus id and the attributes need
        none, so that reading them (telemetry, the turn's memory check) never makes one."""
        if self._context is None:
            context = ctypes.c_void_p()
            self.call("cuDevicePrimaryCtxRetain", ctypes.byref(context), self.device)
            self._context = context
        return self._context

    def call(self, name: str, *args) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            raise CudaDriverError(f"{name} failed with CUresult {rc}")

    def attribute(self, attribute: int) -> int:
        value = ctypes.c_int()
        self.call("cuDeviceGetAttribute", ctypes.byref(value), ctypes.c_int(attribute), self.device)
        return value.value

    def pci_bus_id(self) -> str:
        buf = ctypes.create_string_buffer(32)
        self.call("cuDeviceGetPCIBusId", buf, ctypes.c_int(len(buf)), self.device)
        return buf.value.decode()


def cuda_pci_bus_id(ordinal: int = 0) -> str:
    """PCI bus id of CUDA device ``ordinal`` as this process sees it (after CUDA_VISIBLE_DEVICES)."""
    return _Driver(ordinal).pci_bus_id()


class L2Scrubber:
    """Evicts L2 by writing a buffer of twice its size; ``scrub()`` returns the seconds it took."""

    def __init__(self, ordinal: int = 0) -> None:
        self._d = _Driver(ordinal)
        self.l2_bytes = self._d.attribute(_CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
        self.buffer_bytes = 2 * self.l2_bytes
        self._ptr = ctypes.c_uint64()
        self._d.call("cuCtxPushCurrent_v2", self._d.context)
        try:
            self._d.call("cuMemAlloc_v2", ctypes.byref(self._ptr), ctypes.c_size_t(self.buffer_bytes))
        finally:
            self._d.call("cuCtxPopCurrent_v2", ctypes.byref(ctypes.c_void_p()))
        self._value = 0

    def scrub(self) -> float:
        t0 = time.perf_counter()
        # a different byte each time, so no layer can skip the write as already done
        self._value = (self._value + 1) % 256
        self._d.call("cuCtxPushCurrent_v2", self._d.context)
        try:
            self._d.call("cuMemsetD8_v2", self._ptr, ctypes.c_ubyte(self._value), ctypes.c_size_t(self.buffer_bytes))
            self._d.call("cuCtxSynchronize")
        finally:
            self._d.call("cuCtxPopCurrent_v2", ctypes.byref(ctypes.c_void_p()))
        return time.perf_counter() - t0

    def close(self) -> None:
        if self._ptr.value:
            self._d.call("cuMemFree_v2", self._ptr)
            self._ptr = ctypes.c_uint64()
