"""Step 2: ``split_agg`` with cuDF's memory from an RMM pool (the blog's pool allocator).

``rmm.reinitialize(pool_allocator=True, initial_pool_size=64 B x rows)`` in setup, before cuDF
allocates: one cudaMalloc of 3.2 GB at 50 M rows, then every buffer of every pass is carved from it.
Kernels and bytes are unchanged.

Prediction: no cudaMalloc/cudaFree inside the compute ranges (split_agg has some 10-20 pairs per
pass), so each call is shorter by split_agg's allocation time (0.5-2 ms per pass, three passes).
With pandas (``COOKBOOK_DATAFRAME=pandas``) the pool step is skipped: pandas uses host memory.
"""
from workloads.cudf_groupby.split_agg import SplitAgg


class SplitAggPool(SplitAgg):
    """SplitAgg's computation; only the allocator differs."""

    name = "split_agg_pool"
    summary = "split_agg with allocations from an RMM pool"
    use_pool = True


VARIANT = SplitAggPool
