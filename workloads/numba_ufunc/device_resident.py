"""Step 3: generate the data on the GPU and keep them there; the ufunc writes into a device out=.

No byte crosses the host link in a call: the floor becomes 4 GiB through device memory
(~1 ms at ~4.2 TB/s), unless the float64 transcendentals (sin, exp, tanh, two sqrt) make the
kernel compute-bound, which ncu's FP64 pipe utilization shows. Only the check copies data to the host.
"""
import numpy as np

from workloads import hostmath
from workloads.contract import Variant, Work
from workloads.numba_backend import NumbaDevice
from workloads.numba_ufunc import body


class DeviceResident(NumbaDevice, Variant):
    name = "device_resident"
    summary = "inputs generated on the GPU, ufunc with a device out=: no host copies per call"
    tolerance = 1e-13
    #: the device arrays' element type (the float32 steps change it; the fill rounds to it)
    dtype = "float64"

    def setup(self) -> None:
        from numba import cuda

        self.d_x = cuda.device_array(self.size, dtype=self.dtype)
        self.d_out = cuda.device_array(self.size, dtype=self.dtype)
        blocks, threads = body.launch_config(self.size)
        body.fill_kernel()[blocks, threads](self.d_x, float(self.seed))
        body.poison_kernel()[blocks, threads](self.d_out)

    def step(self) -> None:
        body.cuda_ufunc()(self.d_x, out=self.d_out)

    def result(self) -> np.ndarray:
        return self.d_out.copy_to_host()

    def sampled_result(self) -> tuple[np.ndarray, np.ndarray, int]:
        idx = self.sample_indices(self.size)
        return body.gathered(self.d_out, idx), idx, self.size

    def host_reference_inputs(self, flat_indices: np.ndarray | None) -> np.ndarray:
        # the input was drawn on the GPU: all of it, or the sampled elements gathered there
        if flat_indices is None:
            return self.d_x.copy_to_host()
        return body.gathered(self.d_x, flat_indices)

    def reference(self) -> np.ndarray:
        return hostmath.parallel_map(body.reference, self.reference_inputs(None))

    def reference_at(self, flat_indices: np.ndarray) -> np.ndarray:
        return body.reference(self.reference_inputs(flat_indices))

    def work(self) -> Work:
        n8 = 8 * self.size
        return Work(bytes_read=n8, bytes_written=n8, flops=10 * self.size)

    def teardown(self) -> None:
        self.d_x = self.d_out = None


VARIANT = DeviceResident
