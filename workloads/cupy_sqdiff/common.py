"""Inputs, reference and declared work shared by every squared-difference variant."""
from __future__ import annotations

import abc

import numpy as np

from workloads import hostmath
from workloads.contract import Variant, Work
from workloads.cupy_backend import CupyDevice


class SquaredDifference(CupyDevice, Variant):
    """Subclasses choose the allocator (:meth:`configure_allocator`) and the kernel (:meth:`compute`)."""

    def configure_allocator(self) -> None:
        """Called before any device allocation; the default keeps CuPy's own memory pool."""

    @abc.abstractmethod
    def compute(self, a, b):
        """The variant's expression: returns the n x n result array."""

    #: host arrays a full check copies the result and the inputs back into (prepare_host), or None
    _host_copies: dict[str, np.ndarray] | None = None

    def prepare_host(self, check: str) -> None:
        # before the GPU turn: a copy back into fresh pageable memory faults its pages in during the
        # copy, inside the turn (6 GiB for the result and both inputs at 16384^2: 1.8-2.8 s a run
        # on an H200); written once here, on every core the process may use
        if check != "full":
            return
        n2 = self.size * self.size
        self._host_copies = {name: hostmath.filled(n2, 0.0) for name in ("out", "a", "b")}

    def _to_host(self, name: str, array) -> np.ndarray:
        """``array`` (on the device) copied into its prepared host array, flat, or into a new one."""
        import cupy

        host = (self._host_copies or {}).pop(name, None)
        if host is None:
            return cupy.asnumpy(array).reshape(-1)
        array.reshape(-1).get(out=host)
        return host

    def setup(self) -> None:
        import cupy

        self.configure_allocator()
        rng = cupy.random.default_rng(self.seed)
        shape = (self.size, self.size)
        # normal values, not zeros: zeros would hide unwritten outputs
        self.a = rng.standard_normal(shape, dtype=cupy.float64)
        self.b = rng.standard_normal(shape, dtype=cupy.float64)
        self.out = None

    def step(self) -> None:
        self.out = self.compute(self.a, self.b)

    def result(self) -> np.ndarray:
        return self._to_host("out", self.out).reshape(self.out.shape)

    def sampled_result(self) -> tuple[np.ndarray, np.ndarray, int]:
        import cupy

        # gathered on the device: the sample crosses to the host, not the 2 GiB result
        idx = self.sample_indices(int(self.out.size))
        return cupy.asnumpy(self.out.reshape(-1)[cupy.asarray(idx)]), idx, int(self.out.size)

    def host_reference_inputs(self, flat_indices: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        # the inputs were drawn on the GPU: (a, b) flattened, whole or the sampled elements gathered
        # on the device
        import cupy

        if flat_indices is None:
            return self._to_host("a", self.a), self._to_host("b", self.b)
        idx = cupy.asarray(flat_indices)
        return cupy.asnumpy(self.a.reshape(-1)[idx]), cupy.asnumpy(self.b.reshape(-1)[idx])

    def reference(self) -> np.ndarray:
        # in place and on every core: at 16384^2 each temporary is 2 GiB of host memory
        d, b = self.reference_inputs(None)

        def square_of_difference(_i: int, start: int, stop: int) -> None:
            part = d[start:stop]
            np.subtract(part, b[start:stop], out=part)
            np.multiply(part, part, out=part)

        hostmath.parallel_chunks(d.size, square_of_difference)
        return d.reshape(self.size, self.size)

    def reference_at(self, flat_indices: np.ndarray) -> np.ndarray:
        a, b = self.reference_inputs(flat_indices)
        d = a - b
        return d * d

    def work(self) -> Work:
        n2 = self.size * self.size
        return Work(bytes_read=2 * 8 * n2, bytes_written=8 * n2, flops=2 * n2)

    def teardown(self) -> None:
        self.a = self.b = self.out = None


_FUSED: dict[str, object] = {}


def fused_kernel(kernel_name: str, body):
    """``cupy.fuse(body)``, built on first use, so that importing a variant needs no CuPy."""
    if kernel_name not in _FUSED:
        import cupy

        _FUSED[kernel_name] = cupy.fuse(kernel_name=kernel_name)(body)
    return _FUSED[kernel_name]


def use_rmm_pool() -> None:
    """Route CuPy's allocations through an RMM pool (one big cudaMalloc up front)."""
    import cupy
    import rmm
    from rmm.allocators.cupy import rmm_cupy_allocator

    rmm.reinitialize(pool_allocator=True)
    cupy.cuda.set_allocator(rmm_cupy_allocator)
