"""`python -m analysis ncu-summary` gives ncu's own numbers (its raw page, `ncu --page raw --csv`)
on every committed ncu report."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from analysis.cli.main import main
from analysis.common.gzfiles import open_capture_text
from analysis.readers.ncu import SUMMARY_METRICS, read_launches
from analysis.cli.ncu_cli import HEADER

from conftest import reference_runs

REPO = Path(__file__).resolve().parents[1]
NCU_RUNS = [r for r in reference_runs() if (r / "ncu.ncu-rep.gz").exists()]

# the units ncu's raw page prints a metric in, and the factor to the summary's unit (ns, bytes, counts)
_SCALE = {"": 1, "%": 1, "register/thread": 1, "ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6,
          "msecond": 1e6, "s": 1e9, "second": 1e9}


def _raw(run):
    # the reference keeps the raw page gzipped (ncu-raw.csv.gz)
    with open_capture_text(str(run / "ncu-raw.csv"), newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1], rows[2:]


def _cli(capsys, *args) -> str:
    assert main(["ncu-summary", *args]) == 0
    return capsys.readouterr().out


def test_there_are_ncu_reports():
    assert len(NCU_RUNS) >= 5


@pytest.mark.parametrize("run", NCU_RUNS, ids=lambda p: "/".join(p.parts[-3:]))
def test_csv_equals_the_raw_page(run, capsys):
    mine = list(csv.DictReader(io.StringIO(_cli(capsys, str(run / "ncu.ncu-rep.gz")))))
    header, units, data = _raw(run)
    assert len(mine) == len(data) > 0
    for row, raw in zip(mine, data):
        assert row["ID"] == raw[header.index("ID")]
        assert row["Kernel Name"] == raw[header.index("Kernel Name")]
        for metric in SUMMARY_METRICS:
            i = header.index(metric)
            unit = units[i]
            assert unit in _SCALE, f"{metric} in a unit this test does not know: {unit!r}"
            theirs = float(raw[i].replace(",", "")) * _SCALE[unit]
            # the raw page rounds to 6 significant digits
            assert float(row[metric]) == pytest.approx(theirs, rel=1e-5, abs=1e-6), (metric, row[metric], raw[i])
            if unit in ("", "register/thread"):  # counts print as integers
                assert row[metric].isdigit(), (metric, row[metric])


@pytest.mark.parametrize("run", NCU_RUNS[:3], ids=lambda p: "/".join(p.parts[-3:]))
def test_findings_column_lists_what_ncu_attached(run, capsys):
    rows = list(csv.DictReader(io.StringIO(_cli(capsys, str(run / "ncu.ncu-rep.gz")))))
    for row, launch in zip(rows, read_launches(run / "ncu.ncu-rep.gz")):
        parts = [p.split(":") for p in row["Findings"].split(";")] if row["Findings"] else []
        assert [(rule, sev) for rule, sev, _ in parts] == [(f.rule, f.severity) for f in launch.findings]
        for (_, _, est), f in zip(parts, launch.findings):
            if f.estimated_speedup_pct is None:
                assert est == ""
            else:
                assert float(est) == pytest.approx(f.estimated_speedup_pct, rel=5e-3)


def test_json_and_md(capsys):
    run = NCU_RUNS[0]
    path = str(run / "ncu.ncu-rep.gz")
    rows = json.loads(_cli(capsys, "--format", "json", path))
    launches = read_launches(path)
    assert [r["ID"] for r in rows] == [launch.id for launch in launches]
    assert list(rows[0]) == HEADER
    assert rows[0]["gpu__time_duration.sum"] == launches[0].metrics["gpu__time_duration.sum"]
    assert [f["rule"] for f in rows[0]["Findings"]] == [f.rule for f in launches[0].findings]
    md = _cli(capsys, "--format", "md", path).splitlines()
    assert md[0].startswith("| ID | Kernel Name | gpu__time_duration.sum")
    assert len(md) == 2 + len(launches)


def test_not_an_ncu_report_exits_2_and_names_the_file(capsys):
    src = str(NCU_RUNS[0] / "nsys.sqlite.gz")
    assert main(["ncu-summary", src]) == 2
    err = capsys.readouterr().err
    assert "nsys.sqlite.gz" in err and "not an Nsight Compute report" in err


def test_a_launch_profiled_for_the_pages_metrics_alone_has_them_all_and_no_rules():
    """A real metrics-only capture (tests/data/ncu_collection_h200, NVIDIA H200): the reader finds every
    metric the pages read but the instrumented marker, equal to ncu's own raw page, no rule results,
    and names the collection; the coverage line says the step carries no ncu rules, and the rule
    table leaves it out rather than showing it as not flagged."""
    from analysis.readers import ncu
    from analysis.model.report_model import ncu_coverage, ncu_rule_rows
    from analysis.report.page_text import ncu_coverage_text
    from analysis.model.run_summary import summarize_ncu

    folder = REPO / "tests" / "data" / "ncu_collection_h200"
    (launch,) = ncu.read_launches(str(folder / "ncu.ncu-rep.gz"))
    assert launch.collection == ncu.COLLECTION_METRICS and launch.findings == ()
    assert "SpeedOfLight" not in launch.sections and set(ncu.METRICS_ONLY_SECTIONS) <= set(launch.sections)
    assert [m for m in ncu.analysis_metrics() if launch.metrics[m] is None] == [ncu.INSTRUMENTED_MARKER]
    (raw,) = ncu.read_raw_csv(str(folder / "ncu-raw.csv.gz"))
    for name, value in raw.metrics.items():
        if value is not None:
            assert launch.metrics[name] == pytest.approx(value, rel=1e-5, abs=1e-6), name
    summary = summarize_ncu(str(folder / "ncu.ncu-rep.gz"))
    assert summary[0]["collection"] == "metrics" and summary[0]["limiter"]["unit"] == "DRAM"
    full = summarize_ncu(str(REPO / "reports/reference/h100/cupy_sqdiff/raw_kernel/n16384/ncu.ncu-rep.gz"))
    assert {launch["collection"] for launch in full} == {"full"}
    runs = [{"workload": "cupy_sqdiff", "variant": "fused", "size": 16384, "ncu": summary},
            {"workload": "cupy_sqdiff", "variant": "raw_kernel", "size": 16384, "ncu": full}]
    line = ncu_coverage_text(ncu_coverage({16384: runs}))
    assert line.startswith("Nsight Compute (`--set full`: `raw_kernel`; only the metrics this page reads "
                           "(`--metrics`; no ncu rules): `fused`) profiled")
    assert all(list(cells) == ["raw_kernel"] for _, cells, _, _ in ncu_rule_rows(runs))


def test_metrics_only_steps_of_recipes_without_tensor_work_leave_the_tensor_counts_out_and_say_so():
    """The H200 reference (1496c0e): CuPy's metrics-only steps ran with ``ncu.tensor_ops: false``, so
    their launches lack the tensor-core operation counts and their peaks and nothing else the pages
    read; the full-set step still counts them (0 of every precision), JAX's metrics-only step keeps
    them, and the coverage line names what CuPy's left out."""
    from analysis.readers import ncu
    from analysis.model.limiter import TENSOR_PRECISIONS
    from analysis.model.report_model import ncu_coverage
    from analysis.report.page_text import ncu_coverage_text
    from analysis.model.run_summary import summarize_ncu

    ref = REPO / "reports" / "reference" / "h200"
    tensor = set(ncu.tensor_ops_metrics())

    def launches(step):
        return ncu.read_launches(str(ref / step / "ncu.ncu-rep.gz"))

    for launch in launches("cupy_sqdiff/fused/n16384"):
        assert launch.collection == ncu.COLLECTION_METRICS
        assert {m for m in ncu.analysis_metrics() if launch.metrics[m] is None} == tensor | {ncu.INSTRUMENTED_MARKER}
        assert launch.metrics["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"] is not None
    (full,) = launches("cupy_sqdiff/raw_kernel/n16384")
    assert full.collection == ncu.COLLECTION_FULL
    counts = [name for _, name, _ in TENSOR_PRECISIONS]
    assert all(full.metrics[m] == 0 for m in counts)
    jax = launches("jax_matmul/float32/n8192")
    assert jax and all(launch.collection == ncu.COLLECTION_METRICS for launch in jax)
    assert all(launch.metrics[m] is not None for launch in jax for m in tensor)
    runs = [{"workload": "cupy_sqdiff", "variant": v, "size": 16384,
             "ncu": summarize_ncu(str(ref / f"cupy_sqdiff/{v}/n16384/ncu.ncu-rep.gz"))}
            for v in ("fused", "raw_kernel")]
    assert ncu_coverage_text(ncu_coverage({16384: runs})).startswith(
        "Nsight Compute (`--set full`: `raw_kernel`; only the metrics this page reads, less the tensor-core "
        "operation counts (the recipe's kernels run none, as its full-set step counts: `tensor_ops` in "
        "`rules/config.yaml`) (`--metrics`; no ncu rules): `fused`) profiled")
