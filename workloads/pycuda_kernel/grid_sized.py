"""Step 1: a grid that fills the GPU. The kernel becomes a grid-stride loop launched with 8
blocks of 256 threads per SM; the copies stay as they were. Predicted: the kernel drops to about
2 GiB / device bandwidth (~0.5 ms), and the call is then all copies."""
from workloads.pycuda_kernel import kernels
from workloads.pycuda_kernel.baseline import Baseline


class GridSized(Baseline):
    name = "grid_sized"
    summary = "grid-stride kernel with a grid that fills every SM; copies unchanged"

    def setup(self) -> None:
        self.grid = kernels.filling_grid()
        super().setup()


VARIANT = GridSized
