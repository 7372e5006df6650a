"""Baseline: ``(a - b) ** 2`` as written, on CuPy's default allocator.

Two elementwise kernels per call (subtract, then power) and a temporary the
size of an input: 5 passes over n^2 float64 values instead of the 3 the
operation needs. CuPy's default memory pool caches freed blocks, so cudaMalloc
shows up only while the pool grows (the first calls of a cold process).
"""
from workloads.cupy_sqdiff.common import SquaredDifference


class Baseline(SquaredDifference):
    name = "baseline"
    summary = "(a - b) ** 2 with CuPy's default allocator: two kernels and a temporary per call"

    def compute(self, a, b):
        return (a - b) ** 2


VARIANT = Baseline
