"""Configuration never reaches the shell as shell syntax: values are quoted (``{x:q}``, shlex), a
recipe's ``ncu.kernel_regex`` is compiled when the config is read, ``work_dir`` is checked, and the
pipeline runs from a folder whose path holds a space (with a Python whose path holds one too)."""
from __future__ import annotations

import shlex
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def _snakemake(args, cwd=REPO, timeout=300):
    return subprocess.run(SNAKEMAKE + args, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _configfile(tmp_path, text: str) -> str:
    path = tmp_path / "extra.yaml"
    path.write_text(text)
    return str(path)


def test_a_quote_in_the_kernel_regex_stays_one_argument(tmp_path):
    """A single quote in a recipe's kernel_regex ran a command (issue 20): now it is part of ncu's -k."""
    marker = tmp_path / "PWNED"
    regex = f"get_acceleration' ; touch {marker} ; echo '"
    extra = _configfile(tmp_path, "workloads:\n  warp_sph:\n    ncu:\n      kernel_regex: " + repr(regex) + "\n")
    target = "results/captures/warp_sph/baseline/n62500/ncu.ncu-rep"
    r = _snakemake(["-n", "-p", "--cores", "1", "--configfile", "rules/config.yaml", extra, "--", target])
    assert r.returncode == 0, r.stderr[-1500:]
    [command] = [line.removeprefix("Shell command: ") for line in r.stdout.splitlines()
                 if "ncu-run.json" in line and " -k " in line]
    words = shlex.split(command)
    assert words[words.index("-k") + 1] == f"regex:{regex}"
    assert not marker.exists()


def test_an_invalid_kernel_regex_is_refused_when_the_config_is_read(tmp_path):
    extra = _configfile(tmp_path, "workloads:\n  warp_sph:\n    ncu:\n      kernel_regex: 'get_(acceleration'\n")
    r = _snakemake(["-n", "--cores", "1", "--configfile", "rules/config.yaml", extra, "--", "rebuild_reports"])
    assert r.returncode != 0
    assert "workloads.warp_sph.ncu.kernel_regex" in r.stdout + r.stderr and "not a regular expression" in r.stdout + r.stderr


def test_an_unknown_variant_is_refused_under_the_key_that_names_it(tmp_path):
    extra = _configfile(tmp_path, "workloads:\n  cupy_sqdiff:\n    l2_modes: {sizes: [1024], variants: [fusd]}\n")
    r = _snakemake(["-n", "--cores", "1", "--configfile", "rules/config.yaml", extra, "--", "rebuild_reports"])
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "workloads.cupy_sqdiff.l2_modes.variants: no variant 'fusd'" in out, out[-1500:]


@pytest.mark.parametrize("extra,says", [
    # a profile that moves JAX to other sizes but keeps the default's variant_sizes (512 for the int32 steps)
    ("workloads:\n  jax_matmul:\n    sizes: [2048]\n    ncu: {sizes: [2048], variants: [bf16]}\n",
     "workloads.jax_matmul.variant_sizes.baseline: [512] names none of the sizes [2048]"),
    # ncu asked for a step that does not run at the ncu size
    ("workloads:\n  jax_matmul:\n    ncu: {variants: [jit, bf16]}\n",
     "workloads.jax_matmul.ncu.variants: 'jit' runs at none of ncu.sizes [8192]"),
])
def test_a_step_the_sizes_leave_out_is_refused_when_the_config_is_read(tmp_path, extra, says):
    r = _snakemake(["-n", "--cores", "1", "--configfile", "rules/config.yaml", _configfile(tmp_path, extra), "--",
                    "rebuild_reports"])
    out = r.stdout + r.stderr
    assert r.returncode != 0 and says in out, out[-1500:]


@pytest.mark.parametrize("work_dir,says", [("//", "filesystem root"), ("~/results", "~"), ("a//b", "empty component"),
                                           ("../outside", "not inside the repository"), ("/", "")])
def test_an_unsafe_work_dir_is_refused(work_dir, says):
    r = _snakemake(["-n", "--cores", "1", "rebuild_reports", "--config", f"work_dir={work_dir}"])
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "work_dir" in out and says in out, out[-1500:]


@pytest.fixture(scope="module")
def spaced_copy(tmp_path_factory):
    """The repository's tracked files in a folder with a space, and a Python behind a path with one."""
    root = tmp_path_factory.mktemp("spaced") / "cook book"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src, dst = REPO / rel, root / rel
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    python = root.parent / "py thon" / "python"
    python.parent.mkdir()
    python.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    python.chmod(0o755)
    return root, python


def test_the_dry_run_and_a_cpu_rule_work_from_a_folder_with_a_space(spaced_copy):
    root, python = spaced_copy
    config = ["--config", f"python={python}"]
    r = _snakemake(["-n", "--cores", "1", "rebuild_reports", *config], cwd=root)
    assert r.returncode == 0, r.stderr[-2000:]
    target = "results/analysis/reference/numba_ufunc/baseline/n268435456.json"
    r = _snakemake(["--cores", "1", target, *config], cwd=root, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert (root / target).read_text().startswith("{")
