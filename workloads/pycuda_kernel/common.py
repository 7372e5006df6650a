"""Inputs, reference and declared work shared by the PyCUDA variants."""
from __future__ import annotations

import numpy as np

from workloads import hostmath
from workloads.contract import Variant, Work
from workloads.pycuda_backend import PycudaDevice


class ScaleVariant(PycudaDevice, Variant):
    # float32 times 2 is exact
    tolerance = 0.0
    #: whether data cross the host link in every call
    host_data = True

    def prepare_host(self, check: str) -> None:
        # before the GPU turn: 1 GiB of normals is host work that held the GPU 0.4-1.0 s a run (H100)
        # when setup drew it (on every core: one thread took ~5 s)
        self.keep("input", self._draw())

    def _draw(self) -> np.ndarray:
        return hostmath.standard_normal(self.size, self.seed, dtype=np.float32)

    def make_input(self, out: np.ndarray | None = None) -> np.ndarray:
        """The input drawn before the turn (drawn now where prepare_host did not run), or copied into
        ``out`` (page-locked buffers, which need the CUDA context, are allocated in setup)."""
        drawn = self.take("input", self._draw)
        return drawn if out is None else hostmath.copy_into(out, drawn)

    def reference(self) -> np.ndarray:
        return 2.0 * self.x_host.astype(np.float64)

    def reference_at(self, flat_indices: np.ndarray) -> np.ndarray:
        return 2.0 * self.x_host[flat_indices].astype(np.float64)

    def work(self) -> Work:
        n4 = 4 * self.size
        if self.host_data:
            return Work(bytes_read=n4, bytes_written=n4, flops=self.size, bytes_h2d=n4, bytes_d2h=n4)
        return Work(bytes_read=n4, bytes_written=n4, flops=self.size)
