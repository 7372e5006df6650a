"""Warp SPH, from NVIDIA Warp's profiling guide (Warp documentation) and Warp's ``example_sph.py``.

A smoothed-particle-hydrodynamics column of particles falling in a box, as in Warp's example
(written anew for the suite): per substep a ``wp.HashGrid`` rebuilt from the positions, then the
kernels ``compute_density``, ``get_acceleration``, ``apply_bounds``, ``kick``, ``drift``; 40
substeps per frame. One call = one frame from the fixed starting state (see ``common.py``).

Recipe steps:
  baseline  the example's loop: one launch per kernel per substep, grid rebuilt every substep
  graph     hash grid reserved once, each frame's 40 substeps captured in one CUDA graph
  fused     graph + walls, kick and drift fused into one ``integrate`` kernel
  pruned    fused + a grid with one bucket per box cell and ``get_acceleration`` rejecting
            non-neighbours on |r|^2 before loading anything else
  sorted    pruned + positions and velocities gathered into the grid's cell order every substep
  cell_list sorted + the suite's own cell list (counting sort, no modulo, 9 contiguous runs per
            particle) in place of Warp's hash grid
  plane_threads  cell_list + three threads per particle (one per z-plane of its neighbourhood)
            in both neighbour passes

Check: positions after the frame against the same frame in float64 Warp (``vec3d``, a float64
``HashGrid``) on the same device from the same starting state; tolerance 2e-6 relative (L2 over
all positions). Measured on Warp's CPU device: float32 against float64 after one frame 1.3e-7 at
62,500 and at 2,000 particles, while a frame without the SPH forces (gravity and walls only) is
off by 3.6e-5 and 1.1e-4: the tolerance sits 15x from each, so the check sees the neighbour
passes even in the first frame, where the lattice barely interacts. The tests also compare each
variant's density and acceleration with float64 on a dense, strongly interacting cluster, and the
variants with each other after five frames (graph and fused: identical to baseline; pruned:
~1e-8, float32 summation order).

Experiments: ``scoped_timer`` (Warp's ``ScopedTimer`` with CUDA activity timing beside nsys'
kernel times, same process) and ``coldstart`` (module compile/load times with Warp's kernel cache
and the CUDA driver's compute cache emptied two ways).
"""
from workloads.contract import Recipe

RECIPE = Recipe(
    name="warp_sph",
    title="Warp SPH (hash-grid neighbours)",
    seed_document="004",
    framework="warp",
    requires=("warp",),
    variants=("baseline", "graph", "fused", "pruned", "sorted", "cell_list", "plane_threads"),
    # each step improves on the one listed before it
    default_size=62500,
    size_meaning=("number of particles; the starting column is nx x 4nx x nx lattice points of "
                  "spacing h = 0.8 filled to this count (62500 = the example's 25 x 100 x 25)"),
    experiments=("scoped_timer", "coldstart"),
    # each cold or warm process gets its turn before its launch and gives it back after its second
    # frame (exp_coldstart, gpu_turn.turn_for_child): between them the GPU goes to other runs
    experiments_in_turns=("coldstart",),
    sections=("timers", "coldstart"),
    # place in the reports and the index
    order=40,
    # the graph steps load their modules before capturing; the baseline builds its module at its
    # first launch, which the cold-start page shows
    compiles_in_setup=("graph", "fused", "pruned", "sorted", "cell_list", "plane_threads"),
)
