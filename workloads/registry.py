"""Every recipe in the suite, in report order. Adding a workload = one folder + one line here."""
from __future__ import annotations

from workloads.contract import Recipe
from workloads.cudf_groupby import RECIPE as CUDF_GROUPBY
from workloads.cupy_sqdiff import RECIPE as CUPY_SQDIFF
from workloads.jax_matmul import RECIPE as JAX_MATMUL
from workloads.numba_ufunc import RECIPE as NUMBA_UFUNC
from workloads.pycuda_kernel import RECIPE as PYCUDA_KERNEL
from workloads.warp_sph import RECIPE as WARP_SPH

RECIPES: tuple[Recipe, ...] = (CUPY_SQDIFF, NUMBA_UFUNC, PYCUDA_KERNEL, WARP_SPH, JAX_MATMUL, CUDF_GROUPBY)
BY_NAME = {r.name: r for r in RECIPES}
