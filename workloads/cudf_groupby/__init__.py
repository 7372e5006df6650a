"""cuDF groupby: three aggregations one by one, or one ``agg``, from the NVTX/Nsight blog post (seed 000).

A frame of ``size`` rows: an int64 ``key`` drawn uniformly from 10,000 groups and a float64
``value`` uniform in [0, 100). Each call computes, per group, the count, mean and sum of ``value``
and returns them as one frame (columns ``count``, ``mean``, ``sum``, indexed by key). The blog
shows cuDF's own NVTX ranges: one groupby-aggregate for ``agg(["count", "mean", "sum"])``, three
for ``count()``, ``mean()``, ``sum()``; and that an RMM pool cuts the time cuDF spends allocating.

Recipe steps:
  split_agg       ``g.count()``, ``g.mean()``, ``g.sum()``, combined into one frame: three groupby passes
  agg_all         ``g.agg(["count", "mean", "sum"])``: one pass
  split_agg_pool  split_agg with cuDF's memory from an RMM pool (``rmm.reinitialize(pool_allocator=True)``)
  agg_all_pool    agg_all on the pool

Floor (declared work, the same for every step): the result needs the key and value columns read
once, 16 bytes per row, and the 10,000 x 4 output values written: 800 MB at 50 M rows, 0.19 ms at
the H200's measured 4.2 TB/s. ``split_agg`` reads them three times, so it sits at 3x its floor at
best; every step sits far above it in practice (see the prediction).

Prediction (50 M rows, H200). Ten thousand random keys put more than 128 distinct keys in every
thread block, over libcudf's per-block threshold for its shared-memory groupby, so each pass takes
the global-memory path (cpp/src/groupby/hash in cuDF 26.10): fill a hash set sized for every row
(about 8 B per row), fill a per-row intermediate result per single-pass aggregation (SUM 8 B, COUNT
4 B per row), one kernel that hashes each key, finds its group and adds the row with atomics, then a
scan of the set and a gather of the 10,000 groups. ``mean`` is computed as SUM and COUNT, so
``agg(["count", "mean", "sum"])`` runs exactly what ``mean()`` alone runs: about 44 B per row of
device memory traffic; ``split_agg`` runs 44 + 40 (sum) + 28 (count, no values read) = 112 B per
row. Device traffic alone: 0.5 ms against 1.3 ms; with atomics and each pass's fixed costs (about 20
launches, two or three blocking reads of sizes, Python dispatch) about 1.5-3 ms against 4-8 ms.
Expected ``agg_all`` / ``split_agg`` speed-up: about 2.5x (2x-3x), a "faster" verdict.

Allocation: plain ``import cudf`` leaves RMM's initial memory resource in place,
``CudaMemoryResource`` (RMM 26.x: cpp/include/rmm/mr/per_device_resource.hpp and the Python
``_per_device_mrs`` default): one ``cudaMalloc`` and one ``cudaFree`` (which waits for the device)
per buffer. The newer pooled defaults are elsewhere: ``cudf.pandas`` installs a managed-memory
pool (``CUDF_PANDAS_RMM_MODE``, default ``managed_pool`` where managed memory works) and cudf-polars
a ``CudaAsyncMemoryResource``; plain cuDF changes nothing. A pass allocates 10-20 buffers, four of them 200-400 MB, so the
no-pool steps should show some 10-20 ``cudaMalloc``/``cudaFree`` pairs per pass inside every
compute range, 0.5-2 ms per pass; the pool steps none (a 64 B-per-row pool, 3.2 GB at 50 M rows,
holds the 0.8 GB of inputs and a pass's ~1.2 GB peak), and as much less time. ``import cudf`` also
makes RMM CuPy's allocator, so whatever CuPy allocates goes the same way.
"""
from workloads.contract import Recipe

RECIPE = Recipe(
    name="cudf_groupby",
    title="cuDF groupby: split aggregations or one agg",
    seed_document="000",
    framework="cudf",
    requires=("cudf", "rmm"),
    variants=("split_agg", "agg_all", "split_agg_pool", "agg_all_pool"),
    improves_on=(
        ("agg_all", "split_agg"),
        ("split_agg_pool", "split_agg"),
        ("agg_all_pool", "agg_all"),
    ),
    default_size=50_000_000,
    size_meaning="rows of the frame: an int64 key (10,000 groups) and a float64 value",
    sections=("nvtx",),
    # place in the reports and the index
    order=60,
)
