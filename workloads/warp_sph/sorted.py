"""Step 4: the particles' data kept in cell order (on top of ``pruned``), the classic SPH step.

What ncu measured on ``pruned``'s ``get_acceleration`` (H200 reference): ~70% of the global
sectors it fetches are excess (UncoalescedGlobalAccess), and ``long_scoreboard`` stalls sit on the
candidates' position loads. The threads already walk the particles in cell order
(``hash_grid_point_id``), but the particles themselves are stored in the starting lattice's order
(z fastest), so the 27 cells a thread visits hold particles scattered over the whole array: each
12-byte position load touches its own 32-byte sector, and neighbouring threads share few lines.

The change: after each substep's integration one more kernel (``kernels_sorted.reorder``) gathers
positions, velocities and the particles' original indices into the order the grid's radix sort
produced (two sets of buffers, used in turn, so the CUDA graph needs no copies back). The next
substep's grid is built on nearly sorted data: a point's candidates then lie in a few contiguous
runs of the arrays, one run per cell, and a warp's 32 particles share most of their cells.
``result()`` puts the positions back in the original order with the carried indices.

Floor: unchanged from ``pruned`` (the same neighbours, the same arithmetic); the limiter stays
latency (62,500 threads, 0.46 waves on an H100/H200), but each dependent load should hit lines
already in L1/L2. Prediction, written before the measurement: ``compute_density`` and
``get_acceleration`` each ~1.5x faster (excess sectors from ~70% to under 30%; L1 hit rate up),
the reorder kernel ~3-4 µs per substep (62.5k x 28 B read and written), so the frame ~1.3x faster
than ``pruned`` (the grid build's radix sort, ~45 µs per substep, is untouched). Positions differ
from ``pruned`` by float32 summation order only.

Measured on an H100 (NVIDIA H100 80GB HBM3, nsys over 3 frames, 120 launches each): the frame
8.02 -> 7.82 ms (1.03x, not 1.3x); ``get_acceleration`` 67.7 -> 63.0 µs and ``compute_density``
59.3 -> 58.0 µs per launch; ``reorder`` 3.2 µs. Why the prediction missed: the starting column is a
lattice numbered z fastest, so in the first frame, where particles have barely moved, the stored
order is already nearly the cells' order. The kernel page of the first substep
(``reports/kernels/warp_sph_sorted_get_acceleration.md``) is the same launch as ``pruned``'s:
identical instructions and hit rates, since no reorder has happened yet (``--config
kernel_launch_skip=39`` pages the frame's last substep instead). Sorting pays when the
particles have mixed; the cost that remains here is the hash grid itself (the next step).
"""
from __future__ import annotations

import numpy as np

from workloads.warp_sph.pruned import Pruned


class Sorted(Pruned):
    name = "sorted"
    summary = "pruned + positions and velocities gathered into cell order after every substep"

    def allocate_state(self) -> None:
        super().allocate_state()
        wp, dev, n = self.wp, self.device, self.size
        # the second set of buffers: substeps read one set and write the other, in turn
        self.x_alt = wp.empty_like(self.x)
        self.v_alt = wp.empty_like(self.v)
        self.ids0 = wp.array(np.arange(n, dtype=np.int32), dtype=wp.int32, device=dev)
        self.ids = wp.empty_like(self.ids0)
        self.ids_alt = wp.empty_like(self.ids0)

    def kernel_modules(self) -> list:
        from workloads.warp_sph import kernels_sorted  # imports Warp: only after configured_warp() (setup)

        return [*super().kernel_modules(), kernels_sorted]

    def restart(self) -> None:
        super().restart()
        self.wp.copy(self.ids, self.ids0)

    def substeps(self) -> None:
        primary = (self.x, self.v, self.ids)
        other = (self.x_alt, self.v_alt, self.ids_alt)
        for s in range(self.params.substeps):
            src, dst = (primary, other) if s % 2 == 0 else (other, primary)
            self.substep_into(src, dst)
        if self.params.substeps % 2:
            # an odd count ends in the other set; copy back so that a frame always ends in x, v, ids
            for a, b in zip(primary, other):
                self.wp.copy(a, b)

    def substep_into(self, src: tuple, dst: tuple) -> None:
        """One substep on the particles in ``src``; their new state lands in ``dst`` in cell order."""
        from workloads.warp_sph import kernels_sorted  # imports Warp: only after configured_warp() (setup)

        x, v, ids = src
        self.grid.build(x, self.params.h)
        self.launch_density_on(x)
        self.launch_acceleration_on(x, v)
        self.launch_integration_on(x, v)
        self.wp.launch(kernels_sorted.reorder, dim=self.size, inputs=[self.grid.id, x, v, ids, *dst],
                       device=self.device)

    def forces(self, x: np.ndarray, vel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # the state given is in original order: slot k holds particle k again
        self.wp.copy(self.ids, self.ids0)
        return super().forces(x, vel)

    def result(self) -> np.ndarray:
        return self.in_original_order(self.x.numpy())

    def in_original_order(self, values: np.ndarray, ids: np.ndarray | None = None) -> np.ndarray:
        """Per-particle ``values`` stored in slot order, back in the particles' original order."""
        slots = self.ids.numpy() if ids is None else ids
        out = np.empty((self.size,) + values.shape[1:], dtype=np.float64)
        out[slots] = values
        return out

    def teardown(self) -> None:
        super().teardown()
        self.x_alt = self.v_alt = self.ids = self.ids_alt = self.ids0 = None


VARIANT = Sorted
