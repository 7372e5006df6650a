"""Step 3: fewer candidates, and cheap ones, for the neighbour passes (on top of ``fused``).

Why ``get_acceleration`` (the Warp guide's hot kernel) costs what it does, counted before any
profile (the ncu page of the baseline confirms or refutes it): each thread runs its candidate loop
~108 times at 62.5k particles, and 96% of those candidates are not neighbours. Counted on the
starting column with :func:`workloads.warp_sph.common.candidate_count`:
108.0 candidates per particle with the example's 25^3-bucket grid (the 100-cell-high column folds
onto itself 4 times: cells 20 units apart share a bucket), 25.2 with one bucket per box cell,
3.9 points within ``h`` (self included). Two changes, both aimed at that waste:

1. the hash grid gets one bucket per cell of the 80^3 box (100^3 buckets): no folded cells, so
   4.3x fewer candidates in ``compute_density`` and ``get_acceleration``. Cost: the build clears
   two 4 MB cell arrays per substep instead of two 62.5 kB ones;
2. ``get_acceleration`` (``kernels_pruned.py``) rejects a candidate on ``|r|^2 < h^2`` before it
   loads the candidate's velocity and density; a neighbour takes one square root, not two.

``compute_density`` keeps the example's code, so its change isolates the grid's effect.

Prediction: the candidate loops are latency-bound chains of dependent loads (``point_ids`` then
the candidate's data, all L2-resident: 1.75 MB of particle data against a 50 MB L2), so their time
follows the number of candidates: ``compute_density`` ~3.5-4.3x faster; ``get_acceleration``
more than that (5x or better: per rejected candidate one load instead of three, no square roots
or divisions), each build ~2-3 µs slower (8 MB of memsets); ncu should show executed
instructions (``smsp__inst_executed.sum``) and global load requests
(``l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum``) of ``get_acceleration`` falling by ~5x or
more. Should nvcc already sink the baseline's neighbour loads into the ``d < h`` branch (ncu's SASS
view of ``get_acceleration`` shows whether it does), the kernel's gain beyond ``compute_density``'s
comes from the square roots and divisions alone. Positions differ from ``fused`` by float32
rounding only (same neighbours, different summation order and arithmetic).
"""
from workloads.warp_sph.fused import Fused


class Pruned(Fused):
    name = "pruned"
    summary = "fused + one grid bucket per box cell and get_acceleration rejecting candidates on |r|^2 first"
    grid_covers_box = True

    def kernel_modules(self) -> list:
        from workloads.warp_sph import kernels_pruned  # imports Warp: only after configured_warp() (setup)

        return [*super().kernel_modules(), kernels_pruned]

    def launch_acceleration_on(self, x, v) -> None:
        from workloads.warp_sph import kernels_pruned  # imports Warp: only after configured_warp() (setup)

        p = self.params
        self.wp.launch(kernels_pruned.get_acceleration, dim=self.size,
                       inputs=[self.grid.id, x, v, self.rho, self.a, p.stiffness, p.rest_density,
                               p.gravity, p.pressure_norm, p.viscous_norm, p.h], device=self.device)


VARIANT = Pruned
