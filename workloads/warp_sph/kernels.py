"""The simulation's five float32 kernels, structured as in Warp's SPH example (Warp's profiling
target) and written for this suite: ``compute_density``, ``get_acceleration``, ``apply_bounds``,
``kick``, ``drift``.

Imported only from inside a variant's methods: it needs Warp, and :func:`configured_warp` must run
before the first ``@wp.kernel`` so that ``COOKBOOK_LINEINFO`` reaches this module's options.

SPH as in Müller et al. 2003 (the example's reference): density from the poly6 kernel,
``rho_i = c_rho * sum_j max(h^2 - |r_ij|^2, 0)^3``; pressure ``p = k (rho - rho_0)``; the spiky
kernel's gradient for pressure and the viscosity kernel's Laplacian for viscosity.

What makes ``get_acceleration`` the hot kernel: each thread walks every point of the 27 hash-grid
cells around its particle (``wp.hash_grid_query`` visits candidates, not neighbours), and for each
candidate it loads the candidate's position, velocity and density and computes two square roots
(one in each helper) before the helpers test ``d < h``. The last step of the recipe
(``pruned.py``) removes that waste; these kernels keep it, as the example does.

CUDA names: ``<kernel>_<hash>_cuda_kernel_forward``; the suite finds kernels by the base names.
"""
from workloads.warp_backend import configured_warp

wp = configured_warp()


@wp.func
def poly6_unnormalized(r: wp.vec3, h: float):
    # (h^2 - |r|^2)^3 inside the support, 0 outside; candidates outside add nothing
    q = h * h - wp.dot(r, r)
    return wp.max(q * q * q, 0.0)


@wp.func
def spiky_pressure(r: wp.vec3, p_i: float, p_j: float, rho_j: float, h: float):
    # r = x_j - x_i; the force on i points away from j
    d = wp.sqrt(wp.dot(r, r))
    if d < h:
        w = h - d
        return (-r / d) * ((p_i + p_j) / (2.0 * rho_j)) * (w * w)
    return wp.vec3(0.0, 0.0, 0.0)


@wp.func
def viscosity_laplacian(r: wp.vec3, v_i: wp.vec3, v_j: wp.vec3, rho_j: float, h: float):
    d = wp.sqrt(wp.dot(r, r))
    if d < h:
        return ((v_j - v_i) / rho_j) * (h - d)
    return wp.vec3(0.0, 0.0, 0.0)


@wp.func
def force_per_mass(f_pressure: wp.vec3, f_viscous: wp.vec3, rho: float, pressure_norm: float, viscous_norm: float):
    # the acceleration without gravity
    return (pressure_norm * f_pressure + viscous_norm * f_viscous) / rho


@wp.kernel
def compute_density(
    grid: wp.uint64,
    x: wp.array(dtype=wp.vec3),
    rho: wp.array(dtype=float),
    density_norm: float,
    h: float,
):
    tid = wp.tid()
    # threads in cell order: neighbouring threads walk the same cells
    i = wp.hash_grid_point_id(grid, tid)
    x_i = x[i]
    total = float(0.0)
    for j in wp.hash_grid_query(grid, x_i, h):
        total += poly6_unnormalized(x_i - x[j], h)
    rho[i] = density_norm * total


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
    f_pressure = wp.vec3(0.0, 0.0, 0.0)
    f_viscous = wp.vec3(0.0, 0.0, 0.0)
    for j in wp.hash_grid_query(grid, x_i, h):
        if j != i:
            # every candidate pays these loads, neighbour or not
            v_j = v[j]
            rho_j = rho[j]
            p_j = stiffness * (rho_j - rest_density)
            r = x[j] - x_i
            f_pressure += spiky_pressure(r, p_i, p_j, rho_j, h)
            f_viscous += viscosity_laplacian(r, v_i, v_j, rho_j, h)
    a[i] = force_per_mass(f_pressure, f_viscous, rho_i, pressure_norm, viscous_norm) + wp.vec3(0.0, gravity, 0.0)


@wp.func
def walls(p: wp.vec3, u: wp.vec3, damping: float, width: float, length: float):
    # walls at x = 0, x = width, y = 0 (floor), z = 0, z = length; no ceiling
    if p[0] < 0.0:
        p = wp.vec3(0.0, p[1], p[2])
        u = wp.vec3(u[0] * damping, u[1], u[2])
    if p[0] > width:
        p = wp.vec3(width, p[1], p[2])
        u = wp.vec3(u[0] * damping, u[1], u[2])
    if p[1] < 0.0:
        p = wp.vec3(p[0], 0.0, p[2])
        u = wp.vec3(u[0], u[1] * damping, u[2])
    if p[2] < 0.0:
        p = wp.vec3(p[0], p[1], 0.0)
        u = wp.vec3(u[0], u[1], u[2] * damping)
    if p[2] > length:
        p = wp.vec3(p[0], p[1], length)
        u = wp.vec3(u[0], u[1], u[2] * damping)
    return p, u


@wp.kernel
def apply_bounds(
    x: wp.array(dtype=wp.vec3),
    v: wp.array(dtype=wp.vec3),
    damping: float,
    width: float,
    length: float,
):
    tid = wp.tid()
    p, u = walls(x[tid], v[tid], damping, width, length)
    x[tid] = p
    v[tid] = u


@wp.kernel
def kick(v: wp.array(dtype=wp.vec3), a: wp.array(dtype=wp.vec3), dt: float):
    tid = wp.tid()
    v[tid] = v[tid] + a[tid] * dt


@wp.kernel
def drift(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), dt: float):
    tid = wp.tid()
    x[tid] = x[tid] + v[tid] * dt
