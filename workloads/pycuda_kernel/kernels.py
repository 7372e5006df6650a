"""The CUDA C source and its compilation (with -lineinfo for Nsight Compute's source view).

The seed's kernel doubles ``data`` in place; here it writes to a separate output, so that
repeated calls compute the same thing and every call can be checked.
"""
from __future__ import annotations

SOURCE = r"""
// One block walks the whole array: the seed-style launch that uses one SM of many.
__global__ void scale_one_block(float *out, const float *in, unsigned long long n)
{
    for (unsigned long long i = threadIdx.x; i < n; i += blockDim.x) {
        out[i] = 2.0f * in[i];
    }
}

// Grid-stride loop: any grid size covers the array; the launch picks one that fills the GPU.
__global__ void scale_grid_stride(float *out, const float *in, unsigned long long n)
{
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        out[i] = 2.0f * in[i];
    }
}
"""

THREADS = 256
_module = None


def module():
    global _module
    if _module is None:
        from pycuda.compiler import SourceModule

        from workloads.pycuda_backend import driver

        driver()
        _module = SourceModule(SOURCE, options=["-lineinfo"], no_extern_c=False)
    return _module


def filling_grid() -> int:
    """Blocks for the grid-stride kernel: 8 resident blocks of 256 threads per SM fill an SM."""
    from workloads.pycuda_backend import driver

    drv = driver()
    sms = drv.Context.get_device().get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
    return sms * 8
