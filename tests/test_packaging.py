"""environment.yml and pyproject.toml list the same packages with the same bounds."""
from __future__ import annotations

import re
import tomllib

import yaml

from conftest import REPO

# conda names of PyPI packages whose names differ
CONDA_NAME = {"cupy-cuda13x": "cupy", "rmm-cu13": "rmm", "cudf-cu13": "cudf"}


def _split(req: str) -> tuple[str, str]:
    # extras stay in the name: jax (CPU) and jax[cuda13] (GPU) are different requirements
    m = re.match(r"^\s*([A-Za-z0-9_.-]+(?:\[[^\]]*\])?)\s*(.*?)\s*$", req)
    return m.group(1).lower(), m.group(2).replace(" ", "")


def test_environment_and_pyproject_agree():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    pyproject = {CONDA_NAME.get(n, n): spec for n, spec in map(_split, reqs)}
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    conda = {}
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            conda.update(dict(map(_split, dep["pip"])))
        else:
            name, spec = _split(dep)
            if name not in ("python", "pip"):
                conda[name] = spec
    assert pyproject == conda


def test_numpy_is_pinned_below_2_5():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    numpy = [r for r in project["dependencies"] if r.startswith("numpy")][0]
    assert "<2.5" in numpy.replace(" ", "")
