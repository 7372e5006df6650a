"""PyCUDA kernel, from the article "How can PyCUDA GPU kernels be profiled?".

A ``SourceModule`` kernel that doubles a float32 array: 4 bytes read and 4 written per element,
one multiply. The seed times it with ``time.time()`` around the launch and the copy back; the
report puts that host timer beside CUDA events on the same calls to show what it misses
(launches return before the GPU finishes) and what it adds (the copies it wraps).

Recipe steps:
  baseline         the kernel launched as one block of 256 threads; pageable copies in and out
  grid_sized       the same kernel shape with a grid that fills the GPU (grid-stride loop)
  pinned_async     page-locked host buffers, asynchronous copies and launch on a stream
  streams          the arrays in chunks over several streams: copies in both directions overlap
  device_resident  data kept on the device (gpuarray): no copies per call
  vectorized       what ncu showed next: float4 loads and stores

With line information requested (``COOKBOOK_LINEINFO=1``: ``snakemake kernel_page``) the kernels
are compiled with -lineinfo, and a ``#line`` directive maps their lines to ``kernels.py``, so
Nsight Compute's source view shows the CUDA text there.
"""
from workloads.contract import Recipe

RECIPE = Recipe(
    name="pycuda_kernel",
    title="PyCUDA SourceModule kernel",
    seed_document="003",
    framework="pycuda",
    requires=("pycuda",),
    variants=("baseline", "grid_sized", "pinned_async", "streams", "device_resident", "vectorized"),
    # each step improves on the one listed before it, except:
    improves_on=(("device_resident", "pinned_async"),),
    default_size=256 * 1024 * 1024,
    size_meaning="number of float32 elements (256 Mi = 1 GiB)",
    # place in the reports and the index
    order=30,
    # every step builds the one SourceModule (nvcc) in setup
    compiles_in_setup=("baseline", "grid_sized", "pinned_async", "streams", "device_resident", "vectorized"),
)
