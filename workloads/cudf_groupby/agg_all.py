"""Step 1: one ``agg(["count", "mean", "sum"])`` (the blog's agg-all).

One libcudf ``groupby::aggregate`` with one request of three aggregations. libcudf breaks MEAN into
SUM and COUNT_VALID and keeps one of each, so the single pass computes SUM and COUNT_VALID once
and derives count, mean and sum from them: the work of ``mean()`` alone in the split step.

Prediction (50 M rows, H200): one groupby pass in the NVTX trace, about 44 B per row of device
traffic, 1.5-3 ms per call: about 2.5x faster than ``split_agg`` (2x-3x rather than 3x, because the
split step's count pass reads no values and is its cheapest). Still far above the 0.19 ms floor:
the hash set and per-row intermediates are sized by rows, not by the 10,000 groups.
"""
from workloads.cudf_groupby.common import COLUMNS, GroupbyVariant


def all_aggregations(lib, grouped):
    """One groupby aggregation computing all three results."""
    return grouped.agg(list(COLUMNS))


class AggAll(GroupbyVariant):
    name = "agg_all"
    summary = 'one agg(["count", "mean", "sum"]): a single groupby pass'

    def compute(self, lib, grouped):
        return all_aggregations(lib, grouped)


VARIANT = AggAll
