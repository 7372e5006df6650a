"""Step 1: pinned (page-locked) host buffers and explicit copies.

Copies from pinned memory go straight to the device by DMA, without the driver's staging copy:
predicted 2 GiB / ~55 GB/s = ~39 ms each way instead of the pageable rates, so the call should
drop to about the sum of the two pinned copies plus the kernel.
"""
from workloads.numba_ufunc import body
from workloads.numba_ufunc.common import HostDataUfunc


class Pinned(HostDataUfunc):
    name = "pinned"
    summary = "pinned host buffers, explicit copies to a device array and back (no overlap yet)"
    pinned_host = True

    def setup(self) -> None:
        from numba import cuda

        super().setup()
        self.d_x = cuda.device_array(self.size, dtype="float64")
        self.d_out = cuda.device_array(self.size, dtype="float64")

    def step(self) -> None:
        self.d_x.copy_to_device(self.x)
        body.cuda_ufunc()(self.d_x, out=self.d_out)
        self.d_out.copy_to_host(self.out)

    def teardown(self) -> None:
        super().teardown()
        self.d_x = self.d_out = None


VARIANT = Pinned
