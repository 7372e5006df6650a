"""Every recipe in the suite, in report order. Adding a workload = one folder + one line here."""
from __future__ import annotations

from workloads.contract import Recipe
from workloads.cupy_sqdiff import RECIPE as CUPY_SQDIFF

RECIPES: tuple[Recipe, ...] = (CUPY_SQDIFF,)
BY_NAME = {r.name: r for r in RECIPES}
