"""Baseline, the seed's way: copy in, launch, copy back, all synchronous from pageable memory,
and the kernel launched as a single block of 256 threads walking the whole array.

One block runs on one SM of the GPU's 132, so the kernel alone is far from the memory
bandwidth. A ``time.time()`` around this call (the seed's timer) sees the copies too: they are
synchronous, and from pageable memory they are slow.
"""
import numpy as np

from workloads import hostmath
from workloads.pycuda_backend import driver
from workloads.pycuda_kernel import kernels
from workloads.pycuda_kernel.common import ScaleVariant


class Baseline(ScaleVariant):
    name = "baseline"
    summary = "as in the PyCUDA article: pageable copies in and out, the kernel launched as one block of 256 threads"
    grid = None  # one block

    def prepare_host(self, check: str) -> None:
        super().prepare_host(check)
        # the pageable result, poisoned before the turn too: an element the GPU never writes stays NaN
        self.keep("poisoned_out", self._poisoned_out())

    def _poisoned_out(self) -> np.ndarray:
        return hostmath.filled(self.size, np.nan, dtype=np.float32)

    def setup(self) -> None:
        drv = driver()
        self.x_host = self.make_input()
        self.out_host = self.take("poisoned_out", self._poisoned_out)
        self.d_in = drv.mem_alloc(self.x_host.nbytes)
        self.d_out = drv.mem_alloc(self.x_host.nbytes)
        self.blocks = self.grid or 1
        self.kernel = kernels.module().get_function(
            "scale_one_block" if self.grid is None else "scale_grid_stride")

    def step(self) -> None:
        drv = driver()
        drv.memcpy_htod(self.d_in, self.x_host)
        self.kernel(self.d_out, self.d_in, np.uint64(self.size), block=(kernels.THREADS, 1, 1),
                    grid=(self.blocks, 1))
        drv.memcpy_dtoh(self.out_host, self.d_out)

    def result(self) -> np.ndarray:
        return self.out_host

    def teardown(self) -> None:
        self.d_in.free()
        self.d_out.free()


VARIANT = Baseline
