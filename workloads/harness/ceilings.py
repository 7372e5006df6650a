"""Measure the device's ceilings in the same pipeline run as the workloads.

    python -m workloads.harness.ceilings --output results/captures/ceilings.json

Datasheet numbers are leads; reports compare each variant with what this card
delivered today:

* ``d2d_copy``: device-to-device cudaMemcpy of a large buffer, counting bytes
  read plus bytes written (the usual STREAM-copy convention);
* ``h2d_pinned`` / ``d2h_pinned``: copies between pinned host memory and the device;
* ``fp64_fma``: float64 FMA throughput of a register-only kernel (two FLOPs per FMA), the
  ceiling for float64 arithmetic;
* ``fp32_fma``: the same kernel in float32 (``fmaf``), the ceiling for float32 arithmetic off the
  tensor cores;
* ``fp16_gemm``: a dense 16-bit matrix multiply through cuBLAS (CuPy float16 ``matmul`` of two
  8192 x 8192 matrices, float32 accumulation, 2 n^3 FLOPs), the ceiling for bf16/fp16 tensor-core
  work. CuPy has no bfloat16; on Hopper the dense fp16 and bf16 tensor-core rates are the same;
* ``bf16_gemm``: the same product as bfloat16 in, float32 out, through ``cublasGemmEx`` (what XLA
  asks cuBLAS for in a bf16 dot with float32 accumulation): the like-for-like reference of the JAX
  recipe's bf16 step (cuBLAS picks its kernel per type, and the fp16 pick can be slower);
* ``tf32_gemm``: the same product in float32 with TF32 inputs (``cublasGemmEx``,
  ``CUBLAS_COMPUTE_32F_FAST_TF32``), on the JAX recipe's tf32 inputs ``(arange % 7) / 7``: the
  ceiling for TF32 tensor-core work.
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

import numpy as np

from workloads import annotate

from workloads.harness import provenance
from workloads.harness.runner import at_least, write_json_atomic
from workloads.jax_matmul.common import tf32_tolerance


def _median_time_ms(launch: Callable[[], None], warmup: int, repeats: int) -> tuple[float, float]:
    import cupy

    for _ in range(warmup):
        launch()
    cupy.cuda.get_current_stream().synchronize()
    times = []
    for _ in range(repeats):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    q1, med, q3 = np.percentile(times, [25, 50, 75])
    return float(med), float(q3 - q1)


# Eight independent FMA chains per thread keep the FP64 (or FP32) pipes busy; nothing touches
# memory but the final store, which the compiler needs to keep the loop.
_FMA_TEMPLATE = r"""
extern "C" __global__ void @NAME@(@T@ *out, @T@ a, @T@ b, int iters)
{
    @T@ x0 = threadIdx.x * (@T@)1e-9, x1 = x0 + (@T@)1e-9, x2 = x0 + (@T@)2e-9, x3 = x0 + (@T@)3e-9;
    @T@ x4 = x0 + (@T@)4e-9, x5 = x0 + (@T@)5e-9, x6 = x0 + (@T@)6e-9, x7 = x0 + (@T@)7e-9;
    for (int i = 0; i < iters; ++i) {
        x0 = @FMA@(x0, a, b); x1 = @FMA@(x1, a, b); x2 = @FMA@(x2, a, b); x3 = @FMA@(x3, a, b);
        x4 = @FMA@(x4, a, b); x5 = @FMA@(x5, a, b); x6 = @FMA@(x6, a, b); x7 = @FMA@(x7, a, b);
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
}
"""
FMA_CHAINS = 8
#: ceiling name -> (C type, FMA function, NumPy dtype name)
_FMA_KINDS = {"fp64_fma": ("double", "fma", "float64"), "fp32_fma": ("float", "fmaf", "float32")}


def fma_source(name: str) -> str:
    """The FMA kernel of one ceiling (``fp64_fma`` or ``fp32_fma``)."""
    ctype, fma, _ = _FMA_KINDS[name]
    return _FMA_TEMPLATE.replace("@NAME@", name).replace("@FMA@", fma).replace("@T@", ctype)


def _measure_fma(name: str, warmup: int, repeats: int, iters: int) -> dict:
    import cupy

    dtype = getattr(cupy, _FMA_KINDS[name][2])
    kernel = cupy.RawKernel(fma_source(name), name)
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    blocks, threads = sms * 16, 256
    out = cupy.empty(blocks * threads, dtype=dtype)
    args = (out, dtype(0.999999), dtype(1e-7), cupy.int32(iters))
    with annotate.phase("ceilings", name, "measure"):
        med, iqr = _median_time_ms(lambda: kernel((blocks,), (threads,), args), warmup, repeats)
    flops = 2 * FMA_CHAINS * iters * blocks * threads
    return {"flops": flops, "median_ms": med, "iqr_ms": iqr, "tflop_per_s": flops / med / 1e9}


def measure_fp64(warmup: int, repeats: int, iters: int = 4096) -> dict:
    return _measure_fma("fp64_fma", warmup, repeats, iters)


def measure_fp32(warmup: int, repeats: int, iters: int = 4096) -> dict:
    return _measure_fma("fp32_fma", warmup, repeats, iters)


#: values of the GEMM's inputs: arange % 7, the jax_matmul recipe's float inputs. A tensor core's
#: power draw, and so its clock, depends on the bits it multiplies (on an H200, bf16 8192^3 ran
#: ~10% faster on zeros than on random data), so the ceiling multiplies what the recipe multiplies.
GEMM_INPUT_MODULUS = 7


def _cupy_compute_type(cupy) -> str | None:
    """CuPy's compute type for float16 matmul (its default accumulates in float32), if it says."""
    try:
        from cupy._core import _routines_linalg as linalg

        return str(linalg.compute_type_to_str(linalg.get_compute_type(cupy.float16)))
    except (ImportError, AttributeError):  # a private API: record nothing rather than guess
        return None


def measure_fp16_gemm(warmup: int, repeats: int, n: int = 8192) -> dict:
    """Dense float16 matmul of two n x n matrices through CuPy (cuBLAS), timed with CUDA events."""
    import cupy

    a = (cupy.arange(n * n, dtype=cupy.int32) % GEMM_INPUT_MODULUS).astype(cupy.float16).reshape(n, n)
    b = a.copy()
    c = cupy.empty((n, n), dtype=cupy.float16)
    with annotate.phase("ceilings", "fp16_gemm", "measure"):
        med, iqr = _median_time_ms(lambda: cupy.matmul(a, b, out=c), warmup, repeats)
    flops = 2 * n ** 3
    return {"flops": flops, "median_ms": med, "iqr_ms": iqr, "tflop_per_s": flops / med / 1e9,
            "n": n, "dtype": "float16", "inputs": f"arange(n*n) % {GEMM_INPUT_MODULUS}",
            "cupy_compute_type": _cupy_compute_type(cupy)}


# cuBLAS/CUDA enum values (cublas_api.h, library_types.h)
_CUDA_R_32F, _CUDA_R_16BF = 0, 14
_CUBLAS_COMPUTE_32F = 68
_CUBLAS_COMPUTE_32F_FAST_TF32 = 77
_CUBLAS_OP_N = 0
_CUBLAS_GEMM_DEFAULT = -1


def gemm_spot_values(n: int, rows: Sequence[int], cols: Sequence[int], divisor: int = 1) -> np.ndarray:
    """C[i, j] of C = A @ A in float64 at the given (i, j) pairs, A = float32((arange(n*n) % 7) / divisor)
    reshaped n x n (divisor 1: the small integers, and the products are exact)."""
    k = np.arange(n, dtype=np.int64)

    def values(flat: np.ndarray) -> np.ndarray:
        return ((flat % GEMM_INPUT_MODULUS).astype(np.float32) / np.float32(divisor)).astype(np.float64)

    return np.array([float(np.dot(values(i * n + k), values(k * n + j))) for i, j in zip(rows, cols)])


def _spot_indices(n: int) -> tuple[list[int], list[int]]:
    """(rows, cols) of the products the GEMM ceilings check: a wrong operand order or type would still run."""
    return [0, 1, n // 2, n - 1], [0, n - 1, 3, n - 2]


def _time_gemm_ex(name: str, a, in_type: int, compute_type: int, n: int, warmup: int, repeats: int):
    """Time C = A @ A through cublasGemmEx (float32 C) and return (median ms, IQR ms, C at the spot indices)."""
    import cupy
    from cupy.cuda import cublas, device

    c = cupy.empty((n, n), dtype=cupy.float32)
    handle = device.get_cublas_handle()
    alpha, beta = np.array(1.0, dtype=np.float32), np.array(0.0, dtype=np.float32)

    def launch() -> None:
        # row-major C = A @ B is column-major C^T = B^T A^T: B's pointer goes first (here B = A)
        cublas.gemmEx(handle, _CUBLAS_OP_N, _CUBLAS_OP_N, n, n, n, alpha.ctypes.data,
                      a.data.ptr, in_type, n, a.data.ptr, in_type, n, beta.ctypes.data,
                      c.data.ptr, _CUDA_R_32F, n, compute_type, _CUBLAS_GEMM_DEFAULT)

    with annotate.phase("ceilings", name, "measure"):
        med, iqr = _median_time_ms(launch, warmup, repeats)
    rows, cols = _spot_indices(n)
    got = cupy.asnumpy(c[cupy.array(rows), cupy.array(cols)]).astype(np.float64)
    return med, iqr, got


def measure_bf16_gemm(warmup: int, repeats: int, n: int = 8192) -> dict:
    """bfloat16 inputs, float32 output and accumulation: cublasGemmEx as XLA calls it for a bf16 dot
    with preferred_element_type=float32. CuPy has no bfloat16 dtype, so the operands are uint16
    arrays holding bfloat16 bits (the top half of float32's: exact for these small integers)."""
    import cupy

    vals = (cupy.arange(n * n, dtype=cupy.int32) % GEMM_INPUT_MODULUS).astype(cupy.float32)
    a = (vals.view(cupy.uint32) >> 16).astype(cupy.uint16).reshape(n, n)
    del vals
    med, iqr, got = _time_gemm_ex("bf16_gemm", a, _CUDA_R_16BF, _CUBLAS_COMPUTE_32F, n, warmup, repeats)
    want = gemm_spot_values(n, *_spot_indices(n))
    if not np.array_equal(got, want):
        raise RuntimeError(f"bf16_gemm: cublasGemmEx gave {got.tolist()} where {want.tolist()} is exact")
    flops = 2 * n ** 3
    return {"flops": flops, "median_ms": med, "iqr_ms": iqr, "tflop_per_s": flops / med / 1e9,
            "n": n, "dtype": "bfloat16 in, float32 out (CUBLAS_COMPUTE_32F)",
            "inputs": f"arange(n*n) % {GEMM_INPUT_MODULUS}"}


#: the TF32 GEMM's inputs are the integers divided by this in float32, as the JAX recipe's tf32 step's
#: (their full 24-bit significands are what TF32 rounds, and what the tensor cores draw power on)
TF32_INPUT_DIVISOR = 7


def measure_tf32_gemm(warmup: int, repeats: int, n: int = 8192) -> dict:
    """float32 inputs and output, TF32 tensor-core math: cublasGemmEx with CUBLAS_COMPUTE_32F_FAST_TF32
    (what XLA asks cuBLAS for in a float32 dot whose algorithm allows TF32)."""
    import cupy

    a = ((cupy.arange(n * n, dtype=cupy.int32) % GEMM_INPUT_MODULUS).astype(cupy.float32)
         / cupy.float32(TF32_INPUT_DIVISOR)).reshape(n, n)
    med, iqr, got = _time_gemm_ex("tf32_gemm", a, _CUDA_R_32F, _CUBLAS_COMPUTE_32F_FAST_TF32, n, warmup, repeats)
    # TF32 is not exact on these inputs: the products within the TF32 bound of an n-term dot product
    # (a wrong operand order or type would be off by far more)
    want = gemm_spot_values(n, *_spot_indices(n), divisor=TF32_INPUT_DIVISOR)
    worst = float(np.max(np.abs(got - want) / want))
    if not worst <= tf32_tolerance(n):
        raise RuntimeError(f"tf32_gemm: cublasGemmEx gave {got.tolist()} where {want.tolist()} is exact "
                           f"(relative error {worst:.2e} over TF32's bound {tf32_tolerance(n):.2e})")
    flops = 2 * n ** 3
    return {"flops": flops, "median_ms": med, "iqr_ms": iqr, "tflop_per_s": flops / med / 1e9,
            "n": n, "dtype": "float32 in and out, TF32 math (CUBLAS_COMPUTE_32F_FAST_TF32)",
            "inputs": f"(arange(n*n) % {GEMM_INPUT_MODULUS}) / {TF32_INPUT_DIVISOR} in float32",
            "spot_relative_error": worst}


def measure(nbytes: int, warmup: int, repeats: int) -> dict:
    import cupy
    from cupy.cuda import runtime

    stream = cupy.cuda.get_current_stream()
    src = cupy.empty(nbytes, dtype=cupy.uint8)
    dst = cupy.empty(nbytes, dtype=cupy.uint8)
    src.fill(1)
    host = cupy.cuda.alloc_pinned_memory(nbytes)
    results = {}

    def entry(med_ms: float, iqr_ms: float, counted_bytes: int) -> dict:
        return {"bytes": counted_bytes, "median_ms": med_ms, "iqr_ms": iqr_ms,
                "gb_per_s": counted_bytes / med_ms / 1e6}

    with annotate.phase("ceilings", "d2d_copy", "measure"):
        med, iqr = _median_time_ms(
            lambda: runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes,
                                        runtime.memcpyDeviceToDevice, stream.ptr), warmup, repeats)
    results["d2d_copy"] = entry(med, iqr, 2 * nbytes)  # read + write
    with annotate.phase("ceilings", "h2d_pinned", "measure"):
        med, iqr = _median_time_ms(
            lambda: runtime.memcpyAsync(dst.data.ptr, host.ptr, nbytes,
                                        runtime.memcpyHostToDevice, stream.ptr), warmup, repeats)
    results["h2d_pinned"] = entry(med, iqr, nbytes)
    with annotate.phase("ceilings", "d2h_pinned", "measure"):
        med, iqr = _median_time_ms(
            lambda: runtime.memcpyAsync(host.ptr, src.data.ptr, nbytes,
                                        runtime.memcpyDeviceToHost, stream.ptr), warmup, repeats)
    results["d2h_pinned"] = entry(med, iqr, nbytes)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workloads.harness.ceilings", description=__doc__.split("\n")[0])
    p.add_argument("--output", required=True)
    p.add_argument("--bytes", type=at_least(1), default=2 << 30, help="buffer size (default 2 GiB: far beyond L2)")
    p.add_argument("--warmup", type=at_least(0), default=3)
    p.add_argument("--repeats", type=at_least(1), default=20)
    p.add_argument("--gemm-size", type=at_least(1), default=8192, help="side of the GEMMs' square matrices")
    args = p.parse_args(argv)
    ceilings = measure(args.bytes, args.warmup, args.repeats)
    ceilings["fp64_fma"] = measure_fp64(args.warmup, args.repeats)
    ceilings["fp32_fma"] = measure_fp32(args.warmup, args.repeats)
    ceilings["fp16_gemm"] = measure_fp16_gemm(args.warmup, args.repeats, args.gemm_size)
    ceilings["bf16_gemm"] = measure_bf16_gemm(args.warmup, args.repeats, args.gemm_size)
    ceilings["tf32_gemm"] = measure_tf32_gemm(args.warmup, args.repeats, args.gemm_size)
    record = {"ceilings": ceilings, "buffer_bytes": args.bytes, "provenance": provenance.collect(("cupy",))}
    for k, v in ceilings.items():
        rate = f"{v['gb_per_s']:8.1f} GB/s" if "gb_per_s" in v else f"{v['tflop_per_s']:8.1f} TFLOP/s"
        print(f"ceilings: {k:11s} {rate} (median {v['median_ms']:.3f} ms)")
    write_json_atomic(args.output, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
