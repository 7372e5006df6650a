"""Step 4, from what ncu showed on ``device_resident``: DRAM throughput 63% of peak with 97%
occupancy, and its rules pointing at issue-slot use and stalls on L1TEX (memory) operations. Each
thread moves 4 bytes per load; with ``float4`` it moves 16, so the same bytes need a quarter of the
load, store, index and loop instructions. Predicted: the kernel reaches the device-to-device copy
rate (at least 90% of it), ~0.55 ms for 1 GiB in and 1 GiB out.
"""
from workloads.pycuda_kernel.device_resident import DeviceResident


class Vectorized(DeviceResident):
    name = "vectorized"
    summary = "device-resident, float4 loads and stores: 16 bytes per memory instruction instead of 4"
    kernel_name = "scale_vec4"


VARIANT = Vectorized
