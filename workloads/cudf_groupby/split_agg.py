"""Baseline: ``count()``, ``mean()`` and ``sum()`` one by one, combined into one frame (the blog's
split-agg).

Each call is a full libcudf ``groupby::aggregate``: hash every key into a fresh hash set, fill
per-row intermediates, aggregate with atomics, gather the 10,000 groups. Three passes over the key
column (two over the values; count needs none), three times each pass's fixed costs, and a fourth
frame built from the three results (aligned on the key). Reusing one ``GroupBy`` object saves
nothing: libcudf's hash groupby keeps no table between calls.

Prediction (50 M rows, H200): about 112 B per row of device traffic (44 mean + 40 sum + 28 count),
three groupby passes in the NVTX trace (three libcudf ``aggregate`` ranges), 4-8 ms per call, some
10-20 cudaMalloc/cudaFree pairs per pass on RMM's default resource. Declared work is one pass
(see common.py), so this step shows at 3x its floor at the very best.
"""
from workloads.cudf_groupby.common import GroupbyVariant


def split_aggregations(lib, grouped):
    """Three groupby aggregations, then one frame of the three results."""
    count = grouped.count()
    mean = grouped.mean()
    total = grouped.sum()
    return lib.DataFrame({"count": count, "mean": mean, "sum": total})


class SplitAgg(GroupbyVariant):
    name = "split_agg"
    summary = "count(), mean(), sum() one by one, combined into one frame: three groupby passes"

    def compute(self, lib, grouped):
        return split_aggregations(lib, grouped)


VARIANT = SplitAgg
