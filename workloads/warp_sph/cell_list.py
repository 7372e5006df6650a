"""Step 5: the suite's own cell list in place of Warp's hash grid (on top of ``sorted``).

What the hash grid costs per substep, measured (H200 reference, ``pruned``): its build runs cub's
radix sort, four ~11 µs kernels (~45 µs of the ~185 µs substep), plus a point-to-cell kernel,
two 4 MB memsets and a cell-range kernel; every lookup folds cell coordinates with ``% dim``
(~12% of ``get_acceleration``'s samples on the kernel page); and ``sorted`` still pays a gather
after the build. Here the box's cells are counted, not hashed (``kernels_cells.py``):

1. ``count_cells``: each particle's cell (clamped coordinates, no modulo) and its place in that
   cell from one ``atomic_add`` on the cell's count;
2. an exclusive scan of the counts (``wp.utils.array_scan``, cub) gives each cell's first slot;
3. ``scatter_to_cells`` writes positions, velocities and original indices straight to their slots:
   the sort and the reorder of ``sorted`` in one pass;
4. ``density_rows`` and ``acceleration_rows`` walk 9 contiguous runs of slots per particle (a row
   of three cells is one run) with no index indirection: thread ``k`` is slot ``k``.

Floor: the same neighbours and arithmetic as ``pruned``; the build now moves ~10 MB per substep
(4 MB memset, 8 MB scan over 1M+1 cells, ~2 MB of particle data), ~4 µs at HBM rates. The limiter
of the neighbour passes stays latency (62,500 threads, under one wave). Prediction, written before
the measurement: build ~15 µs instead of ~60 µs (memset ~2, count ~3, scan ~6, scatter ~3),
``density_rows`` and ``acceleration_rows`` ~1.3x faster than ``sorted``'s passes (no
``hash_grid_point_id`` load, no modulo, 9 loop setups instead of 27), so the frame ~1.6x faster
than ``sorted`` and ~3x faster than ``baseline``. Positions differ from ``sorted`` by float32
summation order only; the order of particles inside one cell depends on the atomics' order, so
two runs can differ in the last bits.

Measured on an H100 (NVIDIA H100 80GB HBM3; nsys over 3 frames): the frame 7.82 -> 2.37 ms (3.3x
``sorted``, 4.6x ``baseline``'s 10.99 ms, CUDA events). The build as predicted: ``count_cells``
3.0 µs, cub's scan 6.3 µs, ``scatter_to_cells`` 3.7 µs per substep. The passes far beyond the
prediction: ``density_rows`` 11.1 µs against ``compute_density``'s 58.0 (5.2x), ``acceleration_rows``
28.0 µs against 63.0 (2.3x). The kernel pages say why: ``acceleration_rows`` executes 10.2 M warp
instructions where ``get_acceleration`` executed 28.0 M (the hash grid's query, its ``% dim``
folding and the point-id loads were most of the work, not the neighbours), with 48 registers
instead of 59. What is left is latency: 19% achieved occupancy, warps waiting on neighbour loads
(``long_scoreboard`` 33% of samples) and on dependent arithmetic (``wait`` 30%). Block sizes from
32 to 512 change the frame by less than 10% (2.31-2.53 ms): the blocks are not the limit, the
62,500 threads are.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from workloads.contract import Work
from workloads.warp_sph.common import SUBSTEPS, frame_work
from workloads.warp_sph.sorted import Sorted


class CellList(Sorted):
    name = "cell_list"
    summary = "sorted + the suite's cell list: counting sort into box cells, 9 contiguous runs per particle, no hash grid"
    #: threads per block of the two neighbour passes (Warp's default)
    neighbour_block_dim: ClassVar[int] = 256

    def allocate_state(self) -> None:
        super().allocate_state()
        wp, dev, n = self.wp, self.device, self.size
        cells = self.grid_cells()
        # one more entry than cells: the scan's last entry is n, the end of the last cell's run
        self.cell_count = wp.zeros(cells + 1, dtype=wp.int32, device=dev)
        self.cell_start = wp.zeros(cells + 1, dtype=wp.int32, device=dev)
        self.cell_of = wp.empty(n, dtype=wp.int32, device=dev)
        self.rank_in_cell = wp.empty(n, dtype=wp.int32, device=dev)

    def kernel_modules(self) -> list:
        from workloads.warp_sph import kernels_cells  # imports Warp: only after configured_warp() (setup)

        return [*super().kernel_modules(), kernels_cells]

    def sort_into(self, src: tuple, dst: tuple) -> None:
        """Counting sort of the particles in ``src`` into cell order in ``dst``; fills cell_start."""
        from workloads.warp_sph import kernels_cells  # imports Warp: only after configured_warp() (setup)

        wp, dev, n, h = self.wp, self.device, self.size, self.params.h
        dims = self.grid_dims
        x = src[0]
        self.cell_count.zero_()
        wp.launch(kernels_cells.count_cells, dim=n,
                  inputs=[x, h, *dims, self.cell_count, self.cell_of, self.rank_in_cell], device=dev)
        wp.utils.array_scan(self.cell_count, self.cell_start, inclusive=False)
        wp.launch(kernels_cells.scatter_to_cells, dim=n,
                  inputs=[*src, self.cell_of, self.rank_in_cell, self.cell_start, *dst], device=dev)

    def neighbour_passes(self, x, v) -> None:
        from workloads.warp_sph import kernels_cells  # imports Warp: only after configured_warp() (setup)

        wp, dev, n, p = self.wp, self.device, self.size, self.params
        dims = self.grid_dims
        wp.launch(kernels_cells.density_rows, dim=n,
                  inputs=[x, self.cell_start, p.h, *dims, self.rho, p.density_norm],
                  block_dim=self.neighbour_block_dim, device=dev)
        wp.launch(kernels_cells.acceleration_rows, dim=n,
                  inputs=[x, v, self.rho, self.cell_start, p.h, *dims, self.a, p.stiffness, p.rest_density,
                          p.gravity, p.pressure_norm, p.viscous_norm],
                  block_dim=self.neighbour_block_dim, device=dev)

    def substep_into(self, src: tuple, dst: tuple) -> None:
        # the particles move to dst (in cell order) first; the passes and the integration run there
        self.sort_into(src, dst)
        x, v, _ = dst
        self.neighbour_passes(x, v)
        self.launch_integration_on(x, v)

    def forces(self, x: np.ndarray, vel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.x.assign(np.asarray(x, dtype=np.float32))
        self.v.assign(np.asarray(vel, dtype=np.float32))
        self.wp.copy(self.ids, self.ids0)
        self.sort_into((self.x, self.v, self.ids), (self.x_alt, self.v_alt, self.ids_alt))
        self.neighbour_passes(self.x_alt, self.v_alt)
        slots = self.ids_alt.numpy()
        return self.in_original_order(self.rho.numpy(), slots), self.in_original_order(self.a.numpy(), slots)

    def work(self) -> Work:
        return cell_list_frame_work(self.size, self.pairs(), self.grid_cells())

    def teardown(self) -> None:
        super().teardown()
        self.cell_count = self.cell_start = self.cell_of = self.rank_in_cell = None


def cell_list_frame_work(n: int, pairs_within_h: int, grid_cells: int, substeps: int = SUBSTEPS) -> Work:
    """:func:`frame_work`'s passes with this step's build in place of the hash grid's.

    Build per substep: clear the counts (write 4 B per cell), count (read x, write cell and rank),
    scan (read and write 4 B per cell), scatter (read x, v, id, cell, rank; write x, v, id)."""
    vec, idx, cells = 12 * n, 4 * n, 4 * (grid_cells + 1)
    build_r = vec + cells + (2 * vec + 3 * idx)
    build_w = cells + 2 * idx + cells + (2 * vec + idx)
    # the passes read no id array: thread k is slot k
    return frame_work(n, pairs_within_h, grid_cells, substeps, build_bytes=(build_r, build_w),
                      passes_read_ids=False)

VARIANT = CellList
