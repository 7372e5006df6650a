"""Every recipe in the suite, found by looking: each package ``workloads/<name>/`` whose
``__init__.py`` defines ``RECIPE`` (a :class:`~workloads.contract.Recipe`), in ``Recipe.order``.
Adding a workload = one folder; nothing here changes."""
from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

import workloads
from workloads.contract import Recipe


@lru_cache(maxsize=None)
def _recipe_packages() -> tuple:
    """The recipe packages under workloads/, imported (their ``__init__`` imports no GPU package)."""
    found = []
    for info in pkgutil.iter_modules(workloads.__path__):
        if info.ispkg:
            module = importlib.import_module(f"workloads.{info.name}")
            if isinstance(getattr(module, "RECIPE", None), Recipe):
                found.append(module)
    return tuple(found)


def declared_frameworks() -> list:
    """(Framework record, file) for each recipe package that declares ``FRAMEWORK``."""
    return [(m.FRAMEWORK, m.__file__) for m in _recipe_packages() if getattr(m, "FRAMEWORK", None) is not None]


def _recipes() -> tuple[Recipe, ...]:
    recipes = sorted((m.RECIPE for m in _recipe_packages()), key=lambda r: (r.order, r.name))
    names = [r.name for r in recipes]
    for m in _recipe_packages():
        if m.RECIPE.name != m.__name__.rsplit(".", 1)[1]:
            raise ValueError(f"{m.__file__}: RECIPE.name is {m.RECIPE.name!r}, not its folder's name")
    if len(set(names)) != len(names):
        raise ValueError(f"two recipes share a name: {names}")
    return tuple(recipes)


#: every recipe, in report order
RECIPES: tuple[Recipe, ...] = _recipes()
BY_NAME = {r.name: r for r in RECIPES}
