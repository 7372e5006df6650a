"""Step 3: the fused kernel on the RMM pool (both steps together)."""
from workloads.cupy_sqdiff.common import SquaredDifference, use_rmm_pool
from workloads.cupy_sqdiff.fused import squared_diff_fused


class FusedPool(SquaredDifference):
    name = "fused_pool"
    summary = "fused kernel with allocations from an RMM pool"

    def configure_allocator(self) -> None:
        use_rmm_pool()

    def compute(self, a, b):
        return squared_diff_fused(a, b)


VARIANT = FusedPool
