"""Measure the device's ceilings in the same pipeline run as the workloads.

    python -m workloads.tools.ceilings --output results/captures/ceilings.json

Datasheet numbers are leads; reports compare each variant with what this card
delivered today:

* ``d2d_copy``: device-to-device cudaMemcpy of a large buffer, counting bytes
  read plus bytes written (the usual STREAM-copy convention);
* ``h2d_pinned`` / ``d2h_pinned``: copies between pinned host memory and the device;
* ``fp64_fma``: float64 FMA throughput of a register-only kernel (two FLOPs per FMA), the
  ceiling for float64 arithmetic.
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

import numpy as np

from workloads import annotate, provenance
from workloads.runner import write_json_atomic


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


# Eight independent FMA chains per thread keep the FP64 pipes busy; nothing touches memory
# but the final store, which the compiler needs to keep the loop.
_FMA_SOURCE = r"""
extern "C" __global__ void fp64_fma(double *out, double a, double b, int iters)
{
    double x0 = threadIdx.x * 1e-9, x1 = x0 + 1e-9, x2 = x0 + 2e-9, x3 = x0 + 3e-9;
    double x4 = x0 + 4e-9, x5 = x0 + 5e-9, x6 = x0 + 6e-9, x7 = x0 + 7e-9;
    for (int i = 0; i < iters; ++i) {
        x0 = fma(x0, a, b); x1 = fma(x1, a, b); x2 = fma(x2, a, b); x3 = fma(x3, a, b);
        x4 = fma(x4, a, b); x5 = fma(x5, a, b); x6 = fma(x6, a, b); x7 = fma(x7, a, b);
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
}
"""
FMA_CHAINS = 8


def measure_fp64(warmup: int, repeats: int, iters: int = 4096) -> dict:
    import cupy

    kernel = cupy.RawKernel(_FMA_SOURCE, "fp64_fma")
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    blocks, threads = sms * 16, 256
    out = cupy.empty(blocks * threads, dtype=cupy.float64)
    args = (out, cupy.float64(0.999999), cupy.float64(1e-7), cupy.int32(iters))
    with annotate.phase("ceilings", "fp64_fma", "measure"):
        med, iqr = _median_time_ms(lambda: kernel((blocks,), (threads,), args), warmup, repeats)
    flops = 2 * FMA_CHAINS * iters * blocks * threads
    return {"flops": flops, "median_ms": med, "iqr_ms": iqr, "tflop_per_s": flops / med / 1e9}


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
    p = argparse.ArgumentParser(prog="python -m workloads.tools.ceilings", description=__doc__.split("\n")[0])
    p.add_argument("--output", required=True)
    p.add_argument("--bytes", type=int, default=2 << 30, help="buffer size (default 2 GiB: far beyond L2)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args(argv)
    ceilings = measure(args.bytes, args.warmup, args.repeats)
    ceilings["fp64_fma"] = measure_fp64(args.warmup, args.repeats)
    record = {"ceilings": ceilings, "buffer_bytes": args.bytes, "provenance": provenance.collect(("cupy",))}
    for k, v in ceilings.items():
        rate = f"{v['gb_per_s']:8.1f} GB/s" if "gb_per_s" in v else f"{v['tflop_per_s']:8.1f} TFLOP/s"
        print(f"ceilings: {k:11s} {rate} (median {v['median_ms']:.3f} ms)")
    write_json_atomic(args.output, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
