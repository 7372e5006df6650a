"""The report rules' declarations (rules/report.smk, analysis/report/sections): every figure a committed
report shows is one the rules know of (a standard report figure or one its recipe's sections
declare), and every input a section declares exists in the committed reference."""
from __future__ import annotations

import re

import pytest

from analysis.report.report_sections import declared_figures, declared_inputs
from conftest import REFERENCE, REPO
from workloads.registry import RECIPES

#: rules/report.smk's REPORT_FIGURES: the figures `python -m analysis report` draws for every workload
STANDARD = ("ladder", "busy", "timeline")
#: rules/report.smk's OPTIONAL_FIGURES: drawn where there is something to draw
OPTIONAL = ("roofline",)
FIGURE_LINK = re.compile(r"\(figures/([A-Za-z0-9_]+\.png)\)")


def test_the_rules_and_this_test_agree_on_the_standard_figures():
    text = (REPO / "rules" / "report.smk").read_text()
    assert f"REPORT_FIGURES = {list(STANDARD)!r}".replace("'", '"') in text
    assert f"OPTIONAL_FIGURES = {list(OPTIONAL)!r}".replace("'", '"') in text


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_every_figure_a_committed_report_shows_is_declared(recipe):
    shown = set(FIGURE_LINK.findall((REPO / "reports" / f"{recipe.name}.md").read_text()))
    known = {f"{recipe.name}_{f}.png" for f in STANDARD + OPTIONAL} | set(declared_figures(recipe))
    assert shown <= known, f"undeclared figures: {sorted(shown - known)}"
    # and the sections' figures are shown: a declared figure nobody links would be published for nothing
    assert set(declared_figures(recipe)) <= shown


@pytest.mark.parametrize("recipe", [r for r in RECIPES if r.sections], ids=lambda r: r.name)
def test_the_inputs_sections_declare_exist_in_the_reference(recipe):
    for rel in declared_inputs(recipe):
        assert (REFERENCE / recipe.name / rel).exists(), rel
