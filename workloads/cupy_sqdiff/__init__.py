"""CuPy squared difference, from the RAPIDS blog post on NVTX and Nsight Systems for PyData.

``(a - b) ** 2`` over two float64 matrices. Each element needs two 8-byte reads
and one 8-byte write and two FLOPs (subtract, multiply): 1/12 FLOP per byte, so
the floor is set by memory bandwidth alone.

Recipe steps:
  baseline    CuPy as a user writes it: two kernels and a temporary per call
  rmm_pool    the same on an RMM pool (what the blog does against cudaMalloc)
  fused_pow   @cupy.fuse of the expression as written: one kernel, but a float64 pow() each
  fused       @cupy.fuse of d = x - y; d * d: one kernel at the floor of 24 bytes per element
  fused_pool  fused on the RMM pool
  raw_kernel  the same arithmetic as a hand-written CUDA kernel (cupy.RawKernel), 16-byte loads
"""
from workloads.contract import Recipe

RECIPE = Recipe(
    name="cupy_sqdiff",
    title="CuPy squared difference",
    seed_document="000",
    framework="cupy",
    requires=("cupy", "rmm"),
    variants=("baseline", "rmm_pool", "fused_pow", "fused", "fused_pool", "raw_kernel"),
    # each step improves on the one listed before it, except:
    improves_on=(
        ("fused_pow", "baseline"),
        ("raw_kernel", "fused"),
    ),
    default_size=4096,
    size_meaning="matrix side n: two n x n float64 inputs",
    # place in the reports and the index
    order=10,
)
