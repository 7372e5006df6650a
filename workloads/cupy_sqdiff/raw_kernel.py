"""Step 2c: the squared difference as a hand-written CUDA kernel (``cupy.RawKernel``).

What changes against ``fused``: the kernel is ours instead of the one ``cupy.fuse`` generates. Each
thread of a grid that fills the GPU walks the arrays in a grid-stride loop, two elements at a time:
one 16-byte ``double2`` load from each input and one 16-byte store, instead of 8-byte accesses
(half the load, store, index and loop instructions per byte); the last element of an odd count is
done alone. The arithmetic is ``fused``'s, ``d = a - b; d * d`` in float64 (no multiply-add can be
formed from a subtraction followed by a product), so the result equals the float64 reference bit for
bit and the default tolerance of rounding only applies. It gives what ``cupy.fuse`` cannot: compile
options, so the kernel page's run adds ``-lineinfo``, and a ``#line`` directive that points the line
information at this file (workloads/cuda_source.py), so Nsight Compute shows the CUDA text below.

Floor of the measured limiter (DRAM bandwidth): 3 arrays of n² float64 (read 2, write 1), 24 bytes
per element, 6.44 GB at n = 16384: 1.52 ms at the H200's measured 4.23 TB/s device-to-device copy
rate. ``fused`` is already there: 0.99× that floor on the H200 (ncu: DRAM at 91% of peak), 1.02× on
an H100.

PREDICTION (written before the first measurement): the same time as ``fused`` within a few percent
(0.97-1.03×) at 16384: the floor leaves at most 2% to gain, and wider loads cannot move bytes
faster than DRAM does. ncu would show it as ``dram__throughput.avg.pct_of_peak_sustained_elapsed``
(``gpu__dram_throughput`` on the kernel page) at ``fused``'s ~91% of peak, with fewer warp
instructions executed (``smsp__inst_executed.sum``: one load per input and one store per two
elements) and the samples at the subtraction that waits on the loads (``long_scoreboard``).

Measured on an H100 (NVIDIA H100 80GB HBM3, 16384): 2.258 ms per call against ``fused``'s 2.204 ms in
the same session, 0.976x (within the predicted range, on its slow edge); the kernel 2.20 ms under ncu
with DRAM at 87.1% of peak, and 93% of the warp samples on the subtraction waiting for the loads
(``long_scoreboard``): at the DRAM floor, as ``fused`` is. The step's value is the kernel page with
its CUDA text (``reports/kernels/cupy_sqdiff_raw_kernel_cookbook_squared_diff_raw.md``), not speed.
"""
from __future__ import annotations

from workloads import cuda_source
from workloads.contract import WorkloadError
from workloads.cupy_sqdiff.common import SquaredDifference

KERNEL_NAME = "cookbook_squared_diff_raw"
THREADS = 256
#: resident blocks of THREADS per SM: 8 x 256 = 2048 threads, an H100/H200 SM's maximum
BLOCKS_PER_SM = 8

SOURCE = r"""
// out = (a - b)^2 for n float64 values, as a grid-stride loop over pairs: 16-byte loads and
// stores. CuPy's allocations are 256-byte aligned; the host side checks 16 bytes before launching.
extern "C" __global__ void cookbook_squared_diff_raw(const double *__restrict__ a,
                                                     const double *__restrict__ b,
                                                     double *__restrict__ out,
                                                     unsigned long long n)
{
    const unsigned long long pairs = n / 2;
    const double2 *a2 = reinterpret_cast<const double2 *>(a);
    const double2 *b2 = reinterpret_cast<const double2 *>(b);
    double2 *out2 = reinterpret_cast<double2 *>(out);
    const unsigned long long gid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = gid; i < pairs; i += stride) {
        const double2 x = a2[i];
        const double2 y = b2[i];
        double2 d;
        d.x = x.x - y.x;
        d.y = x.y - y.y;
        d.x = d.x * d.x;
        d.y = d.y * d.y;
        out2[i] = d;
    }
    // an odd count leaves one element after the pairs
    if (gid == 0 && (n & 1ULL)) {
        const double d = a[n - 1] - b[n - 1];
        out[n - 1] = d * d;
    }
}
"""

_KERNELS: dict[tuple[str, ...], object] = {}


def raw_kernel():
    """The compiled kernel, built once per set of options (``-lineinfo`` only when line information
    is requested: workloads/cuda_source.py)."""
    options = cuda_source.lineinfo_options()
    if options not in _KERNELS:
        import cupy

        kernel = cupy.RawKernel(cuda_source.with_line_directive(SOURCE, __file__), KERNEL_NAME, options=options)
        # compiled here, in setup, not inside the first timed or profiled call
        kernel.compile()
        _KERNELS[options] = kernel
    return _KERNELS[options]


def filling_grid() -> int:
    import cupy

    return cupy.cuda.Device().attributes["MultiProcessorCount"] * BLOCKS_PER_SM


def squared_diff_raw(kernel, blocks: int, a, b):
    """(a - b)^2 of two C-contiguous float64 arrays of one shape, through ``kernel``."""
    import cupy
    import numpy as np

    if a.shape != b.shape or a.dtype != cupy.float64 or b.dtype != cupy.float64:
        raise WorkloadError(f"workloads/cupy_sqdiff/raw_kernel.py: needs two float64 arrays of one shape, got "
                            f"{a.dtype}{a.shape} and {b.dtype}{b.shape}")
    out = cupy.empty_like(a)
    for what, array in (("a", a), ("b", b), ("out", out)):
        if not array.flags.c_contiguous or array.data.ptr % 16:
            raise WorkloadError(f"workloads/cupy_sqdiff/raw_kernel.py: {what} must be C-contiguous and 16-byte "
                                "aligned for the kernel's double2 accesses")
    kernel((blocks,), (THREADS,), (a, b, out, np.uint64(a.size)))
    return out


class RawKernel(SquaredDifference):
    name = "raw_kernel"
    summary = "hand-written CUDA kernel (cupy.RawKernel): grid-stride loop, 16-byte double2 loads and stores"

    def setup(self) -> None:
        super().setup()
        self.kernel = raw_kernel()
        self.blocks = filling_grid()

    def compute(self, a, b):
        return squared_diff_raw(self.kernel, self.blocks, a, b)

    def teardown(self) -> None:
        super().teardown()
        self.kernel = None


VARIANT = RawKernel
