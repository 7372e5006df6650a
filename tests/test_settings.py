"""workloads/settings.py: every COOKBOOK_* variable is declared there and read only through it; the
table of variables in docs/design.md is generated from it."""
from __future__ import annotations

import ast
import re
import subprocess

import pytest

from conftest import REPO
from workloads import settings

NAME = re.compile(r"\bCOOKBOOK_[A-Z0-9_]+\b")
SETTINGS_FILE = "workloads/settings.py"


def _tracked(*suffixes: str) -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [p for p in out.splitlines()
            if p.endswith(suffixes) and not p.startswith(("reports/", "tests/data/")) and (REPO / p).is_file()]


def _cookbook_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level NAME = "COOKBOOK_..." constants: reads through them count too."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
                isinstance(node.value.value, str) and NAME.fullmatch(node.value.value):
            out.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    return out


def _variable(arg: ast.expr, constants: dict[str, str]) -> str | None:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and NAME.fullmatch(arg.value):
        return arg.value
    if isinstance(arg, ast.Name):
        return constants.get(arg.id)
    return None


def direct_reads(source: str) -> list[tuple[int, str]]:
    """(line, variable) of every read of a COOKBOOK_* variable straight from the environment:
    ``os.environ.get(V)``, ``os.getenv(V)``, ``os.environ[V]``, ``(... environ).get(V)``."""
    tree = ast.parse(source)
    constants = _cookbook_constants(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            receiver = ast.unparse(node.func.value)
            is_read = (node.func.attr == "get" and "environ" in receiver) or \
                      (node.func.attr == "getenv" and receiver == "os")
            name = _variable(node.args[0], constants) if is_read else None
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and \
                "environ" in ast.unparse(node.value):
            name = _variable(node.slice, constants)
        else:
            continue
        if name:
            found.append((node.lineno, name))
    return found


def test_code_reads_cookbook_variables_only_through_the_settings_module():
    offenders = [f"{path}:{line}: {name}" for path in _tracked(".py") if path != SETTINGS_FILE
                 for line, name in direct_reads((REPO / path).read_text())]
    assert offenders == [], "read these through workloads.settings:\n" + "\n".join(offenders)


def test_the_check_sees_each_way_of_reading():
    src = ('import os\nENV = "COOKBOOK_X"\nos.environ.get("COOKBOOK_A")\nos.getenv("COOKBOOK_B")\n'
           'os.environ["COOKBOOK_C"]\n(os.environ if e is None else e).get(ENV, "")\nenv["COOKBOOK_D"] = "1"\n')
    assert direct_reads(src) == [(3, "COOKBOOK_A"), (4, "COOKBOOK_B"), (5, "COOKBOOK_C"), (6, "COOKBOOK_X")]


def test_every_cookbook_variable_named_anywhere_is_declared():
    named = {}
    for path in _tracked(".py", ".smk", ".yaml", ".yml", ".sh", ".md", "Snakefile", ".ci/run"):
        if path == "tests/test_settings.py":  # its examples name variables that do not exist, on purpose
            continue
        for name in NAME.findall((REPO / path).read_text(errors="replace")):
            named.setdefault(name, path)
    undeclared = {n: p for n, p in named.items() if n not in settings.SETTINGS}
    assert undeclared == {}, f"declare these in {SETTINGS_FILE}: {undeclared}"


def test_an_undeclared_name_and_a_bad_flag_are_typed_errors(monkeypatch):
    with pytest.raises(settings.SettingError, match="COOKBOOK_NOPE is not declared"):
        settings.text("COOKBOOK_NOPE")
    monkeypatch.setenv("COOKBOOK_LINEINFO", "maybe")
    with pytest.raises(settings.SettingError, match="COOKBOOK_LINEINFO='maybe': use 1 or 0"):
        settings.flag("COOKBOOK_LINEINFO")
    monkeypatch.setenv("COOKBOOK_LINEINFO", " On ")
    assert settings.flag("COOKBOOK_LINEINFO") is True
    monkeypatch.delenv("COOKBOOK_LINEINFO")
    assert settings.flag("COOKBOOK_LINEINFO") is False and settings.flag("COOKBOOK_NVTX") is True
    assert settings.text("COOKBOOK_DATAFRAME", {}) == "cudf"


def table_in(markdown: str) -> str | None:
    """The table of variables in a markdown text: from its header row to the last row after it."""
    lines = markdown.splitlines()
    header = settings.markdown_table().splitlines()[0]
    if header not in lines:
        return None
    start = lines.index(header)
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join(lines[start:end]) + "\n"


def test_the_documented_table_of_variables_is_the_generated_one():
    """docs/design.md holds the table (the README links to it): a variable added, renamed or
    re-described in workloads/settings.py fails here until the table is regenerated."""
    table = table_in((REPO / "docs" / "design.md").read_text())
    assert table is not None, "docs/design.md has no table of COOKBOOK_* variables"
    assert table == settings.markdown_table()


def test_the_generated_table_lists_every_setting_but_the_test_suites_once():
    rows = settings.markdown_table().splitlines()[2:]
    assert [r.split("`")[1] for r in rows] == [s.name for s in settings.SETTINGS.values() if s.set_by != "tests"]
    assert "COOKBOOK_NVTX" in settings.markdown_table() and "COOKBOOK_RULE_DUMP" not in settings.markdown_table()
