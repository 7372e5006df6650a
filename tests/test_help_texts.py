"""Every subcommand and option of `python -m analysis` and of the workload runner
(`python -m workloads.<recipe> --help`) says what it is for."""
from __future__ import annotations

import argparse

import pytest

from analysis.cli.main import build_parser
from workloads.harness import runner
from workloads.registry import RECIPES


def _undocumented(parser: argparse.ArgumentParser, where: str) -> list[str]:
    missing = []
    for action in parser._actions:  # argparse keeps no public list of a parser's arguments
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                if not helps.get(name):
                    missing.append(f"{where} {name} (no help in the command list)")
                if not sub.description:
                    missing.append(f"{where} {name} (no description)")
                missing += _undocumented(sub, f"{where} {name}")
            continue
        if not action.help:
            missing.append(f"{where} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_analysis_command_and_option_has_help():
    assert _undocumented(build_parser(), "python -m analysis") == []


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_every_runner_option_has_help(recipe):
    p = runner._parser(recipe)
    assert _undocumented(p, f"python -m workloads.{recipe.name}") == []
    assert "seed" not in p.description.lower()
    assert p.format_help()  # renders


def test_the_multiprocess_example_options_have_help():
    from workloads.nvtx_multiprocess import recipe

    assert _undocumented(recipe.parser(), "python -m workloads.nvtx_multiprocess") == []
