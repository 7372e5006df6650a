"""Parameters, starting state, float64 reference and declared work shared by every SPH variant.

One call of ``step()`` is one frame of the simulation from the recipe's fixed starting state: the
positions and velocities are reset (two device-to-device copies of 12 bytes per particle each),
then 40 substeps run, each: rebuild the hash grid, density, acceleration, walls, kick, drift.
Every call therefore does the same work, so timed, traced and profiled calls can be compared, and
``result()`` is the positions after that frame. :meth:`SphFrame.advance` runs frames on without
resetting (the tests compare variants after several frames that way).

The starting state is the example's: a column of ``size`` particles on a lattice of spacing ``h``
(``nx`` by ``4 nx`` by ``nx``, numbered z fastest, then y, then x, as the example does) with a
jitter of 0.001 h, at rest, in an 80 x 80 x 80 box. ``size = 62500`` gives the example's 25 x 100 x
25 column. The first frame is the start of what the Warp guide profiles (its first 10 frames):
the column starts to fall and its bottom layer meets the floor.
"""
from __future__ import annotations

import dataclasses
import math
import sys
from typing import ClassVar

import numpy as np

from workloads import settings
from workloads.contract import Variant, Work, WorkloadError
from workloads.warp_backend import WarpDevice, configured_warp, describe

#: the example's substeps per frame: int(32 / h) with h = 0.8
SUBSTEPS = 40
#: ``COOKBOOK_WARP_CPU_CAPTURE=0``: graph variants on Warp's CPU device issue plain launches instead
#: of Warp's CPU capture (CUDA graphs are CUDA-only; the tests use this to run the fallback)
ENV_CPU_CAPTURE = "COOKBOOK_WARP_CPU_CAPTURE"


def cpu_capture_enabled() -> bool:
    return settings.flag(ENV_CPU_CAPTURE)


@dataclasses.dataclass(frozen=True)
class Params:
    """The example's physical parameters (float64 here; float32 kernels get them rounded)."""

    n: int
    h: float = 0.8  # smoothing length = hash-grid cell width = query radius
    width: float = 80.0  # box x
    height: float = 80.0  # box y (no ceiling; sets the example's grid size)
    length: float = 80.0  # box z
    stiffness: float = 20.0  # the example's isotropic_exp
    rest_density: float = 1.0
    dynamic_visc: float = 0.025
    damping: float = -0.95
    gravity: float = -0.1
    substeps: int = SUBSTEPS

    @property
    def mass(self) -> float:
        return 0.01 * self.h ** 3

    @property
    def dt(self) -> float:
        return 0.01 * self.h

    @property
    def density_norm(self) -> float:
        return 315.0 * self.mass / (64.0 * math.pi * self.h ** 9)

    @property
    def pressure_norm(self) -> float:
        return -45.0 * self.mass / (math.pi * self.h ** 6)

    @property
    def viscous_norm(self) -> float:
        return 45.0 * self.dynamic_visc * self.mass / (math.pi * self.h ** 6)

    @property
    def lattice(self) -> tuple[int, int, int]:
        """(nx, ny, nz) of the starting column: ny = 4 nx = 4 nz as in the example, filled to n."""
        side = max(1, round((self.n / 4.0) ** (1.0 / 3.0)))
        return side, -(-self.n // (side * side)), side

    @property
    def example_grid_dims(self) -> tuple[int, int, int]:
        """The example's hash grid: int(height / (4 h)) cells per axis (25), whatever the box."""
        d = int(self.height / (4.0 * self.h))
        return d, d, d

    @property
    def box_grid_dims(self) -> tuple[int, int, int]:
        """One bucket per cell of the box: no two cells inside the box share a bucket."""
        return (math.ceil(self.width / self.h), math.ceil(self.height / self.h), math.ceil(self.length / self.h))


def starting_state(p: Params, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions (n, 3) and velocities (n, 3), float32, on the host: the lattice column with jitter."""
    _, ny, nz = p.lattice
    tid = np.arange(p.n, dtype=np.int64)
    iz = tid % nz
    iy = (tid // nz) % ny
    ix = tid // (nz * ny)
    x = p.h * np.stack([ix, iy, iz], axis=1).astype(np.float64)
    # a jitter breaks the lattice's symmetry, as in the example (which draws it with wp.randn)
    x += 0.001 * p.h * np.random.default_rng(seed).standard_normal((p.n, 3))
    return x.astype(np.float32), np.zeros((p.n, 3), dtype=np.float32)


def _cells(x: np.ndarray, h: float) -> np.ndarray:
    return np.floor(np.asarray(x, dtype=np.float64) / h).astype(np.int64)


def candidate_count(x: np.ndarray, h: float, dims: tuple[int, int, int] | None) -> int:
    """How many points ``wp.hash_grid_query`` visits in total when every point queries radius
    ``h`` on a grid of cell width ``h`` with ``dims`` buckets per axis (cell coordinates wrap
    modulo ``dims``, as Warp's hash grid does); ``dims=None``: no two cells share a bucket."""
    c = _cells(x, h)
    if dims is None:
        c = c - c.min(axis=0) + 1
        dims = tuple(int(m) + 2 for m in c.max(axis=0))
    d = np.asarray(dims, dtype=np.int64)

    def bucket(cc: np.ndarray) -> np.ndarray:
        w = np.mod(cc, d)
        return (w[:, 2] * d[1] + w[:, 1]) * d[0] + w[:, 0]

    occupancy = np.bincount(bucket(c), minlength=int(np.prod(d)))
    total = 0
    for off in np.ndindex(3, 3, 3):
        total += int(occupancy[bucket(c + np.asarray(off) - 1)].sum())
    return total


def pairs_within(x: np.ndarray, h: float) -> int:
    """Ordered pairs (i, j) with |x_j - x_i| < h, i = j included, counted exactly with a cell list."""
    x = np.asarray(x, dtype=np.float64)
    c = _cells(x, h)
    c = c - c.min(axis=0) + 1
    dims = c.max(axis=0) + 2
    key = (c[:, 0] * dims[1] + c[:, 1]) * dims[2] + c[:, 2]
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    within = 0
    for dx, dy, dz in np.ndindex(3, 3, 3):
        k = key + ((dx - 1) * dims[1] + (dy - 1)) * dims[2] + (dz - 1)
        lo = np.searchsorted(sorted_key, k, side="left")
        count = np.searchsorted(sorted_key, k, side="right") - lo
        total = int(count.sum())
        if total == 0:
            continue
        # every (particle, point of the neighbouring cell) pair of this offset
        owner = np.repeat(np.arange(len(x)), count)
        first = np.cumsum(count) - count
        other = order[lo[owner] + np.arange(total) - first[owner]]
        d2 = ((x[other] - x[owner]) ** 2).sum(axis=1)
        within += int(np.count_nonzero(d2 < h * h))
    return within


class SphFrame(WarpDevice, Variant):
    """One frame (40 substeps) of the SPH column from its starting state.

    Subclasses change how the frame is issued (:attr:`use_graph`), which kernels a substep launches
    (:meth:`launch_density_on`, :meth:`launch_acceleration_on`, :meth:`launch_integration_on`),
    the hash grid's size (:attr:`grid_covers_box`), and what a substep does (:meth:`substeps`,
    with more state from :meth:`allocate_state`)."""

    #: positions after a frame, relative L2 against the float64 frame. Measured on Warp's CPU device:
    #: float32 rounding gives 1.3e-7 (62,500 and 2,000 particles); leaving out the SPH forces gives
    #: 3.6e-5 (62,500) and 1.1e-4 (2,000). 2e-6 sits between, 15x from each.
    tolerance: ClassVar[float] = 2e-6
    # the reference is a float64 Warp simulation on the same device
    reference_uses_device: ClassVar[bool] = True
    #: capture the frame's substeps in one graph (CUDA graph on a GPU)
    use_graph: ClassVar[bool] = False
    #: one hash-grid bucket per cell of the box instead of the example's 25^3 buckets
    grid_covers_box: ClassVar[bool] = False

    # --- setup ------------------------------------------------------------------------------

    def setup(self) -> None:
        wp = configured_warp()
        from workloads.warp_sph import kernels  # noqa: F401 - imports Warp: only after configured_warp()

        self.wp = wp
        # where the kernel cache is (ncu's --source-folders needs it with line_directives off)
        print(f"warp_sph/{self.name}: {describe()}", file=sys.stderr, flush=True)
        self.params = Params(n=self.size)
        dev = self.device
        x0, v0 = starting_state(self.params, self.seed)
        self.x0_host = x0
        self.x0 = wp.array(x0, dtype=wp.vec3, device=dev)
        self.v0 = wp.array(v0, dtype=wp.vec3, device=dev)
        self.x = wp.empty_like(self.x0)
        self.v = wp.empty_like(self.v0)
        self.rho = wp.zeros(self.size, dtype=float, device=dev)
        self.a = wp.zeros(self.size, dtype=wp.vec3, device=dev)
        self.grid_dims = self.params.box_grid_dims if self.grid_covers_box else self.params.example_grid_dims
        self.grid = wp.HashGrid(*self.grid_dims, device=dev)
        self.allocate_state()
        self.graph = None
        #: how a frame is issued: "launches", "cuda_graph", or "cpu_capture" (Warp's CPU replay)
        self.frame_mode = "launches"
        self._pairs: int | None = None
        self.restart()
        if self.use_graph:
            self._capture()

    def allocate_state(self) -> None:
        """Device arrays a subclass needs beyond x, v, rho, a and the grid (before any capture)."""

    def kernel_modules(self) -> list:
        """The Python modules whose kernels a substep launches (loaded before a capture)."""
        from workloads.warp_sph import kernels  # imports Warp: only after configured_warp() (setup)

        return [kernels]

    def _capture(self) -> None:
        wp = self.wp
        # the grid's buffers exist before capture, so that no build inside the graph allocates
        self.grid.reserve(self.size)
        for m in self.kernel_modules():
            # compile and load outside the capture: a capture records launches, not JIT work
            wp.load_module(m, device=self.device)
        if self.device.is_cpu and not cpu_capture_enabled():
            return  # plain launches (frame_mode "launches")
        try:
            with wp.ScopedCapture(device=self.device) as capture:
                self.substeps()
        except (RuntimeError, NotImplementedError) as e:
            if self.device.is_cuda:
                raise WorkloadError(f"{self.name}: CUDA graph capture failed: {e}") from e
            # no silent fallback: a frame of plain launches would be timed as a captured one
            raise WorkloadError(f"{self.name}: this Warp cannot capture on the CPU ({e}); "
                                f"run with {ENV_CPU_CAPTURE}=0 for plain launches") from e
        self.graph = capture.graph
        # CUDA graphs exist only on CUDA devices; Warp 1.19 records the same launches on the CPU
        # device into its own operation stream and replays that from C++ (no CUDA involved)
        self.frame_mode = "cuda_graph" if self.device.is_cuda else "cpu_capture"
        self.restart()

    # --- one frame --------------------------------------------------------------------------

    def restart(self) -> None:
        """Positions and velocities back to the starting state (device-to-device copies)."""
        self.wp.copy(self.x, self.x0)
        self.wp.copy(self.v, self.v0)

    def substeps(self) -> None:
        for _ in range(self.params.substeps):
            self.substep()

    def substep(self) -> None:
        self.grid.build(self.x, self.params.h)
        self.launch_density_on(self.x)
        self.launch_acceleration_on(self.x, self.v)
        self.launch_integration_on(self.x, self.v)

    def frame(self) -> None:
        if self.graph is not None:
            self.wp.capture_launch(self.graph)
        else:
            self.substeps()

    def step(self) -> None:
        self.restart()
        self.frame()

    def forces(self, x: np.ndarray, vel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Density and acceleration of an arbitrary state (n, 3) with this variant's grid and kernels,
        eagerly (no graph); leaves x and v set to the state. For checks of the neighbour passes on a
        state where particles interact more than in the first frame."""
        self.x.assign(np.asarray(x, dtype=np.float32))
        self.v.assign(np.asarray(vel, dtype=np.float32))
        self.grid.build(self.x, self.params.h)
        self.launch_density_on(self.x)
        self.launch_acceleration_on(self.x, self.v)
        return self.rho.numpy().astype(np.float64), self.a.numpy().astype(np.float64)

    def advance(self, frames: int) -> None:
        """``frames`` frames on from the current state, without the reset step() does."""
        for _ in range(frames):
            self.frame()

    # --- the kernels a substep launches -----------------------------------------------------

    def launch_density_on(self, x) -> None:
        from workloads.warp_sph import kernels  # imports Warp: only after configured_warp() (setup)

        p = self.params
        self.wp.launch(kernels.compute_density, dim=self.size,
                       inputs=[self.grid.id, x, self.rho, p.density_norm, p.h], device=self.device)

    def launch_acceleration_on(self, x, v) -> None:
        from workloads.warp_sph import kernels  # imports Warp: only after configured_warp() (setup)

        p = self.params
        self.wp.launch(kernels.get_acceleration, dim=self.size,
                       inputs=[self.grid.id, x, v, self.rho, self.a, p.stiffness, p.rest_density,
                               p.gravity, p.pressure_norm, p.viscous_norm, p.h], device=self.device)

    def launch_integration_on(self, x, v) -> None:
        from workloads.warp_sph import kernels  # imports Warp: only after configured_warp() (setup)

        p, wp, dev, n = self.params, self.wp, self.device, self.size
        wp.launch(kernels.apply_bounds, dim=n, inputs=[x, v, p.damping, p.width, p.length], device=dev)
        wp.launch(kernels.kick, dim=n, inputs=[v, self.a, p.dt], device=dev)
        wp.launch(kernels.drift, dim=n, inputs=[x, v, p.dt], device=dev)

    # --- result, reference, work ------------------------------------------------------------

    def result(self) -> np.ndarray:
        # numpy() waits for the device
        return self.x.numpy().astype(np.float64)

    def reference(self) -> np.ndarray:
        return reference_frames(self, frames=1)

    def pairs(self) -> int:
        """Ordered pairs within h (i = i included) in the starting state, counted once on the host."""
        if self._pairs is None:
            self._pairs = pairs_within(self.x0_host, self.params.h)
        return self._pairs

    def work(self) -> Work:
        return frame_work(self.size, self.pairs(), self.grid_cells())

    def grid_cells(self) -> int:
        dx, dy, dz = self.grid_dims
        return dx * dy * dz

    def teardown(self) -> None:
        self.graph = None
        self.grid = None
        self.x = self.v = self.rho = self.a = self.x0 = self.v0 = None


# FLOPs per pair as written in the kernels (a square root or a division counts as one):
#: density: r (3), |r|^2 (5), h^2 - |r|^2 (2), cube (2), accumulate (1)
DENSITY_FLOPS_PER_PAIR = 13
#: acceleration, for a pair within h: r (3), two |r| (2 x 6), -r/d (3), p_j (2), (p_i+p_j)/(2 rho_j)
#: (3), (h-d)^2 (2), two vector scalings (6), v_j-v_i (3), /rho_j (3), h-d (1), scaling (3),
#: two accumulations (6)
ACCELERATION_FLOPS_PER_PAIR = 47
#: per particle: pressure (2), force sum (9), /rho and gravity (4), walls (<= 5 damping multiplies,
#: counted 0: they only run at a wall), kick (6), drift (6)
PARTICLE_FLOPS = 27


def frame_work(n: int, pairs_within_h: int, grid_cells: int, substeps: int = SUBSTEPS,
               build_bytes: tuple[int, int] | None = None, passes_read_ids: bool = True) -> Work:
    """The least one frame must move and compute, per substep times ``substeps``.

    Bytes: every array each pass needs is read or written once (neighbours' data are re-read
    from caches, not counted; the grid's radix sort counted as one read and one write of its
    keys and ids); the three integration passes as one (the fused floor). ``build_bytes``: (read,
    written) per substep of another neighbour structure's build than the hash grid's;
    ``passes_read_ids``: the neighbour passes look up each thread's particle id (the hash grid's
    point order). FLOPs: per pair within ``h`` in the starting state (``pairs_within_h`` counts
    i = i, which the acceleration skips), an estimate: the neighbour count changes as particles move.
    """
    vec, scal, idx = 12 * n, 4 * n, 4 * n
    if build_bytes is None:
        # hash grid build: read x; write cell and id per point; sort reads and writes both once;
        # clear and fill cell_starts / cell_ends
        build_r, build_w = vec + 2 * idx, 2 * idx + 2 * idx + 2 * 4 * grid_cells
    else:
        build_r, build_w = build_bytes
    ids = idx if passes_read_ids else 0
    # density: ids, x; writes rho
    dens_r, dens_w = ids + vec, scal
    # acceleration: ids, x, v, rho; writes a
    acc_r, acc_w = ids + 2 * vec + scal, vec
    # walls + kick + drift: reads x, v, a; writes x, v
    int_r, int_w = 3 * vec, 2 * vec
    reads = substeps * (build_r + dens_r + acc_r + int_r)
    writes = substeps * (build_w + dens_w + acc_w + int_w)
    flops = substeps * (DENSITY_FLOPS_PER_PAIR * pairs_within_h
                        + ACCELERATION_FLOPS_PER_PAIR * max(pairs_within_h - n, 0)
                        + PARTICLE_FLOPS * n)
    # the reset copies (12 B per particle each way for x and v) belong to the call too
    reads += 2 * vec
    writes += 2 * vec
    return Work(bytes_read=reads, bytes_written=writes, flops=flops, flops_kind="fp32")


def _reference_state(v: SphFrame, x: np.ndarray, vel: np.ndarray):
    wp = v.wp
    p, dev, n = v.params, v.device, v.size
    state = {
        "x": wp.array(np.asarray(x, dtype=np.float64), dtype=wp.vec3d, device=dev),
        "v": wp.array(np.asarray(vel, dtype=np.float64), dtype=wp.vec3d, device=dev),
        "rho": wp.zeros(n, dtype=wp.float64, device=dev),
        "a": wp.zeros(n, dtype=wp.vec3d, device=dev),
        "grid": wp.HashGrid(*p.box_grid_dims, device=dev, dtype=wp.float64),
    }
    return state


def _reference_forces(v: SphFrame, s: dict) -> None:
    wp = v.wp
    from workloads.warp_sph import reference64 as r64  # imports Warp: only after configured_warp() (setup)

    p, dev, n, f = v.params, v.device, v.size, v.wp.float64
    s["grid"].build(s["x"], p.h)
    wp.launch(r64.ref64_density, dim=n, inputs=[s["grid"].id, s["x"], s["rho"], f(p.density_norm), f(p.h)],
              device=dev)
    wp.launch(r64.ref64_acceleration, dim=n,
              inputs=[s["grid"].id, s["x"], s["v"], s["rho"], s["a"], f(p.stiffness), f(p.rest_density),
                      f(p.gravity), f(p.pressure_norm), f(p.viscous_norm), f(p.h)], device=dev)


def reference_forces(v: SphFrame, x: np.ndarray, vel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Float64 density and acceleration of a state, on ``v``'s device (see :meth:`SphFrame.forces`)."""
    s = _reference_state(v, x, vel)
    _reference_forces(v, s)
    return s["rho"].numpy(), s["a"].numpy()


def reference_frames(v: SphFrame, frames: int) -> np.ndarray:
    """Positions after ``frames`` frames from ``v``'s starting state, in float64 Warp on ``v``'s device."""
    wp = v.wp
    from workloads.warp_sph import reference64 as r64  # imports Warp: only after configured_warp() (setup)

    if frames < 1:
        raise WorkloadError(f"reference_frames: frames must be >= 1, got {frames}")
    p, dev, n, f = v.params, v.device, v.size, wp.float64
    s = _reference_state(v, v.x0.numpy(), v.v0.numpy())
    for _ in range(frames * p.substeps):
        _reference_forces(v, s)
        wp.launch(r64.ref64_integrate, dim=n,
                  inputs=[s["x"], s["v"], s["a"], f(p.damping), f(p.width), f(p.length), f(p.dt)], device=dev)
    return s["x"].numpy().astype(np.float64)
