"""The parts a recipe adds to its report (Recipe.sections): ``analysis/report/sections/<recipe>_<section>.py``,
each a pure function ``render(workload_root, figure_dir) -> str`` of the recipe's capture folder."""
from __future__ import annotations

import importlib

from analysis.common.errors import AnalysisInputError


def _modules(recipe):
    return [importlib.import_module(f"analysis.report.sections.{recipe.name}_{name}") for name in recipe.sections]


def declared_inputs(recipe, with_experiments: bool = True) -> list[str]:
    """What the recipe's sections read, relative to its capture folder (each module's ``INPUTS``);
    without experiments, not those of the sections that read them (:func:`render_all` leaves those out)."""
    return [path for m in _modules(recipe) if with_experiments or not reads_experiments(m)
            for path in getattr(m, "INPUTS", ())]


def declared_figures(recipe) -> list[str]:
    """File names of the figures the recipe's sections write (each module's ``FIGURES``)."""
    return [name for m in _modules(recipe) for name in getattr(m, "FIGURES", ())]


def reads_experiments(module) -> bool:
    """Whether a section reads one of the recipe's experiments (left out when a run has none)."""
    return any(p.startswith("experiments/") for p in getattr(module, "INPUTS", ()))


def render_all(recipe, workload_root: str | None, figure_dir: str, with_experiments: bool = True) -> list[str]:
    """Markdown of every section the recipe declares, in its order. Without experiments (a run
    that did not make them, such as the lab's), the sections that read them are left out, and a
    last section says which."""
    if not recipe.sections:
        return []
    if not workload_root:
        raise AnalysisInputError(recipe.name, "the recipe has report sections: pass --captures <its capture folder>")
    out, left_out = [], []
    for name in recipe.sections:
        module = importlib.import_module(f"analysis.report.sections.{recipe.name}_{name}")
        if not with_experiments and reads_experiments(module):
            left_out.append(name)
            continue
        text = module.render(workload_root, figure_dir)
        if not text.startswith("## "):
            raise AnalysisInputError(module.__file__, f"section {name!r} must start with a '## ' heading")
        out.append(text)
    if left_out:
        out.append("## Left out of this run\n\nThis run made none of the recipe's experiments "
                   f"({', '.join(f'`{e}`' for e in recipe.experiments)}), so its sections "
                   f"{', '.join(f'`{n}`' for n in left_out)} are not here; `snakemake profile_all` with the "
                   "default configuration makes them.\n")
    return out
