"""Step 2: when data must cross, cross from page-locked memory, asynchronously, on a stream.

Pinned buffers copy at the link's DMA rate (~55 GB/s on the H200's host link) instead of the
pageable rate, and the call queues copy, kernel and copy back without a host wait in between.
Predicted: ~2 x 1 GiB / 55 GB/s = ~39 ms. A host timer around the call now sees only the queueing.
"""
import numpy as np

from workloads import hostmath
from workloads.pycuda_backend import PycudaEventPair, driver
from workloads.pycuda_kernel import kernels
from workloads.pycuda_kernel.common import ScaleVariant


class PinnedAsync(ScaleVariant):
    name = "pinned_async"
    summary = "page-locked host buffers, async copies and launch on one stream"

    def setup(self) -> None:
        drv = driver()
        self.stream = drv.Stream()
        self.x_host = drv.pagelocked_empty(self.size, dtype=np.float32)
        self.make_input(out=self.x_host)
        self.out_host = drv.pagelocked_empty(self.size, dtype=np.float32)
        hostmath.filled(self.size, np.nan, out=self.out_host)
        self.d_in = drv.mem_alloc(self.x_host.nbytes)
        self.d_out = drv.mem_alloc(self.x_host.nbytes)
        self.kernel = kernels.module().get_function("scale_grid_stride")
        self.blocks = kernels.filling_grid()

    def step(self) -> None:
        drv = driver()
        drv.memcpy_htod_async(self.d_in, self.x_host, self.stream)
        self.kernel(self.d_out, self.d_in, np.uint64(self.size), block=(kernels.THREADS, 1, 1),
                    grid=(self.blocks, 1), stream=self.stream)
        drv.memcpy_dtoh_async(self.out_host, self.d_out, self.stream)

    def synchronize(self) -> None:
        self.stream.synchronize()

    def event_pair(self):
        return PycudaEventPair(self.stream)

    def result(self) -> np.ndarray:
        self.stream.synchronize()
        return self.out_host

    def teardown(self) -> None:
        self.d_in.free()
        self.d_out.free()


VARIANT = PinnedAsync
