"""The parts a recipe adds to its report (Recipe.sections): ``analysis/sections/<recipe>_<section>.py``,
each a pure function ``render(workload_root, figure_dir) -> str`` of the recipe's capture folder."""
from __future__ import annotations

import importlib

from analysis.errors import AnalysisInputError


def _modules(recipe):
    return [importlib.import_module(f"analysis.sections.{recipe.name}_{name}") for name in recipe.sections]


def declared_inputs(recipe) -> list[str]:
    """What the recipe's sections read, relative to its capture folder (each module's ``INPUTS``)."""
    return [path for m in _modules(recipe) for path in getattr(m, "INPUTS", ())]


def declared_figures(recipe) -> list[str]:
    """File names of the figures the recipe's sections write (each module's ``FIGURES``)."""
    return [name for m in _modules(recipe) for name in getattr(m, "FIGURES", ())]


def render_all(recipe, workload_root: str | None, figure_dir: str) -> list[str]:
    """Markdown of every section the recipe declares, in its order."""
    if not recipe.sections:
        return []
    if not workload_root:
        raise AnalysisInputError(recipe.name, "the recipe has report sections: pass --captures <its capture folder>")
    out = []
    for name in recipe.sections:
        module = importlib.import_module(f"analysis.sections.{recipe.name}_{name}")
        text = module.render(workload_root, figure_dir)
        if not text.startswith("## "):
            raise AnalysisInputError(module.__file__, f"section {name!r} must start with a '## ' heading")
        out.append(text)
    return out
