"""The suite's readers on captures of programs it did not write (tests/data/thirdparty_h100: a
PyTorch training program and a JAX program, captured on an H100; README.md there says how).

``python -m analysis stats`` must print what ``nsys stats`` printed for each of the six reports,
and ``python -m analysis ncu-summary`` must list every launch ncu profiled, in ncu's order, with
ncu's values and the kernel name as ncu's raw page prints it.
"""
from __future__ import annotations

import csv
import functools
import gzip
import io
import re

import pytest

from analysis.cli.main import main
from analysis.readers.nsys import stats as nsys_stats
from analysis.report import stats_text
from analysis.readers.nsys.trace import Trace

from conftest import REPO
# the comparison rules of the reference captures' test, so that both hold the suite to the same bar
from test_nsys_stats import _close, _parse
from test_ncu_summary import _SCALE
from analysis.readers.ncu import SUMMARY_METRICS

DATA = REPO / "tests" / "data" / "thirdparty_h100"
PROGRAMS = ("torch_train", "jax_prog")
REPORTS = list(nsys_stats.REPORTS)


@functools.lru_cache(maxsize=None)
def _trace(program: str) -> Trace:
    # opened once per session: unpacking the PyTorch export (80 MB) for each report costs seconds
    return Trace(DATA / f"{program}.sqlite.gz")


def _theirs(program: str, report: str) -> str:
    return (DATA / f"{program}_stats_{report}.csv").read_text()


def test_every_report_of_both_programs_has_rows():
    """The fixtures hold data for every report (nsys skipped none), so no comparison below is vacuous."""
    for program in PROGRAMS:
        for report in REPORTS:
            header, rows = _parse(_theirs(program, report))
            assert header and rows, (program, report)


@pytest.mark.parametrize("report", REPORTS)
@pytest.mark.parametrize("program", PROGRAMS)
def test_report_equals_nsys_stats(program, report):
    """Same header, same rows in the same order, numbers within test_nsys_stats' acceptance rules."""
    my_header, my_rows = _parse(stats_text.format_csv(*nsys_stats.REPORTS[report](_trace(program))))
    their_header, their_rows = _parse(_theirs(program, report))
    assert my_header == their_header
    assert [row[-1] for row in my_rows] == [row[-1] for row in their_rows]  # names, in nsys' order
    for mine, theirs in zip(my_rows, their_rows):
        bad = [(col, m, t) for col, m, t in zip(their_header, mine, theirs) if not _close(col, m, t)]
        assert not bad, f"row {theirs}: {bad}"


@pytest.mark.parametrize("report", REPORTS)
@pytest.mark.parametrize("program", PROGRAMS)
def test_cli_prints_the_nsys_csv_byte_for_byte(program, report, capsys):
    """Not only within the rules: on these captures every number rounds as nsys rounded it."""
    assert main(["stats", "--report", report, str(DATA / f"{program}.sqlite.gz")]) == 0
    assert capsys.readouterr().out == _theirs(program, report)


def test_the_pytorch_capture_has_what_it_was_written_for():
    """What makes the fixture worth having: default-domain ranges printed ``:name`` beside named
    domains, both named domains, a CUDA graph's kernels and cuDNN's templated kernel names."""
    _, nvtx_rows = _parse(_theirs("torch_train", "nvtx_sum"))
    ranges = [row[-1] for row in nvtx_rows]
    assert any(r.startswith(":") for r in ranges)
    assert any(r.startswith("trainer:") for r in ranges) and any(r.startswith("loader:") for r in ranges)
    _, api_rows = _parse(_theirs("torch_train", "cuda_api_sum"))
    assert any(row[-1].startswith("cudaGraphLaunch") for row in api_rows)  # nsys keeps "_v10000"
    _, kernel_rows = _parse(_theirs("torch_train", "cuda_gpu_kern_sum"))
    assert any("at::native::" in row[-1] for row in kernel_rows)


# --- ncu ---------------------------------------------------------------------------------------

def _raw():
    with open(DATA / "torch_kernels_raw.csv", newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1], rows[2:]


@functools.lru_cache(maxsize=None)
def _summary_text() -> str:
    import contextlib

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["ncu-summary", str(DATA / "torch_kernels.ncu-rep.gz")]) == 0
    return out.getvalue()


def _summary() -> list[dict]:
    return list(csv.DictReader(io.StringIO(_summary_text())))


def test_ncu_summary_lists_every_profiled_launch_in_order_with_ncus_values():
    mine = _summary()
    header, units, data = _raw()
    assert len(mine) == len(data) == 12
    for row, raw in zip(mine, data):
        assert row["ID"] == raw[header.index("ID")]
        for metric in SUMMARY_METRICS:
            i = header.index(metric)
            theirs = float(raw[i].replace(",", "")) * _SCALE[units[i]]
            # the raw page rounds to 6 significant digits
            assert float(row[metric]) == pytest.approx(theirs, rel=1e-5, abs=1e-6), (metric, row[metric], raw[i])


def test_ncu_summary_kernel_names_equal_the_raw_page(capsys):
    """Names from ncu itself (its raw page saved beside the report), so no note on stderr."""
    header, _, data = _raw()
    assert [row["Kernel Name"] for row in _summary()] == [raw[header.index("Kernel Name")] for raw in data]
    assert main(["ncu-summary", str(DATA / "torch_kernels.ncu-rep.gz")]) == 0
    assert capsys.readouterr().err == ""


def _corpus_names(program: str, base: str) -> list[str]:
    """Kernel names of ncu's raw page of ``program``'s report (``--print-kernel-base`` ``base``;
    ``default`` is ncu's own choice, the demangled base), in launch order."""
    with gzip.open(DATA / f"{program}_raw_{base}.csv.gz", "rt", newline="") as f:
        rows = list(csv.reader(f))
    return [r[rows[0].index("Kernel Name")] for r in rows[2:]]


def test_the_name_corpus_is_hundreds_of_templated_kernels_of_four_libraries():
    """tests/data/thirdparty_h100/*_many: 779 launches of 361 distinct kernels (ATen, cuDNN, cub,
    thrust, cuco, cuDF) that ncu profiled from three programs; both raw pages list the same launches."""
    symbols = set()
    for program in ("torch_many", "cupy_many", "cudf_many"):
        printed, mangled = _corpus_names(program, "default"), _corpus_names(program, "mangled")
        assert len(printed) == len(mangled) > 50
        symbols.update(mangled)
    assert len(symbols) > 300
    prefixes = ("_ZN2at6native", "_ZN3cub", "_ZN6thrust", "_ZN4cudf", "_ZN4cuco", "_ZN14at_cuda_detail3cub")
    assert all(any(s.startswith(p) for s in symbols) for p in prefixes)


def test_one_kernel_symbol_is_printed_two_ways_by_one_ncu():
    """Why ncu-summary takes ncu's printed names instead of deriving them: the same symbol, from the
    same ncu 2025.3.1 on the same GPU model (H100, two machines a day apart), prints with ``at::`` in one report and ``native::`` in another,
    so no rule over the symbol can give ncu's name (analysis.readers.ncu.raw_page_beside)."""
    from analysis.readers.ncu import read_launches

    in_fixture = {x.mangled_name: x.kernel_name for x in read_launches(DATA / "torch_kernels.ncu-rep.gz")}
    in_corpus = dict(zip(_corpus_names("torch_many", "mangled"), _corpus_names("torch_many", "default")))
    symbol = ("_ZN2at6native29vectorized_elementwise_kernelILi8EZNS0_25bfloat16_copy_kernel_cudaERNS_18"
              "TensorIteratorBaseEEUlfE_St5arrayIPcLm2EEEEviT0_T1_")
    assert in_fixture[symbol].startswith("void at::vectorized_elementwise_kernel<8, at::bfloat16_copy_kernel_cuda(")
    assert in_corpus[symbol].startswith("void native::vectorized_elementwise_kernel<8, native::bfloat16_copy_kernel_cuda(")
    shared = [m for m in in_fixture if m in in_corpus]
    assert len(shared) >= 3 and all(in_fixture[m] != in_corpus[m] for m in shared if "at6native" in m)


def test_without_a_raw_page_or_ncu_the_names_are_the_suites_and_it_says_so(tmp_path, monkeypatch, capsys):
    from analysis.readers.ncu import NAMES_FROM_REPORT_MODULE, cli_kernel_name, read_launches

    alone = tmp_path / "torch_kernels.ncu-rep.gz"
    alone.write_bytes((DATA / "torch_kernels.ncu-rep.gz").read_bytes())
    monkeypatch.setenv("PATH", str(tmp_path))  # no ncu
    launches = read_launches(alone)
    assert {x.name_source for x in launches} == {NAMES_FROM_REPORT_MODULE}
    assert [x.kernel_name for x in launches] == [cli_kernel_name(x.demangled_name) for x in launches]
    assert main(["ncu-summary", str(alone)]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ncu prints some C++ namespaces differently" in err


def test_a_raw_page_of_another_report_is_refused(capsys):
    assert main(["ncu-summary", "--raw-page", str(DATA / "cupy_many_raw_default.csv.gz"),
                 str(DATA / "torch_kernels.ncu-rep.gz")]) == 2
    err = capsys.readouterr().err
    assert "cupy_many_raw_default.csv.gz" in err and "a raw page of another report" in err


def test_names_come_from_the_installed_ncu_when_no_raw_page_is_beside(tmp_path, monkeypatch):
    """With ``ncu`` on PATH and no raw page beside the report, ncu-summary asks ``ncu --import`` for the
    raw page; here ``ncu`` replays the real raw page captured from this report."""
    from analysis.readers.ncu import NAMES_FROM_NCU, read_launches

    alone = tmp_path / "torch_kernels.ncu-rep.gz"
    alone.write_bytes((DATA / "torch_kernels.ncu-rep.gz").read_bytes())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ncu = bin_dir / "ncu"
    ncu.write_text("#!/bin/sh\n"
                   f"echo \"$@\" > {tmp_path / 'argv'}\n"
                   f"cat {DATA / 'torch_kernels_raw.csv'}\n")
    ncu.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    launches = read_launches(alone)
    argv = (tmp_path / "argv").read_text().split()
    assert argv[0] == "--import" and argv[1].endswith(".ncu-rep") and "--page" in argv and "raw" in argv
    header, _, data = _raw()
    assert [x.kernel_name for x in launches] == [r[header.index("Kernel Name")] for r in data]
    assert {x.name_source for x in launches} == {NAMES_FROM_NCU}


def test_ncu_summary_names_keep_the_kernel_and_its_template_arguments():
    """What does hold today: each name ends with the raw page's function name and template arguments
    as ncu prints them (integer casts removed), only the qualifiers before it differ."""
    header, _, data = _raw()
    for row, raw in zip(_summary(), data):
        theirs = raw[header.index("Kernel Name")]
        mine = row["Kernel Name"]
        function = mine.split("<")[0].split("(")[0]
        assert function and function in theirs, (mine, theirs)
        assert not re.search(r"\((?:unsigned )?(?:int|long)\)\d", mine), mine  # "(int)8" is ncu_report's form


def test_lines_ncu_prints_before_the_table_are_skipped():
    from analysis.readers.ncu import parse_raw_page_names

    page = (DATA / "torch_kernels_raw.csv").read_text()
    header, _, data = _raw()
    names = [(int(r[header.index("ID")]), r[header.index("Kernel Name")]) for r in data]
    assert parse_raw_page_names("==PROF== Disconnected\n==WARNING== a note\n" + page, "x") == names
    with pytest.raises(Exception, match="not ncu's raw page"):
        parse_raw_page_names("==PROF== Disconnected\n", "x")


def test_diagnose_names_the_library_of_every_templated_kernel_in_the_corpus():
    """``python -m analysis diagnose`` gives library kernels no launch-configuration advice: it must
    know them by the names ncu prints, which drop namespaces unevenly (CUB's ``DeviceReduceKernel``
    printed as ``reduce::...``). PyTorch's and cuDF's programs launch only library kernels; CuPy's
    ``cupy_*`` elementwise kernels are compiled for the program, its sorts and scans are CUB's."""
    from analysis.report.diagnose import library_of

    for program in ("torch_many", "cudf_many"):
        names = set(_corpus_names(program, "default"))
        assert len(names) > 80
        assert [n for n in names if library_of(n) is None] == [], program
    cupy = set(_corpus_names("cupy_many", "default"))
    own = {n for n in cupy if n.startswith("cupy_")}
    assert own and all(library_of(n) is None for n in own)
    assert {library_of(n) for n in cupy if "Device" in n and "Kernel" in n} == {"CUB/Thrust"}
