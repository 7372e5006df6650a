"""Step 2: the three integration kernels fused into one, ``integrate`` (on top of the graph).

Per substep ``apply_bounds`` reads and writes x and v (48 B per particle), ``kick`` reads v and a
and writes v (36 B), ``drift`` reads x and v and writes x (36 B): 120 B per particle and three
graph nodes. ``integrate`` reads x, v, a and writes x, v once: 60 B and one node.

Prediction: at 62.5k particles the three kernels move 7.5 MB per substep, ~2 µs of DRAM time at
~4 TB/s, but each is a launch-sized kernel (245 blocks, a few µs from start to end), so the saving
is about two kernels' durations and two nodes' scheduling per substep: ~4-6 µs, ~0.2 ms per frame
of 40 substeps; small against ``get_acceleration``. Positions stay those of the graph step
(the same float32 operations in the same order; identical on Warp's CPU device).
"""
from workloads.warp_sph.common import SphFrame


class Fused(SphFrame):
    name = "fused"
    summary = "graph + walls, kick and drift fused into one integrate kernel"
    use_graph = True

    def kernel_modules(self) -> list:
        from workloads.warp_sph import kernels, kernels_fused  # imports Warp: only after configured_warp() (setup)

        return [kernels, kernels_fused]

    def launch_integration_on(self, x, v) -> None:
        from workloads.warp_sph import kernels_fused  # imports Warp: only after configured_warp() (setup)

        p = self.params
        self.wp.launch(kernels_fused.integrate, dim=self.size,
                       inputs=[x, v, self.a, p.damping, p.width, p.length, p.dt], device=self.device)


VARIANT = Fused
