"""``reorder``: the particles' data gathered into the hash grid's cell order (the sorted step).

After a substep's integration, slot ``k`` of the new arrays takes the particle that the grid
listed ``k``-th (``hash_grid_point_id``: the grid's radix sort put point ids in cell order). The
particle's original index travels with it in ``ids``, so that positions can be handed back in
the original order.
"""
from workloads.warp_backend import configured_warp

wp = configured_warp()


@wp.kernel
def reorder(
    grid: wp.uint64,
    x: wp.array(dtype=wp.vec3),
    v: wp.array(dtype=wp.vec3),
    ids: wp.array(dtype=wp.int32),
    x_out: wp.array(dtype=wp.vec3),
    v_out: wp.array(dtype=wp.vec3),
    ids_out: wp.array(dtype=wp.int32),
):
    k = wp.tid()
    i = wp.hash_grid_point_id(grid, k)
    x_out[k] = x[i]
    v_out[k] = v[i]
    ids_out[k] = ids[i]
