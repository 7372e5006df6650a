"""``get_acceleration`` for the pruned step: a candidate is rejected on its squared distance before
anything else is loaded or computed.

For a candidate outside ``h`` (most of them: 84% even when no two cells share a bucket) the
example's kernel still loads the candidate's velocity and density, forms its pressure, and takes
two square roots and three divisions inside the helpers before they test ``d < h``. Here such a
candidate costs its 12-byte position, a subtraction, a dot product and a compare. A neighbour
costs one square root and two divisions (a reciprocal of its density, and ``1/d`` folded into the
pressure term), not two and three.
"""
from workloads.warp_backend import configured_warp
from workloads.warp_sph.kernels import force_per_mass

wp = configured_warp()


@wp.func
def neighbour_terms(j: int, r: wp.vec3, d2: float, rho: wp.array(dtype=float), v: wp.array(dtype=wp.vec3),
                    v_i: wp.vec3, p_i: float, stiffness: float, rest_density: float, h: float):
    # neighbour j's pressure term (to subtract) and viscosity term: one square root, two divisions;
    # its density and velocity are loaded only here
    d = wp.sqrt(d2)
    rho_j = rho[j]
    inv_rho_j = 1.0 / rho_j
    w = h - d
    p_j = stiffness * (rho_j - rest_density)
    return r * ((p_i + p_j) * 0.5 * inv_rho_j * w * w / d), (v[j] - v_i) * (inv_rho_j * w)


@wp.kernel
def get_acceleration(
    grid: wp.uint64,
    x: wp.array(dtype=wp.vec3),
    v: wp.array(dtype=wp.vec3),
    rho: wp.array(dtype=float),
    a: wp.array(dtype=wp.vec3),
    stiffness: float,
    rest_density: float,
    gravity: float,
    pressure_norm: float,
    viscous_norm: float,
    h: float,
):
    tid = wp.tid()
    i = wp.hash_grid_point_id(grid, tid)
    x_i = x[i]
    v_i = v[i]
    rho_i = rho[i]
    p_i = stiffness * (rho_i - rest_density)
    h2 = h * h
    f_pressure = wp.vec3(0.0, 0.0, 0.0)
    f_viscous = wp.vec3(0.0, 0.0, 0.0)
    for j in wp.hash_grid_query(grid, x_i, h):
        r = x[j] - x_i
        d2 = wp.dot(r, r)
        if d2 < h2 and j != i:
            # only neighbours get here: their velocity and density are loaded now
            dp, dv = neighbour_terms(j, r, d2, rho, v, v_i, p_i, stiffness, rest_density, h)
            f_pressure -= dp
            f_viscous += dv
    a[i] = force_per_mass(f_pressure, f_viscous, rho_i, pressure_norm, viscous_norm) + wp.vec3(0.0, gravity, 0.0)
