"""The cell-list step's kernels: a counting sort of the particles into the box's cells, and the
two neighbour passes reading each row of three cells as one contiguous run.

Cells: ``h``-wide cubes of the box, ``dims = (dx, dy, dz)``, numbered x fastest
(``(cz * dy + cy) * dx + cx``). A coordinate outside the box is clamped to the edge cell: the
clamp moves no two points more than one cell apart, so every pair within ``h`` still lies in
neighbouring cells (there is no ceiling; a particle above the box shares the top layer).
No modulo anywhere: Warp's hash grid folds cell coordinates with ``% dim`` on every lookup.

``cell_start`` has one entry per cell plus one (= n): the particles of cell ``c`` are slots
``cell_start[c] .. cell_start[c + 1] - 1``, so cells ``cx - 1 .. cx + 1`` of one row are the single
run ``cell_start[row + cx - 1] .. cell_start[row + cx + 2] - 1``: 9 runs per particle instead of 27
cell lookups.
"""
from workloads.warp_backend import configured_warp
from workloads.warp_sph.kernels import force_per_mass, poly6_unnormalized
from workloads.warp_sph.kernels_pruned import neighbour_terms

wp = configured_warp()


@wp.func
def cell_coord(p: float, h: float, dim: int):
    return wp.clamp(int(wp.floor(p / h)), 0, dim - 1)


@wp.kernel
def count_cells(
    x: wp.array(dtype=wp.vec3),
    h: float,
    dim_x: int,
    dim_y: int,
    dim_z: int,
    cell_count: wp.array(dtype=wp.int32),
    cell_of: wp.array(dtype=wp.int32),
    rank_in_cell: wp.array(dtype=wp.int32),
):
    i = wp.tid()
    p = x[i]
    c = (cell_coord(p[2], h, dim_z) * dim_y + cell_coord(p[1], h, dim_y)) * dim_x + cell_coord(p[0], h, dim_x)
    cell_of[i] = c
    # the old count is this particle's place in its cell (order within a cell: whoever came first)
    rank_in_cell[i] = wp.atomic_add(cell_count, c, 1)


@wp.kernel
def scatter_to_cells(
    x: wp.array(dtype=wp.vec3),
    v: wp.array(dtype=wp.vec3),
    ids: wp.array(dtype=wp.int32),
    cell_of: wp.array(dtype=wp.int32),
    rank_in_cell: wp.array(dtype=wp.int32),
    cell_start: wp.array(dtype=wp.int32),
    x_out: wp.array(dtype=wp.vec3),
    v_out: wp.array(dtype=wp.vec3),
    ids_out: wp.array(dtype=wp.int32),
):
    i = wp.tid()
    k = cell_start[cell_of[i]] + rank_in_cell[i]
    x_out[k] = x[i]
    v_out[k] = v[i]
    ids_out[k] = ids[i]


@wp.kernel
def density_rows(
    x: wp.array(dtype=wp.vec3),
    cell_start: wp.array(dtype=wp.int32),
    h: float,
    dim_x: int,
    dim_y: int,
    dim_z: int,
    rho: wp.array(dtype=float),
    density_norm: float,
):
    k = wp.tid()
    x_k = x[k]
    cx = cell_coord(x_k[0], h, dim_x)
    cy = cell_coord(x_k[1], h, dim_y)
    cz = cell_coord(x_k[2], h, dim_z)
    x_lo = wp.max(cx - 1, 0)
    x_hi = wp.min(cx + 1, dim_x - 1)
    total = float(0.0)
    for z in range(wp.max(cz - 1, 0), wp.min(cz + 1, dim_z - 1) + 1):
        for y in range(wp.max(cy - 1, 0), wp.min(cy + 1, dim_y - 1) + 1):
            row = (z * dim_y + y) * dim_x
            for j in range(cell_start[row + x_lo], cell_start[row + x_hi + 1]):
                total += poly6_unnormalized(x_k - x[j], h)
    rho[k] = density_norm * total


@wp.kernel
def acceleration_rows(
    x: wp.array(dtype=wp.vec3),
    v: wp.array(dtype=wp.vec3),
    rho: wp.array(dtype=float),
    cell_start: wp.array(dtype=wp.int32),
    h: float,
    dim_x: int,
    dim_y: int,
    dim_z: int,
    a: wp.array(dtype=wp.vec3),
    stiffness: float,
    rest_density: float,
    gravity: float,
    pressure_norm: float,
    viscous_norm: float,
):
    k = wp.tid()
    x_k = x[k]
    v_k = v[k]
    rho_k = rho[k]
    p_k = stiffness * (rho_k - rest_density)
    cx = cell_coord(x_k[0], h, dim_x)
    cy = cell_coord(x_k[1], h, dim_y)
    cz = cell_coord(x_k[2], h, dim_z)
    x_lo = wp.max(cx - 1, 0)
    x_hi = wp.min(cx + 1, dim_x - 1)
    h2 = h * h
    f_pressure = wp.vec3(0.0, 0.0, 0.0)
    f_viscous = wp.vec3(0.0, 0.0, 0.0)
    for z in range(wp.max(cz - 1, 0), wp.min(cz + 1, dim_z - 1) + 1):
        for y in range(wp.max(cy - 1, 0), wp.min(cy + 1, dim_y - 1) + 1):
            row = (z * dim_y + y) * dim_x
            for j in range(cell_start[row + x_lo], cell_start[row + x_hi + 1]):
                r = x[j] - x_k
                d2 = wp.dot(r, r)
                # the same pruning and arithmetic as kernels_pruned.get_acceleration
                if d2 < h2 and j != k:
                    dp, dv = neighbour_terms(j, r, d2, rho, v, v_k, p_k, stiffness, rest_density, h)
                    f_pressure -= dp
                    f_viscous += dv
    a[k] = force_per_mass(f_pressure, f_viscous, rho_k, pressure_norm, viscous_norm) + wp.vec3(0.0, gravity, 0.0)


@wp.kernel
def density_planes(
    x: wp.array(dtype=wp.vec3),
    cell_start: wp.array(dtype=wp.int32),
    h: float,
    dim_x: int,
    dim_y: int,
    dim_z: int,
    rho: wp.array(dtype=float),
    density_norm: float,
):
    # three threads per particle, one per z-plane of its 3 x 3 x 3 cells; rho must start at zero
    t = wp.tid()
    k = t // 3
    z = cell_coord(x[k][2], h, dim_z) + t % 3 - 1
    if z < 0 or z >= dim_z:
        return
    x_k = x[k]
    cx = cell_coord(x_k[0], h, dim_x)
    cy = cell_coord(x_k[1], h, dim_y)
    x_lo = wp.max(cx - 1, 0)
    x_hi = wp.min(cx + 1, dim_x - 1)
    total = float(0.0)
    for y in range(wp.max(cy - 1, 0), wp.min(cy + 1, dim_y - 1) + 1):
        row = (z * dim_y + y) * dim_x
        for j in range(cell_start[row + x_lo], cell_start[row + x_hi + 1]):
            total += poly6_unnormalized(x_k - x[j], h)
    wp.atomic_add(rho, k, density_norm * total)


@wp.kernel
def acceleration_planes(
    x: wp.array(dtype=wp.vec3),
    v: wp.array(dtype=wp.vec3),
    rho: wp.array(dtype=float),
    cell_start: wp.array(dtype=wp.int32),
    h: float,
    dim_x: int,
    dim_y: int,
    dim_z: int,
    a: wp.array(dtype=wp.vec3),
    stiffness: float,
    rest_density: float,
    gravity: float,
    pressure_norm: float,
    viscous_norm: float,
):
    # three threads per particle as in density_planes; a must start at zero. The acceleration is
    # linear in the force sums, so each plane adds its share divided by rho_k; the middle plane
    # adds gravity.
    t = wp.tid()
    k = t // 3
    dz = t % 3 - 1
    x_k = x[k]
    z = cell_coord(x_k[2], h, dim_z) + dz
    if z < 0 or z >= dim_z:
        return
    v_k = v[k]
    rho_k = rho[k]
    p_k = stiffness * (rho_k - rest_density)
    cx = cell_coord(x_k[0], h, dim_x)
    cy = cell_coord(x_k[1], h, dim_y)
    x_lo = wp.max(cx - 1, 0)
    x_hi = wp.min(cx + 1, dim_x - 1)
    h2 = h * h
    f_pressure = wp.vec3(0.0, 0.0, 0.0)
    f_viscous = wp.vec3(0.0, 0.0, 0.0)
    for y in range(wp.max(cy - 1, 0), wp.min(cy + 1, dim_y - 1) + 1):
        row = (z * dim_y + y) * dim_x
        for j in range(cell_start[row + x_lo], cell_start[row + x_hi + 1]):
            r = x[j] - x_k
            d2 = wp.dot(r, r)
            if d2 < h2 and j != k:
                dp, dv = neighbour_terms(j, r, d2, rho, v, v_k, p_k, stiffness, rest_density, h)
                f_pressure -= dp
                f_viscous += dv
    share = force_per_mass(f_pressure, f_viscous, rho_k, pressure_norm, viscous_norm)
    if dz == 0:
        share = share + wp.vec3(0.0, gravity, 0.0)
    wp.atomic_add(a, k, share)
