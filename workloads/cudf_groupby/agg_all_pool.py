"""Step 3: ``agg_all`` on the RMM pool (both steps together).

Prediction: one groupby pass and no cudaMalloc/cudaFree inside the compute ranges: the fastest
step, agg_all's time less its allocation time (0.5-2 ms). With pandas the pool step is skipped.
"""
from workloads.cudf_groupby.agg_all import AggAll


class AggAllPool(AggAll):
    """AggAll's computation; only the allocator differs."""

    name = "agg_all_pool"
    summary = "agg_all with allocations from an RMM pool"
    use_pool = True


VARIANT = AggAllPool
