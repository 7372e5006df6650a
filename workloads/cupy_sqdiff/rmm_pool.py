"""Step 1 (the blog's): the same expression with allocations served from an RMM pool.

The pool takes one large block from cudaMalloc at setup and sub-allocates from
it, so no call in the compute phase waits on cudaMalloc/cudaFree. Kernels and
bytes moved are unchanged, so steady-state time should not move; what moves is
allocation time in a cold process.
"""
from workloads.cupy_sqdiff.common import SquaredDifference, use_rmm_pool


class RmmPool(SquaredDifference):
    name = "rmm_pool"
    summary = "baseline expression, allocations from an RMM pool"

    def configure_allocator(self) -> None:
        use_rmm_pool()

    def compute(self, a, b):
        return (a - b) ** 2


VARIANT = RmmPool
