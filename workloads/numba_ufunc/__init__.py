"""Numba CUDA ufunc, from the KAUST Ibex page "Profiling a CUDA Ufunc written in Python using Nsight Systems".

``f(x) = sqrt(|exp(-sin(x^2)) / (sqrt(|x|) tanh(x))|)`` over 256 Mi float64 values that live in a
host NumPy array. The seed profiled it on a V100: host-to-device copy 37.8% of the time, the
kernel 0.5%, device-to-host copy 62.2%. The kernel is not the problem; the copies are.

Recipe steps:
  baseline         the seed's code: @vectorize(target="cuda") called on a pageable host array
  pinned           pinned host buffers, explicit copies to and from a device array
  streams          chunks on several streams: copies in both directions overlap the kernel
  device_resident  data generated on the GPU and kept there, ufunc with a device out=
  float32          float32 data and float32 math in a @cuda.jit kernel: off the FP64 pipe
  fastmath         the same kernel with fastmath=True: the approximate (MUFU) instructions

Floors (measured in the same run): for host data, the larger of 2 GiB / pinned host-to-device
bandwidth and 2 GiB / pinned device-to-host bandwidth (both directions at once); for device-resident
data, 4 GiB / device bandwidth (2 GiB for the float32 steps, whose values take 4 bytes).
"""
from workloads.contract import Recipe

RECIPE = Recipe(
    name="numba_ufunc",
    title="Numba CUDA ufunc",
    seed_document="002",
    framework="numba",
    requires=("numba", "numba_cuda"),
    variants=("baseline", "pinned", "streams", "device_resident", "float32", "fastmath"),
    # each step improves on the one listed before it
    default_size=256 * 1024 * 1024,
    size_meaning="number of elements, float64 (the seed's 256 Mi = 268435456; float32 in the float32 and "
                 "fastmath steps)",
    seed_split=(("H2D", 37.8), ("kernel", 0.5), ("D2H", 62.2)),
    seed_split_device="V100, KAUST Ibex page",
    # place in the reports and the index
    order=20,
)
