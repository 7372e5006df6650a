"""The conda environment files and pyproject.toml list the same packages with the same bounds, one
file per CUDA major version; the extras install what their names promise."""
from __future__ import annotations

import re
import tomllib

import pytest
import yaml

from conftest import REPO

CUDA_MAJORS = (12, 13)


def _conda_name(pypi_name: str) -> str:
    """The conda package of a PyPI requirement name: the CUDA major moves out of the name (conda
    picks it through cuda-version), numba-cuda's CUDA extra too; jax[cudaNN] stays a pip package."""
    name = re.sub(r"^cupy-cuda\d+x$", "cupy", pypi_name)
    name = re.sub(r"^(rmm|cudf)-cu\d+$", r"\1", name)
    return re.sub(r"^numba-cuda\[cu\d+\]$", "numba-cuda", name)


def _split(req: str) -> tuple[str, str]:
    # extras stay in the name: jax (CPU) and jax[cuda13] (GPU) are different requirements
    m = re.match(r"^\s*([A-Za-z0-9_.-]+(?:\[[^\]]*\])?)\s*(.*?)\s*$", req)
    return m.group(1).lower(), m.group(2).replace(" ", "")


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _merge(into: dict[str, str], name: str, spec: str, where: str) -> None:
    if name in into and into[name] != spec:
        raise AssertionError(f"{where}: {name} listed twice with different bounds ({into[name]} and {spec})")
    into[name] = spec


@pytest.mark.parametrize("major", CUDA_MAJORS)
def test_conda_file_and_pyproject_agree(major):
    project = _project()
    extras = project["optional-dependencies"]
    reqs = project["dependencies"] + extras["test"] + extras[f"cuda{major}"] + extras["pycuda"]
    pyproject: dict[str, str] = {}
    for req in reqs:
        name, spec = _split(req)
        _merge(pyproject, _conda_name(name), spec, "pyproject.toml")
    path = REPO / ("environment.yml" if major == 13 else f"profiles/environment-cuda{major}.yml")
    env = yaml.safe_load(path.read_text())
    conda: dict[str, str] = {}
    cuda_version = None
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            for req in dep["pip"]:
                _merge(conda, *_split(req), where=path.name)
            continue
        name, spec = _split(dep)
        if name == "cuda-version":
            cuda_version = spec
        elif name not in ("python", "pip"):
            _merge(conda, name, spec, path.name)
    assert pyproject == conda
    # conda picks the CUDA builds of cupy, rmm, cudf, numba-cuda and pycuda through cuda-version
    assert cuda_version == f">={major},<{major + 1}"


@pytest.mark.parametrize("major", CUDA_MAJORS)
def test_each_cuda_extra_names_one_cuda_major_only(major):
    extra = " ".join(_project()["optional-dependencies"][f"cuda{major}"])
    other = 25 - major  # 12 <-> 13
    for pkg in ("cupy-cuda", "rmm-cu", "cudf-cu", "jax[cuda", "numba-cuda[cu"):
        assert f"{pkg}{major}" in extra, pkg
        assert f"{pkg}{other}" not in extra, pkg


def test_pycuda_is_an_extra_of_its_own():
    """PyCUDA builds from source where it has no wheel and needs the CUDA toolkit for that: a GPU
    extra that pulled it in would fail to install on a machine without nvcc and cuda.h."""
    extras = _project()["optional-dependencies"]
    assert [_split(r)[0] for r in extras["pycuda"]] == ["pycuda"]
    assert "gpu" not in extras
    for name, reqs in extras.items():
        if name != "pycuda":
            assert not any(_split(r)[0] == "pycuda" for r in reqs), name


def test_numpy_is_pinned_below_2_5():
    numpy = [r for r in _project()["dependencies"] if r.startswith("numpy")][0]
    assert "<2.5" in numpy.replace(" ", "")


def test_the_pipeline_tests_copy_tracked_files_only(tmp_path):
    """tests/conftest.copy_checkout: no virtual environment, results or captures (a test run once
    copied a 3 GB .venv per test); the reference captures only when asked."""
    from conftest import copy_checkout

    repo = copy_checkout(tmp_path / "repo")
    copied = [p for p in repo.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    # bytecode comes only with the module it was compiled from
    for cached in repo.rglob("__pycache__/*"):
        assert (cached.parent.parent / f"{cached.name.split('.')[0]}.py").is_file(), cached
    assert (repo / "Snakefile").is_file() and (repo / "rules" / "config.yaml").is_file()
    assert not list(repo.rglob("pyvenv.cfg")) and not (repo / "results").exists()
    assert not (repo / "reports" / "reference").exists()
    assert not (repo / "reports" / "figures").exists()
    assert sum(p.stat().st_size for p in copied) < 5 * 2**20
    linked = copy_checkout(tmp_path / "linked", parts=("Snakefile",), reference="link")
    assert (linked / "reports" / "reference").resolve() == REPO / "reports" / "reference"
