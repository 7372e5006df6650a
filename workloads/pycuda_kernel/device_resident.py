"""Step 3: keep the data on the device (``gpuarray``); a call is one kernel launch.

The floor is now 1 GiB read + 1 GiB written through device memory: ~0.5 ms at ~4.2 TB/s.
Target: at least 80% of the device-to-device copy bandwidth measured in the same run. A host
timer around this call measures only the launch: the GPU is still working when it returns.
"""
import numpy as np

from workloads.pycuda_backend import driver
from workloads.pycuda_kernel import kernels
from workloads.pycuda_kernel.common import ScaleVariant


class DeviceResident(ScaleVariant):
    name = "device_resident"
    summary = "gpuarray input and output stay on the device: one launch per call, no copies"
    host_data = False
    kernel_name = "scale_grid_stride"

    def setup(self) -> None:
        import pycuda.gpuarray as gpuarray

        driver()
        self.x_host = self.make_input()
        self.d_in = gpuarray.to_gpu(self.x_host)
        self.d_out = gpuarray.empty_like(self.d_in)
        self.d_out.fill(np.float32(np.nan))
        self.kernel = kernels.module().get_function(self.kernel_name)
        self.blocks = kernels.filling_grid()

    def step(self) -> None:
        self.kernel(self.d_out.gpudata, self.d_in.gpudata, np.uint64(self.size),
                    block=(kernels.THREADS, 1, 1), grid=(self.blocks, 1))

    def result(self) -> np.ndarray:
        return self.d_out.get()

    def teardown(self) -> None:
        self.d_in = self.d_out = None


VARIANT = DeviceResident
