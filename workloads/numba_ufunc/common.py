"""Inputs, reference and declared work shared by the Numba ufunc variants."""
from __future__ import annotations

import numpy as np

from workloads import hostmath
from workloads.contract import Variant, Work
from workloads.numba_backend import NumbaDevice
from workloads.numba_ufunc import body


class HostDataUfunc(NumbaDevice, Variant):
    """The input lives in a host NumPy array and the result must end up in one (the seed's case)."""

    #: float64 transcendental chains: a few ulp of difference between CUDA's libdevice and glibc
    tolerance = 1e-13
    #: whether the host buffers are page-locked (subclasses that copy asynchronously need it)
    pinned_host = False

    def prepare_host(self, check: str) -> None:
        # before the GPU turn: drawing 2 GiB of normals and poisoning the pageable result is host work
        # that held the GPU 1.0-1.3 s a run (H100) when setup did it; page-locked buffers need the CUDA
        # context, so those variants allocate them in setup and copy the drawn input in
        self.keep("input", self._draw())
        if not self.pinned_host:
            self.keep("poisoned_out", self._poisoned_out())

    def _draw(self) -> np.ndarray:
        return hostmath.standard_normal(self.size, self.seed)

    def _poisoned_out(self, out: np.ndarray | None = None) -> np.ndarray:
        # poison: an element the GPU never writes stays NaN and fails the check
        return hostmath.filled(self.size, np.nan, out=out)

    def setup(self) -> None:
        from numba import cuda

        drawn = self.take("input", self._draw)
        if self.pinned_host:
            self.x = cuda.pinned_array(self.size, dtype=np.float64)
            hostmath.copy_into(self.x, drawn)
            self.out = self._poisoned_out(cuda.pinned_array(self.size, dtype=np.float64))
        else:
            self.x = drawn
            self.out = self.take("poisoned_out", self._poisoned_out)

    def result(self) -> np.ndarray:
        self.synchronize()
        return self.out

    def reference(self) -> np.ndarray:
        return hostmath.parallel_map(body.reference, self.x)

    def reference_at(self, flat_indices: np.ndarray) -> np.ndarray:
        return body.reference(self.x[flat_indices])

    def work(self) -> Work:
        n8 = 8 * self.size
        # the kernel reads x and writes f(x) in device memory; both cross the host link once
        return Work(bytes_read=n8, bytes_written=n8, flops=10 * self.size, bytes_h2d=n8, bytes_d2h=n8)

    def teardown(self) -> None:
        # the host input stays: the reference, computed after the teardown, reads it
        self.out = None
