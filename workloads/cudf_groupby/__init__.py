"""cuDF groupby: three aggregations one by one, or one ``agg``, from the RAPIDS blog post on NVTX
and Nsight Systems for PyData.

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

Synchronization, and why no step removes more of it. Counted per steady call (calls 1 and 2 alike)
in the committed H200 captures (reports/reference/h200/cudf_groupby/<step>/n50000000/nsys.sqlite.gz)
with the suite's readers (analysis.readers.nsys.Trace, analysis.model.breakdown.synchronization), each call placed
under the outermost cuDF NVTX range around it, and inside or outside libcudf's ``aggregate``
(tests/test_cudf_groupby.py counts them again):

* ``split_agg``: 88 synchronizing calls (68 cudaStreamSynchronize, 19 cuStreamSynchronize, 1
  cudaDeviceSynchronize) and 54 cudaMemcpyAsync of 1 to 128 bytes. By range: ``GroupBy.count`` 12
  (7 + 5) and 6 copies, ``GroupBy.agg`` for the mean 12 (8 + 4) and 6, for the sum 11 (7 + 4) and 6,
  ``DataFrame.__init__`` combining the three results on their key 52 (46 + 6) and 36; the last
  cudaDeviceSynchronize is the runner's, closing every profiled call.
* ``agg_all``: 16: 8 cudaStreamSynchronize, 7 cuStreamSynchronize, the runner's 1; 6 copies. Inside
  libcudf's ``aggregate`` range: 10 of them (8 + 2) and all 6 copies: four host-to-device of 8 to
  128 bytes (parameters), a 4-byte read after ``mapping_indices_kernel`` (whether a block overflowed
  its shared-memory hash set: the kernel's global-memory fallback flag) and an 8-byte read after the
  compaction of the hash set (the number of groups, which sizes every output column). That read
  waits for the aggregation kernel: 2.7 ms of the call are spent inside it (of 9.7-9.9 ms in the
  H200 reference captured at 1496c0e, 7.7-8.3 ms in the one at 2f882f2, 10.2-10.9 ms in the one
  before: the rest is host work, which moves between runs while the kernel's share does not). The other 5
  (cuStreamSynchronize) are in cuDF's Python layer, inside ``GroupBy.agg`` and outside libcudf's
  ranges, where it wraps the results. The synchronize calls themselves take 0.29 ms a call.
  ``agg_all_pool``: the same 16 and 6; the pool removes the 19 cudaFree a call, which wait for the
  device too.

What is left is inside cuDF: libcudf's groupby returns columns sized by the number of groups, which
only the device knows after the hash pass, so the host must read it (and the fallback flag, to pick
the next kernels) before it can allocate and launch the rest; no cuDF call takes a known group count
or preallocated outputs. ``agg_all`` already makes one pass and keeps its result on the device until
``result()`` (the transfer phase's ``to_pandas``): there is no host round trip left in the step to
remove, only cuDF's own. Going further means leaving cuDF's groupby: with the 10,000 keys known in
advance, a scatter-add into preallocated device arrays needs no size read-back at all.
"""
from workloads.contract import Recipe

RECIPE = Recipe(
    name="cudf_groupby",
    title="cuDF groupby: split aggregations or one agg",
    seed_document="000",
    framework="cudf",
    requires=("cudf", "rmm"),
    variants=("split_agg", "agg_all", "split_agg_pool", "agg_all_pool"),
    # each step improves on the one listed before it, except:
    improves_on=(
        ("split_agg_pool", "split_agg"),
        ("agg_all_pool", "agg_all"),
    ),
    default_size=50_000_000,
    size_meaning="rows of the frame: an int64 key (10,000 groups) and a float64 value",
    sections=("nvtx",),
    # setup draws the inputs with CuPy's generator, whose kernels CuPy compiles on first use (the
    # H200 reference's cold/warm starts at 1 M rows: setup 5.8-9.1 s with an empty cache, 2.2-3.5 s
    # with a filled one, while the first call took the same either way: the calls compile nothing)
    compiles_in_setup=("split_agg", "agg_all", "split_agg_pool", "agg_all_pool"),
    # place in the reports and the index
    order=60,
)
