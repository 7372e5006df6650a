"""The float64 reference: the same frame in float64 Warp types (``vec3d``, a float64 ``HashGrid``) on
the same device, from the same starting state.

Written apart from the float32 kernels, straightforwardly: one kernel per pass, the three
integration passes in one (they are per particle, so the order bounds -> kick -> drift is kept
exactly). Neighbours are the points within ``h``; which grid finds them does not change the sums
beyond rounding, so the reference uses a grid that covers the box (fewest candidates).

Kernel names start with ``ref64_`` so that no profile mistakes them for the variants' kernels.
"""
from workloads.warp_backend import configured_warp

wp = configured_warp()

f64 = wp.float64


@wp.kernel
def ref64_density(
    grid: wp.uint64,
    x: wp.array(dtype=wp.vec3d),
    rho: wp.array(dtype=wp.float64),
    density_norm: wp.float64,
    h: wp.float64,
):
    i = wp.tid()
    x_i = x[i]
    h2 = h * h
    total = f64(0.0)
    for j in wp.hash_grid_query(grid, x_i, h):
        r = x[j] - x_i
        q = h2 - wp.dot(r, r)
        if q > f64(0.0):
            total += q * q * q
    rho[i] = density_norm * total


@wp.kernel
def ref64_acceleration(
    grid: wp.uint64,
    x: wp.array(dtype=wp.vec3d),
    v: wp.array(dtype=wp.vec3d),
    rho: wp.array(dtype=wp.float64),
    a: wp.array(dtype=wp.vec3d),
    stiffness: wp.float64,
    rest_density: wp.float64,
    gravity: wp.float64,
    pressure_norm: wp.float64,
    viscous_norm: wp.float64,
    h: wp.float64,
):
    i = wp.tid()
    x_i = x[i]
    v_i = v[i]
    rho_i = rho[i]
    p_i = stiffness * (rho_i - rest_density)
    f_p = wp.vec3d(f64(0.0), f64(0.0), f64(0.0))
    f_v = wp.vec3d(f64(0.0), f64(0.0), f64(0.0))
    for j in wp.hash_grid_query(grid, x_i, h):
        r = x[j] - x_i
        d = wp.sqrt(wp.dot(r, r))
        if j != i and d < h:
            rho_j = rho[j]
            p_j = stiffness * (rho_j - rest_density)
            w = h - d
            f_p -= r * ((p_i + p_j) / (f64(2.0) * rho_j) * w * w / d)
            f_v += (v[j] - v_i) * (w / rho_j)
    f = pressure_norm * f_p + viscous_norm * f_v
    a[i] = f / rho_i + wp.vec3d(f64(0.0), gravity, f64(0.0))


@wp.kernel
def ref64_integrate(
    x: wp.array(dtype=wp.vec3d),
    v: wp.array(dtype=wp.vec3d),
    a: wp.array(dtype=wp.vec3d),
    damping: wp.float64,
    width: wp.float64,
    length: wp.float64,
    dt: wp.float64,
):
    i = wp.tid()
    p = x[i]
    u = v[i]
    zero = f64(0.0)
    # the walls first, then kick, then drift: the order of the float32 variants' passes
    if p[0] < zero:
        p = wp.vec3d(zero, p[1], p[2])
        u = wp.vec3d(u[0] * damping, u[1], u[2])
    if p[0] > width:
        p = wp.vec3d(width, p[1], p[2])
        u = wp.vec3d(u[0] * damping, u[1], u[2])
    if p[1] < zero:
        p = wp.vec3d(p[0], zero, p[2])
        u = wp.vec3d(u[0], u[1] * damping, u[2])
    if p[2] < zero:
        p = wp.vec3d(p[0], p[1], zero)
        u = wp.vec3d(u[0], u[1], u[2] * damping)
    if p[2] > length:
        p = wp.vec3d(p[0], p[1], length)
        u = wp.vec3d(u[0], u[1], u[2] * damping)
    u = u + a[i] * dt
    x[i] = p + u * dt
    v[i] = u
