"""One empty kernel launch through the CUDA driver API alone (no framework needed): what the
preflight runs under ncu to learn whether Nsight Compute may read the GPU's performance counters.

    ncu --metrics sm__cycles_elapsed.sum python -m workloads.tools.counter_probe
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

# the empty kernel, as PTX: the driver compiles it for whatever GPU is present
PTX = b"""
.version 7.0
.target sm_50
.address_size 64
.visible .entry cookbook_counter_probe()
{
    ret;
}
"""


class DriverError(RuntimeError):
    pass


def launch_once() -> None:
    name = ctypes.util.find_library("cuda") or "libcuda.so.1"
    cuda = ctypes.CDLL(name)

    def check(result: int, what: str) -> None:
        if result != 0:
            raise DriverError(f"{what} failed with CUresult {result}")

    dev, ctx, mod, fn = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda.cuInit(0), "cuInit")
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    check(cuda.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(PTX)), "cuModuleLoadData")
    check(cuda.cuModuleGetFunction(ctypes.byref(fn), mod, b"cookbook_counter_probe"), "cuModuleGetFunction")
    check(cuda.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, None, None, None), "cuLaunchKernel")
    check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")


if __name__ == "__main__":
    try:
        launch_once()
    except (OSError, DriverError) as e:
        print(f"counter_probe: {e}", file=sys.stderr)
        sys.exit(1)
