"""The kernel page (analysis/report/kernel_page.py and `kernel-page` of analysis/cli/kernel_page_cli.py) on the
committed ncu reports, and on a capture kernel_profile wrote around one of them."""
from __future__ import annotations

import argparse
import copy
import re
import json

import pytest

from analysis.cli import kernel_page_cli
from analysis.common.errors import AnalysisInputError
from analysis.report.kernel_page import capture_name, display_path, kernel_page
from analysis.readers.ncu_source import read_kernel_profile

from conftest import REFERENCE, REPO
from test_kernel_profile import VECTORIZED_KERNEL_CAPTURE, make_vectorized_capture

VECTORIZED = VECTORIZED_KERNEL_CAPTURE
#: a Numba kernel profiled with the full set (its samples per instruction) and compiled without lineinfo
NUMBA = REFERENCE / "numba_ufunc" / "fastmath" / "n268435456" / "ncu.ncu-rep.gz"
#: a PyCUDA kernel compiled with -lineinfo but no #line directive (tests/data/ncu_lineinfo_pycuda_h200)
NO_DIRECTIVE = REPO / "tests" / "data" / "ncu_lineinfo_pycuda_h200" / "device_resident.ncu-rep.gz"


@pytest.fixture
def vectorized_capture(tmp_path):
    return make_vectorized_capture(tmp_path)


def _cli(*args: str) -> int:
    p = argparse.ArgumentParser()
    kernel_page_cli.add_parser(p.add_subparsers(dest="command", required=True))
    a = p.parse_args(["kernel-page", *args])
    return a.func(a)


def _row(page: str, first_cell: str) -> list[str]:
    line = next(ln for ln in page.splitlines() if ln.startswith(f"| {first_cell} |"))
    return [c.strip() for c in line.strip("|").split(" | ")]


def test_page_of_a_capture_shows_metrics_hottest_lines_and_how_it_was_made(vectorized_capture, tmp_path):
    out = tmp_path / "page.md"
    assert _cli("--report", str(vectorized_capture / "kernel.ncu-rep"), "--run",
                str(vectorized_capture / "kernel-run.json"), "--output", str(out)) == 0
    page = out.read_text()
    assert page.startswith("# Kernel `scale_vec4`: pycuda_kernel / vectorized\n")
    # the report's numbers, as the page prints them
    k = read_kernel_profile(str(VECTORIZED))
    assert _row(page, "Duration")[1] == f"{k.metrics['gpu__time_duration.sum'] / 1e3:.1f} µs"
    assert _row(page, "Registers per thread")[1] == "20"
    top = k.source.lines[0]
    assert top.text.strip().startswith("v.x *= 2.0f")
    hottest = _row(page, "1")
    assert hottest[1:3] == [f"`workloads/pycuda_kernel/kernels.py:{top.line}`", f"`{top.text.strip()}`"]
    assert hottest[3:6] == [f"{top.samples:,}", f"{top.samples_pct:.1f} %", "long_scoreboard 100 %"]
    assert "No text was imported" not in page  # the #line directive names a file ncu imported
    assert "## Python or CUDA-C lines" not in page  # PyCUDA: no line directives to choose
    assert "ncu-ui results/captures/kernels/pycuda_kernel_vectorized_scale_vec4/kernel.ncu-rep" in page
    # the stand-in run recorded no GPU, so the page cannot name the GPU's reference folder
    assert ("gunzip -k reports/reference/<gpu>/kernels/pycuda_kernel_vectorized_scale_vec4/kernel.ncu-rep.gz"
            in page)
    # the command with machine-specific paths replaced by their role
    cmd = next(ln for ln in page.splitlines() if ln.startswith("ncu --set full"))
    assert "--export <output-dir>/kernel" in cmd and "--source-folders <fresh cache>/warp" in cmd
    assert "-k 'regex:^scale_vec4$'" in cmd and cmd.endswith("--size 268435456 --calls 1")
    assert "`COOKBOOK_LINEINFO=1`" in page


def test_the_page_depends_on_the_capture_not_where_it_is_read_from(vectorized_capture, tmp_path):
    # the committed copy is gzipped; a page rebuilt from it must equal the live one
    run = json.loads((vectorized_capture / "kernel-run.json").read_text())
    live = kernel_page(read_kernel_profile(str(vectorized_capture / "kernel.ncu-rep")), run, report_hint="a")
    ref = kernel_page(read_kernel_profile(str(VECTORIZED)), run, report_hint="b")
    assert live == ref


def test_a_pycuda_capture_without_the_line_directive_has_lines_but_no_text(tmp_path):
    out = tmp_path / "pycuda.md"
    assert _cli("--report", str(NO_DIRECTIVE), "--output", str(out)) == 0
    page = out.read_text()
    k = read_kernel_profile(str(NO_DIRECTIVE))
    top = k.source.lines[0]
    assert _row(page, "1")[1:4] == [f"`kernel.cu:{top.line}`", "*(text not in the report)*", f"{top.samples:,}"]
    assert "No text was imported for `kernel.cu`" in page


def test_a_report_without_line_information_gets_the_hottest_sass_instead(tmp_path):
    out = tmp_path / "numba.md"
    assert _cli("--report", str(NUMBA), "--output", str(out), "--json", str(tmp_path / "numba.json")) == 0
    page = out.read_text()
    assert "**No line information**: no instruction of this kernel maps to a source line" in page
    src = read_kernel_profile(str(NUMBA)).source
    hot = src.hottest_instructions[0]
    assert hot.samples > 0 and hot.sass
    assert _row(page, f"0x{hot.offset:04x}")[1:4] == [f"`{hot.sass}`", f"{hot.samples:,}",
                                                      f"{100 * hot.samples / src.total_samples:.1f} %"]
    record = json.loads((tmp_path / "numba.json").read_text())
    assert record["source"]["has_line_info"] is False and record["source"]["lines"] == []
    assert "No `kernel-run.json` came with this report" in page


def test_a_run_record_of_another_kernel_is_refused(vectorized_capture, tmp_path):
    with pytest.raises(AnalysisInputError, match="do not belong together"):
        _cli("--report", str(NUMBA), "--run", str(vectorized_capture / "kernel-run.json"),
             "--output", str(tmp_path / "x.md"))
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(AnalysisInputError, match=r"field \(top level\): .workload. is a required property"):
        _cli("--report", str(NUMBA), "--run", str(bad), "--output", str(tmp_path / "x.md"))


def test_warp_pages_explain_and_offer_the_other_line_view(vectorized_capture):
    run = json.loads((vectorized_capture / "kernel-run.json").read_text())
    k = read_kernel_profile(str(VECTORIZED))
    warp = copy.deepcopy(run)
    warp.update(workload="warp_sph", variant="baseline", kernel="get_acceleration", framework="warp",
                line_directives=True)
    page = kernel_page(k, warp)
    assert "## Python or CUDA-C lines" in page and "line directives on: the lines are Python lines" in page
    assert ("snakemake kernel_page --config kernel_workload=warp_sph kernel_variant=baseline "
            "kernel_name=get_acceleration kernel_line_directives=False") in page
    assert "results/captures/kernels/warp_sph_baseline_get_acceleration_cuda_c" in page
    warp["line_directives"] = False
    page = kernel_page(k, warp)
    assert "line directives off: the lines are generated CUDA-C lines" in page
    assert "kernel_line_directives=True" in page
    assert "ncu-ui results/captures/kernels/warp_sph_baseline_get_acceleration_cuda_c/kernel.ncu-rep" in page


def test_names_and_paths_as_the_page_shows_them():
    assert capture_name("warp_sph", "baseline", "get_acceleration") == "warp_sph_baseline_get_acceleration"
    assert capture_name("warp_sph", "baseline", "get_acceleration", False).endswith("_cuda_c")
    assert capture_name("pycuda_kernel", "vectorized", "scale_vec4", None) == "pycuda_kernel_vectorized_scale_vec4"
    assert display_path("/home/u/repo/workloads/warp_sph/kernels.py") == "workloads/warp_sph/kernels.py"
    assert display_path("/tmp/tmpabc/kernel.cu") == "kernel.cu"


@pytest.mark.parametrize("name, slug", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"), ("NVIDIA A100-SXM4-80GB", "a100"),
    ("NVIDIA GeForce RTX 4090", "rtx4090"), ("Tesla V100-SXM2-16GB", "v100"), ("NVIDIA L40S", "l40s")])
def test_reference_folder_of_a_gpu_comes_from_its_name(name, slug):
    from workloads.harness.provenance import gpu_slug

    assert gpu_slug(name) == slug


def _pages_of_each_reference() -> dict[str, str]:
    """reference folder -> the folder its pages are published in, as the workflow's config files say."""
    import yaml

    config = yaml.safe_load((REPO / "rules" / "config.yaml").read_text())
    out = {config["reference"]["dir"]: config["reference"]["pages"]}
    for other in (config.get("more_references") or {}).values():
        ref = yaml.safe_load((REPO / other).read_text())["reference"]
        out[ref["dir"]] = ref["pages"]
    return out


def test_each_kernel_page_is_in_the_tree_of_the_gpu_it_was_captured_on():
    import subprocess

    pages = _pages_of_each_reference()
    runs = sorted((REPO / "reports" / "reference").glob("*/kernels/*/kernel-run.json"))
    assert len(runs) >= 12
    for run in runs:
        reference = str(run.parents[2].relative_to(REPO))
        published = REPO / pages[reference] / "kernels"
        page = (published / f"{run.parent.name}.md").read_text()
        # the page names the reference folder its capture lives in, and the GPU and commit
        assert f"gunzip -k {reference}/kernels/{run.parent.name}/" in page, run
        record = json.loads(run.read_text())
        prov = record["provenance"]
        assert f"Captured on an {prov['gpus'][0]['name']} at commit `{prov['git_commit'][:10]}`" in page, run
        # that commit is in this repository's history
        commit = prov["git_commit"].removesuffix("-dirty")
        assert subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{commit}^{{commit}}"]).returncode == 0
        # and no other GPU's tree holds a page of that name
        for other in set(pages.values()) - {pages[reference]}:
            assert not (REPO / other / "kernels" / f"{run.parent.name}.md").exists(), (run, other)


def test_a_pycuda_page_shows_the_cuda_text_of_the_python_file_its_line_directive_names(vectorized_capture):
    # the line table of a capture compiled with the #line directive (a stand-in report: see test_ncu_source)
    import dataclasses

    from analysis.readers.ncu_source import _source_view
    from test_ncu_source import _vec4_action

    path = "/gpu-host/checkout/workloads/pycuda_kernel/kernels.py"
    action, (load, mul, _store) = _vec4_action(lambda text: {path: text})
    k = dataclasses.replace(read_kernel_profile(str(VECTORIZED)), source=_source_view(action, 100))
    run = json.loads((vectorized_capture / "kernel-run.json").read_text())
    page = kernel_page(k, run)
    assert _row(page, "1")[1:4] == [f"`workloads/pycuda_kernel/kernels.py:{mul}`",
                                    "`v.x *= 2.0f; v.y *= 2.0f; v.z *= 2.0f; v.w *= 2.0f;`", "90"]
    assert _row(page, "2")[1:3] == [f"`workloads/pycuda_kernel/kernels.py:{load}`", "`float4 v = in4[i];`"]
    assert "No text was imported" not in page and "text not in the report" not in page
    # the frameworks table says where PyCUDA's lines point now
    assert "| PyCUDA | `SourceModule(src, options=[\"-lineinfo\"])`; the suite: `COOKBOOK_LINEINFO=1` |" in page
    assert "`#line` directive" in _row(page, "PyCUDA")[2]


def test_the_page_says_which_matching_launch_it_shows(vectorized_capture, tmp_path):
    run_file = vectorized_capture / "kernel-run.json"
    run = json.loads(run_file.read_text())
    run["launch_skip"] = 39
    run_file.write_text(json.dumps(run))
    out = tmp_path / "page.md"
    assert _cli("--report", str(vectorized_capture / "kernel.ncu-rep"), "--run", str(run_file),
                "--output", str(out)) == 0
    assert "one call; the 40th (ncu -s 39) launch matching" in out.read_text()


def test_each_recipe_page_links_the_kernel_pages_of_its_own_gpu():
    from analysis.report.kernel_page import links_section
    from workloads.registry import BY_NAME

    pages = _pages_of_each_reference()
    for reference, published in pages.items():
        captured = {run.parent.name: json.loads(run.read_text())
                    for run in (REPO / reference / "kernels").glob("*/kernel-run.json")}
        for workload, recipe in BY_NAME.items():
            section = links_section(workload, str(REPO / reference / workload), recipe.variants)
            mine = {page for page, run in captured.items() if run["workload"] == workload}
            if not mine:
                assert section is None
                continue
            links = set(re.findall(r"\]\(kernels/([A-Za-z0-9_]+)\.md\)", section))
            assert links == mine, (reference, workload)
            for page in links:  # the link resolves from the recipe page, in the same GPU's tree
                assert (REPO / published / "kernels" / f"{page}.md").is_file()
