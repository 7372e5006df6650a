"""``integrate``: the walls, the kick and the drift of one substep in one kernel (the fused step).

Per particle it reads x, v and a once and writes x and v once (60 bytes) instead of the three
kernels' 120 bytes and three launches; the walls are ``apply_bounds``'s own function and the
arithmetic and its order are those of ``apply_bounds`` then ``kick`` then ``drift``, so positions
match the unfused frame.
"""
from workloads.warp_backend import configured_warp
from workloads.warp_sph.kernels import walls

wp = configured_warp()


@wp.kernel
def integrate(
    x: wp.array(dtype=wp.vec3),
    v: wp.array(dtype=wp.vec3),
    a: wp.array(dtype=wp.vec3),
    damping: float,
    width: float,
    length: float,
    dt: float,
):
    tid = wp.tid()
    p, u = walls(x[tid], v[tid], damping, width, length)
    # kick with the new acceleration, then drift with the new velocity (symplectic Euler)
    u = u + a[tid] * dt
    v[tid] = u
    x[tid] = p + u * dt
