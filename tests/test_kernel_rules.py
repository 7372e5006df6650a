"""rules/kernel.smk, dry-run: the kernel_page target turns --config keys into one kernel_profile run
and one page; a page can also be named directly; the rebuild from committed captures needs no GPU."""
from __future__ import annotations


import pytest

from conftest import REPO, copy_checkout
import snakemake_forks


pytestmark = pytest.mark.skipif('include: "rules/kernel.smk"' not in (REPO / "Snakefile").read_text(),
                                reason="the Snakefile does not include rules/kernel.smk yet")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A copy of the checkout, so that Snakemake's metadata stays out of it."""
    # dry runs only: the reference captures are looked at, never written
    return copy_checkout(tmp_path_factory.mktemp("kernel-rules") / "repo", reference="link")


def _dry(repo, *args):
    r = snakemake_forks.run(["-n", "-p", *args], repo, timeout=300)
    return r.returncode, r.stdout + r.stderr


def test_kernel_page_target_runs_one_profile_and_one_page(repo):
    rc, out = _dry(repo, "kernel_page", "--config", "kernel_workload=pycuda_kernel", "kernel_variant=vectorized",
                   "kernel_name=scale_vec4")
    assert rc == 0, out
    assert ("-m workloads.tools.kernel_profile --workload pycuda_kernel --variant vectorized --kernel scale_vec4"
            " --size 268435456 --line-directives") in out
    assert "--output-dir results/captures/kernels/pycuda_kernel_vectorized_scale_vec4" in out
    # the page is made from the live capture, then published into reports/kernels/
    assert "--output results/reports/live/kernels/pycuda_kernel_vectorized_scale_vec4.md" in out
    assert "cp results/reports/live/kernels/pycuda_kernel_vectorized_scale_vec4.md " \
           "reports/kernels/pycuda_kernel_vectorized_scale_vec4.md" in out


def test_a_committed_page_is_profiled_again_in_a_fresh_checkout(repo):
    """The lab handout's command in a new clone: the committed page exists but no capture does;
    the page alone would look up to date (found running the handout on the GPU host)."""
    assert (repo / "reports/kernels/warp_sph_baseline_get_acceleration.md").is_file()
    rc, out = _dry(repo, "kernel_page", "--config", "kernel_workload=warp_sph", "kernel_variant=baseline",
                   "kernel_name=get_acceleration")
    assert rc == 0, out
    assert "Nothing to be done" not in out
    assert "--workload warp_sph --variant baseline --kernel get_acceleration" in out
    assert "--output results/reports/live/kernels/warp_sph_baseline_get_acceleration.md" in out


def test_kernel_page_without_its_config_says_what_to_pass(repo):
    rc, out = _dry(repo, "kernel_page")
    assert rc != 0 and "kernel_page needs --config kernel_workload=W kernel_variant=V kernel_name=NAME" in out


def test_a_page_named_directly_resolves_variants_that_share_a_prefix(repo):
    rc, out = _dry(repo, "reports/kernels/cupy_sqdiff_fused_pool_cookbook_squared_diff.md",
                   "--config", "kernel_size=4096")
    assert rc == 0, out
    assert "--workload cupy_sqdiff --variant fused_pool --kernel cookbook_squared_diff --size 4096" in out


def test_rebuilding_kernel_pages_needs_no_gpu(repo):
    rc, out = _dry(repo, "rebuild_kernel_pages")
    assert rc == 0, out
    assert "kernel_capture" not in out and "preflight" not in out


def test_the_readme_kernel_page_commands_for_pycuda_and_cupy_resolve(repo):
    readme = (REPO / "README.md").read_text()
    for workload, variant, kernel in (("pycuda_kernel", "vectorized", "scale_vec4"),
                                      ("cupy_sqdiff", "raw_kernel", "cookbook_squared_diff_raw")):
        config = [f"kernel_workload={workload}", f"kernel_variant={variant}", f"kernel_name={kernel}"]
        assert "snakemake kernel_page --config " + " ".join(config) in readme
        rc, out = _dry(repo, "kernel_page", "--config", *config)
        assert rc == 0, out
        assert f"--workload {workload} --variant {variant} --kernel {kernel} --size " in out
        assert f"--output-dir results/captures/kernels/{workload}_{variant}_{kernel}" in out


def test_a_raw_kernel_page_named_directly_resolves_its_variant(repo):
    # a committed page would look up to date to Snakemake: name one this copy does not have yet
    (repo / "reports/kernels/cupy_sqdiff_raw_kernel_cookbook_squared_diff_raw.md").unlink(missing_ok=True)
    rc, out = _dry(repo, "reports/kernels/cupy_sqdiff_raw_kernel_cookbook_squared_diff_raw.md",
                   "--config", "kernel_size=16384")
    assert rc == 0, out
    assert "--workload cupy_sqdiff --variant raw_kernel --kernel cookbook_squared_diff_raw --size 16384" in out


def test_boolean_config_keys_take_lower_case_spellings(repo):
    # Snakemake reads only True/False as booleans on the command line; `coldwarm=false` must still
    # turn the cold/warm starts off rather than fail the schema
    rc, out = _dry(repo, "profile_all", "--config", "coldwarm=false", "experiments=false", "multiprocess=false")
    assert rc == 0, out
    assert "coldwarm" not in out.split("Job stats:")[-1].split("Reasons:")[0]
    rc, bad = _dry(repo, "profile_all", "--config", "coldwarm=maybe")
    assert rc != 0 and "'maybe' is not of type 'boolean'" in bad


def test_kernel_launch_skip_reaches_the_profiler(repo):
    rc, out = _dry(repo, "kernel_page", "--config", "kernel_workload=warp_sph", "kernel_variant=sorted",
                   "kernel_name=get_acceleration", "kernel_launch_skip=39")
    assert rc == 0, out
    assert "--variant sorted --kernel get_acceleration --size 62500 --line-directives --launch-skip 39" in out
