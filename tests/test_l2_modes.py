"""Warm against cold L2 (analysis/model/l2_modes.py) on real timed records: CuPy baseline and fused at
1024^2 (24 MiB, under the H200's 60 MiB L2), timed warm and with L2 scrubbed, on an H200."""
from __future__ import annotations

import glob
import gzip
import json
import os

import pytest

from analysis.model import l2_modes
from analysis.common.errors import AnalysisInputError

HERE = os.path.dirname(__file__)
RECORDS = sorted(glob.glob(os.path.join(HERE, "data", "l2_h200", "*.json.gz")))
CEILINGS = os.path.join(HERE, "..", "reports", "reference", "h200", "ceilings.json")


def _records() -> list[dict]:
    out = []
    for path in RECORDS:
        with gzip.open(path, "rt") as f:
            out.append(json.load(f))
    return out


def _ceilings() -> dict:
    with open(CEILINGS) as f:
        return json.load(f)["ceilings"]


def test_each_step_has_both_modes_and_the_l2_it_ran_under():
    rows = l2_modes.rows(_records(), _ceilings())
    assert [(r.variant, r.size) for r in rows] == [("baseline", 1024), ("fused", 1024)]
    for r in rows:
        assert r.working_set_bytes == 24 * 2**20 and r.l2_bytes == 60 * 2**20  # the H200's L2, as the driver said
        assert r.warm_samples >= 30 and r.cold_samples >= 30 and r.scrub_median_ms > 0
        assert r.floor_resource == "device memory" and r.cold_over_floor > 1


def test_the_section_shows_both_times_and_says_the_floor_is_the_cold_l2_ones():
    rows = l2_modes.rows(_records(), _ceilings())
    md = l2_modes.section(rows, "CUDA events")
    assert md.startswith("## Warm and cold L2\n")
    assert "**it is the floor of the cold-L2 time**" in md
    for r in rows:
        assert f"| `{r.variant}` | 1024 | 24 MiB / 60 MiB | {r.warm_median_ms:.4g} ({r.warm_samples}) | " \
               f"{r.cold_median_ms:.4g} ({r.cold_samples}) |" in md
    # at 1024^2 the host takes longer to submit each call (median host_call_ms) than the events time:
    # the windows hold the launch, and the section says so instead of reading the verdict as L2's
    for r in rows:
        assert r.launch_bound and r.warm_host_call_ms > r.warm_median_ms
        assert (f"- `{r.variant}` at 1024: the host takes {r.warm_host_call_ms:.3g} ms to submit each call "
                f"(median of the warm samples), {r.warm_host_call_ms / r.warm_median_ms:.2f}× the "
                f"{r.warm_median_ms:.3g} ms the CUDA events time") in md
    assert md.count("compares launch gaps, not L2 hits") == 2
    assert "what L2 hits save" not in md


def test_a_window_is_the_launchs_only_where_the_host_takes_half_of_it_to_submit():
    row = l2_modes.rows(_records(), _ceilings())[1]
    import dataclasses

    assert not dataclasses.replace(row, warm_host_call_ms=None).launch_bound  # older records: no host time
    assert not dataclasses.replace(row, warm_host_call_ms=0.49 * row.warm_median_ms).launch_bound
    assert dataclasses.replace(row, warm_host_call_ms=0.5 * row.warm_median_ms).launch_bound
    md = l2_modes.section([dataclasses.replace(row, warm_host_call_ms=0.01 * row.warm_median_ms)], "CUDA events")
    assert "compares launch gaps" not in md and "is not set by the bytes it moves" in md


def test_a_step_timed_in_one_mode_only_is_refused_by_name():
    warm_only = [r for r in _records() if r["l2_mode"] == "warm"]
    with pytest.raises(AnalysisInputError, match="baseline at size 1024: timed in \\['warm'\\] only"):
        l2_modes.rows(warm_only, _ceilings(), where="l2 records")


def test_the_report_rule_puts_the_l2_section_on_the_page(tmp_path):
    """Snakemake's report rule, fed the L2 records beside the summaries, writes the section (a list
    option once swallowed the positional summaries, so the live page with L2 runs failed)."""
    import shutil

    import snakemake_forks
    from conftest import REFERENCE
    from test_preflight_and_pipeline import _repo_copy

    repo = _repo_copy(tmp_path)
    ref = tmp_path / "ref_with_l2"
    shutil.copytree(REFERENCE / "cupy_sqdiff", ref / "cupy_sqdiff")
    for name in ("ceilings.json", "preflight.json"):
        shutil.copy(REFERENCE / name, ref / name)
    for path in RECORDS:
        _, variant, size, mode = os.path.basename(path).removesuffix(".json.gz").split("_")
        out = ref / "cupy_sqdiff" / "l2" / variant / f"n{size}" / f"timing-{mode}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "rb") as f:
            out.write_bytes(f.read())
    r = snakemake_forks.run(["--cores", "1", "results/reports/reference/cupy_sqdiff.md",
                             "--config", f"reference={{name: l2, dir: {ref}}}"], repo, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    md = (repo / "results" / "reports" / "reference" / "cupy_sqdiff.md").read_text()
    assert "## Warm and cold L2" in md
    # the rest of the page is there too: the summaries reached the report
    assert "| `fused_pool` |" in md
