"""Baseline: the example's loop as written, one launch per kernel per substep.

Per substep: ``HashGrid.build`` (Warp's own point-to-cell, radix-sort, memset and cell-range
kernels), then ``compute_density``, ``get_acceleration``, ``apply_bounds``, ``kick``, ``drift``:
five Python ``wp.launch`` calls plus the build's launches, 40 times per frame.

Prediction: at 62.5k particles each small kernel runs for a few µs, so the frame is paced by
the host issuing ~12 CUDA operations per substep from six Python calls (each ``wp.launch`` costs
microseconds of Python), and nsys shows gaps between kernels; the GPU is busy mainly in
``get_acceleration`` and ``compute_density``, which walk ~108 candidates per particle (27 cells x 4
points per bucket: the example's 25^3-bucket grid folds the 100-cell-high column onto itself four
times). The floor from the declared bytes (~0.4 GB per frame) is ~0.1 ms; the neighbour loops are
chains of dependent loads from L2, not a bandwidth stream, so expect the frame far above it.
"""
from workloads.warp_sph.common import SphFrame


class Baseline(SphFrame):
    name = "baseline"
    summary = "the example's loop: grid rebuilt and five kernels launched one by one, every substep"


VARIANT = Baseline
