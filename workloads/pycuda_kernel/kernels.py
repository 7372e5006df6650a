"""The CUDA C source and its compilation.

The seed's kernel doubles ``data`` in place; here it writes to a separate output, so that
repeated calls compute the same thing and every call can be checked.

The source is compiled with a ``#line`` directive in front (workloads/cuda_source.py says why), so
that with ``-lineinfo`` the line table names this file, at the lines where the CUDA text below is:
Nsight Compute imports this file and its Source page shows these lines. ``-lineinfo`` itself is
added only when line information is requested (``COOKBOOK_LINEINFO=1``, the kernel-page run);
it changes no instruction, only the debug information beside them.
"""
from __future__ import annotations

from workloads import cuda_source
from workloads.pycuda_backend import driver

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

// The same, 16 bytes per load and store (float4): a quarter of the instructions per byte.
// cudaMalloc'd pointers are 256-byte aligned; the last n % 4 elements are done one by one.
__global__ void scale_vec4(float *out, const float *in, unsigned long long n)
{
    const unsigned long long n4 = n / 4;
    const float4 *in4 = reinterpret_cast<const float4 *>(in);
    float4 *out4 = reinterpret_cast<float4 *>(out);
    const unsigned long long gid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = gid; i < n4; i += stride) {
        float4 v = in4[i];
        v.x *= 2.0f; v.y *= 2.0f; v.z *= 2.0f; v.w *= 2.0f;
        out4[i] = v;
    }
    const unsigned long long t = n4 * 4 + gid;
    if (t < n) {
        out[t] = 2.0f * in[t];
    }
}
"""

THREADS = 256
_module = None


def module():
    global _module
    if _module is None:
        from pycuda.compiler import SourceModule

        drv = driver()
        source = cuda_source.with_line_directive(SOURCE, __file__)
        options = list(cuda_source.lineinfo_options())
        # no_extern_c=False: PyCUDA wraps the text in `extern "C" { ... }`, so the kernels keep
        # their CUDA names (what ncu -k and the kernel pages match)
        try:
            _module = SourceModule(source, options=options, no_extern_c=False)
        except drv.CompileError:
            raise
        except drv.Error:
            # PyCUDA writes a cache entry in place: a run on another GPU that shares the pipeline's
            # compile cache can read a cubin still being written. Compile this one afresh
            _module = SourceModule(source, options=options, no_extern_c=False, cache_dir=False)
    return _module


def filling_grid() -> int:
    """Blocks for the grid-stride kernel: 8 resident blocks of 256 threads per SM fill an SM."""
    drv = driver()
    sms = drv.Context.get_device().get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
    return sms * 8
