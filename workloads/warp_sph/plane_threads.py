"""Step 6: three threads per particle in the neighbour passes (on top of ``cell_list``).

The limiter ``cell_list`` leaves, as ncu reports it for the SPH passes at 62,500 particles: the
grid is under one wave (62,500 threads: ~470 per SM of the 2,048 an SM can hold), so each SM has
~15 warps to hide the latency of chains of dependent loads; the warps mostly wait
(``long_scoreboard`` on neighbour positions) while the SMs' pipes idle. More blocks of the same
threads do not help: the work, not the blocks, is short. The change gives the passes three times
the threads: ``density_planes`` and ``acceleration_planes`` (``kernels_cells.py``) run one thread
per (particle, z-plane of its 3 x 3 x 3 cells), each walking 3 runs instead of 9, and add their
partial sums with one atomic per thread (density: one float; acceleration: one ``vec3``, linear in
the force sums, so each plane adds its share over rho_k). ``rho`` and ``a`` are cleared first.

Floor: the same neighbours and arithmetic; per substep 187,500 threads (~1,400 per SM: three
times the warps in flight), 62,500 x 4 more atomics to L2 (~1 MB of traffic, negligible against
the L2's bandwidth). Prediction, written before the measurement: each pass ~2x faster than
``cell_list``'s (latency chains a third as long, three times the warps to overlap them; not 3x:
the atomics and each thread's fixed part, its own cell coordinates and loads, are repeated), the
frame ~1.3x faster than ``cell_list``. Float32 sums of three partial sums: positions differ from
``cell_list`` by rounding only; the atomics' order varies between runs in the last bits.

Measured on an H100 (NVIDIA H100 80GB HBM3): the frame 2.37 -> 2.23 ms (1.06x, CUDA events;
``baseline`` 10.99 ms: 4.9x). Per launch (nsys) ``density_planes`` 9.0 µs against 11.1,
``acceleration_planes`` 23.3 µs against 28.0: 1.2x each, not 2x. ncu on the acceleration pass:
achieved occupancy 44% (was 19%) from 733 blocks instead of 245, but warp instructions rose from
10.2 M to 12.1 M (each thread repeats the particle's own loads and cell arithmetic) and the warps
still wait on loads and dependent arithmetic (``wait`` 29%, ``long_scoreboard`` 28%). The
pipeline's report of the same GPU measures 1.15 ms per frame of GPU idle time between launches
(against 0.72 ms for ``cell_list``): at this size a frame is a chain of short dependent kernels
(count 3.0, scan 6.3, scatter 3.7, integrate 2.5 µs per substep on ``cell_list``), and the gaps
between them now weigh as much as the neighbour passes' gain.
Block sizes 128 and 256 are best (2.14 ms); 32 and 512 lose 3-7%.
"""
from __future__ import annotations

from workloads.warp_sph.cell_list import CellList


class PlaneThreads(CellList):
    name = "plane_threads"
    summary = "cell_list + three threads per particle (one per z-plane) in both neighbour passes"

    def neighbour_passes(self, x, v) -> None:
        from workloads.warp_sph import kernels_cells  # imports Warp: only after configured_warp() (setup)

        wp, dev, n, p = self.wp, self.device, self.size, self.params
        dims = self.grid_dims
        # partial sums are added atomically: both outputs start at zero
        self.rho.zero_()
        self.a.zero_()
        wp.launch(kernels_cells.density_planes, dim=3 * n,
                  inputs=[x, self.cell_start, p.h, *dims, self.rho, p.density_norm],
                  block_dim=self.neighbour_block_dim, device=dev)
        wp.launch(kernels_cells.acceleration_planes, dim=3 * n,
                  inputs=[x, v, self.rho, self.cell_start, p.h, *dims, self.a, p.stiffness, p.rest_density,
                          p.gravity, p.pressure_norm, p.viscous_norm],
                  block_dim=self.neighbour_block_dim, device=dev)


VARIANT = PlaneThreads
