"""The per-source-line reader (analysis/readers/ncu_source.py) on the committed ncu reports. The pipeline
compiles the recipes' kernels without line information (only a kernel page's run asks for it) and
profiles each recipe's ``ncu.full_variants`` with ``--set full --import-source yes``, the other steps
for the page's metrics alone (no per-instruction counters): the H200 reference's full-set reports
and the H100 reference's (every step there was profiled with the full set) give per-address counters
without lines; line tables come from the H100 kernel-page capture of PyCUDA's ``scale_vec4``
(``-lineinfo`` and the ``#line`` directive) and from the previous H200 reference's PyCUDA scalar
kernels (tests/data/ncu_lineinfo_pycuda_h200: ``-lineinfo``, no directive). Totals are checked
against the kernel-level metrics of the same report (there is no ncu here to print its Source page)."""
from __future__ import annotations

import gzip
import inspect
import os
import re
import shutil

import pytest

from analysis.common.errors import AnalysisInputError
from analysis.readers.ncu_source import (PythonLine, SourceFile, _source_view, has_warp_comments, kernel_names,
                                 read_kernel_profile, warp_python_lines)

from conftest import REFERENCE, REPO, reference_runs

NCU_RUNS = [r for r in reference_runs() if (r / "ncu.ncu-rep.gz").exists()]
PYCUDA = REFERENCE / "pycuda_kernel"
SIZE = 268435456  # the PyCUDA and Numba captures' size
H100 = REPO / "reports" / "reference" / "h100"
H100_NCU_RUNS = sorted(p.parent for p in H100.glob("*/*/n*/ncu.ncu-rep.gz"))
#: PyCUDA's scalar kernels with a line table (README there)
PYCUDA_LINEINFO = REPO / "tests" / "data" / "ncu_lineinfo_pycuda_h200"
#: kernel_profile's capture of scale_vec4 on the H100: -lineinfo, the #line directive, sources imported
VEC4_KERNEL_PAGE = H100 / "kernels" / "pycuda_kernel_vectorized_scale_vec4" / "kernel.ncu-rep.gz"


def _full_set_steps() -> set[str]:
    """"workload/variant" of the steps the recipes' facts (workloads/<recipe>/profile.yaml) have ncu profile with the full set (a recipe's
    ``ncu.full_variants``, all its ncu variants when it names none), where the recipe leaves ncu's
    sections as the set has them: the steps whose reports carry per-instruction counters."""
    from workloads.registry import facts_for_run

    workloads = facts_for_run("default")
    return {f"{w}/{v}" for w, c in workloads.items() if not c["ncu"].get("sections")
            for v in c["ncu"].get("full_variants", c["ncu"]["variants"])}


def _report(run):
    return str(run / "ncu.ncu-rep.gz")


def _ids(run):
    return "/".join(run.parts[-3:-1])


def _ref_ids(run):
    return f"{run.parts[-4]}:{_ids(run)}"


#: reports with per-instruction counters: the full-set steps of the H200 and H100 references
SOURCE_COUNTED_RUNS = [r for r in NCU_RUNS + H100_NCU_RUNS if _ids(r) in _full_set_steps()]


@pytest.fixture(scope="module")
def profiles():
    return {_ids(r): read_kernel_profile(_report(r)) for r in NCU_RUNS}


@pytest.fixture(scope="module")
def counted_profiles(profiles):
    """``_ref_ids(run)`` -> profile, for SOURCE_COUNTED_RUNS."""
    return {_ref_ids(r): profiles[_ids(r)] if r in NCU_RUNS else read_kernel_profile(_report(r))
            for r in SOURCE_COUNTED_RUNS}


def test_every_committed_report_is_read(profiles):
    assert len(profiles) >= 8
    assert {k.split("/")[0] for k in profiles} >= {"pycuda_kernel", "numba_ufunc", "cupy_sqdiff"}


def test_per_instruction_counters_are_in_the_full_set_reports_only(profiles):
    """The H200 reference's steps profiled with the full set carry PC samples and per-instruction
    counts; the others (the page's metrics alone, or the full set less the instrumented sections)
    give a source view with no lines and no samples, and say why."""
    full = _full_set_steps()
    counted = {k for k, p in profiles.items() if p.metrics["smsp__pcsamp_sample_count"] is not None}
    assert counted == full & set(profiles)
    assert len(full & set(profiles)) >= 4
    for name, k in profiles.items():
        if name in full:
            continue
        s = k.source
        assert not s.has_line_info and s.lines == () and s.files == () and s.total_samples == 0, name
        assert k.metrics["smsp__inst_executed.sum"] is None, name
        if s.total_instructions == 0:
            assert s.reason.startswith("no source counters: the report holds no per-instruction metrics"), name


@pytest.mark.parametrize("run", SOURCE_COUNTED_RUNS, ids=_ref_ids)
def test_per_address_counters_add_up_to_the_kernel_level_metrics(run, counted_profiles):
    k = counted_profiles[_ref_ids(run)]
    s = k.source
    # a kernel of a few instructions may get no PC sample at all (JAX's jit, launch 0)
    assert s.total_samples == k.metrics["smsp__pcsamp_sample_count"] >= 0
    if run.parts[-3] in ("pycuda_kernel", "numba_ufunc", "cupy_sqdiff"):
        assert s.total_instructions == k.metrics["smsp__inst_executed.sum"] > 0
    else:
        # the per-address and the kernel-level counts come from different replay passes; kernels whose
        # work is scheduled at run time (cuBLAS' nvjet tile scheduler, Warp's hash-grid queries) execute
        # slightly different instruction counts per pass: measured 1.7% (nvjet, H200), 2.3% (nvjet, H100)
        # and under 0.1% (Warp)
        assert s.total_instructions == pytest.approx(k.metrics["smsp__inst_executed.sum"], rel=0.03)
        assert s.total_instructions > 0
    # every sample and instruction is on a line or counted as unattributed, none twice
    assert sum(sl.samples for sl in s.lines) + s.unattributed_samples == s.total_samples
    assert sum(sl.instructions for sl in s.lines) + s.unattributed_instructions == s.total_instructions
    # the stall reasons split the samples: their sum is the sample count, per kernel and per line
    assert sum(n for _, n in k.stalls) == s.total_samples
    for sl in s.lines:
        assert sum(n for _, n in sl.stalls) == sl.samples
        assert 0 <= sl.not_issued_samples <= sl.samples
    if s.total_samples:
        assert sum(sl.samples_pct for sl in s.lines) == pytest.approx(
            100.0 * (1 - s.unattributed_samples / s.total_samples))
    assert [sl.samples for sl in s.lines] == sorted((sl.samples for sl in s.lines), reverse=True)


@pytest.fixture(scope="module")
def pycuda_lineinfo():
    """variant -> profile of PyCUDA's scalar kernels compiled with -lineinfo, no #line directive."""
    return {v: read_kernel_profile(str(PYCUDA_LINEINFO / f"{v}.ncu-rep.gz")) for v in ("baseline", "device_resident")}


@pytest.fixture(scope="module")
def vec4_kernel_page():
    return read_kernel_profile(str(VEC4_KERNEL_PAGE))


@pytest.mark.parametrize("variant", ["baseline", "device_resident"])
def test_pycuda_lines_fall_inside_the_profiled_kernels_source(variant, pycuda_lineinfo):
    from workloads.pycuda_kernel.kernels import SOURCE

    k = pycuda_lineinfo[variant]
    s = k.source
    assert s.has_line_info and s.unattributed_samples == 0
    # PyCUDA compiles `extern "C" {` + SOURCE + `}` as kernel.cu in a temporary folder it deletes
    # before ncu imports sources: the line numbers are there, the text is not
    assert len(s.files) == 1 and re.fullmatch(r"/tmp/tmp\w+/kernel\.cu", s.files[0].name)
    assert not s.files[0].imported and all(sl.text is None for sl in s.lines)
    cu = ('extern "C" {\n' + SOURCE).splitlines()
    start = next(i for i, t in enumerate(cu, 1) if f"void {k.function_name}(" in t)
    end = next(i for i, t in enumerate(cu, 1) if i > start and t == "}")
    assert all(start <= sl.line <= end for sl in s.lines), [sl.line for sl in s.lines]
    assert s.lines[0].samples_pct > 90  # one line holds nearly all samples: a streaming kernel


def test_pycuda_lines_with_the_line_directive_are_the_python_files_lines_with_their_text(vec4_kernel_page):
    """The kernel-page capture (#line directive): the line table names the Python file that holds the
    CUDA text, ncu imported it, and every line with samples is a line of the profiled kernel."""
    from workloads.pycuda_kernel.kernels import SOURCE

    k = vec4_kernel_page
    s = k.source
    assert k.function_name == "scale_vec4"
    assert s.has_line_info and s.unattributed_samples == 0
    assert len(s.files) == 1 and s.files[0].name.endswith("/workloads/pycuda_kernel/kernels.py") and s.files[0].imported
    cu = SOURCE.splitlines()
    start = next(i for i, t in enumerate(cu) if "void scale_vec4(" in t)
    end = next(i for i, t in enumerate(cu) if i > start and t == "}")
    body = {t.strip() for t in cu[start:end + 1]}
    assert all(sl.text is not None and sl.text.strip() in body for sl in s.lines), [sl.text for sl in s.lines]
    # the numbers are the Python file's: consecutive source lines keep their distance there
    at = {sl.text.strip(): sl.line for sl in s.lines}
    assert at["out4[i] = v;"] - at["float4 v = in4[i];"] == 2
    assert s.lines[0].samples_pct > 90  # one line holds nearly all samples: a streaming kernel


def test_vectorized_kernel_stalls_at_the_use_of_the_float4_load(vec4_kernel_page):
    s = vec4_kernel_page.source
    text = {sl.line: sl.text.strip() for sl in s.lines}
    hottest = s.lines[0]
    # the samples wait on the multiply that uses the loaded float4, not on the load itself
    assert text[hottest.line].startswith("v.x *= 2.0f")
    assert hottest.stalls[0][0] == "long_scoreboard"
    # the load and the store each need n*4 bytes of 32-byte L2 sectors, nothing else touches memory
    by_l2 = {text[sl.line]: sl.l2_sectors for sl in s.lines if sl.l2_sectors}
    assert by_l2 == {"float4 v = in4[i];": SIZE * 4 // 32, "out4[i] = v;": SIZE * 4 // 32}


@pytest.mark.parametrize("variant", ["baseline", "device_resident"])
def test_scalar_pycuda_kernels_are_hottest_on_their_load_store_line(variant, pycuda_lineinfo):
    from workloads.pycuda_kernel.kernels import SOURCE

    cu = ('extern "C" {\n' + SOURCE).splitlines()
    s = pycuda_lineinfo[variant].source
    assert cu[s.lines[0].line - 1].strip() == "out[i] = 2.0f * in[i];"
    assert s.lines[0].l2_sectors == 2 * SIZE * 4 // 32


@pytest.mark.parametrize("run", SOURCE_COUNTED_RUNS, ids=_ref_ids)
def test_kernels_without_lineinfo_give_a_typed_no_line_information_result(run, counted_profiles):
    """The recipes' runs compile every kernel without line information (the kernel pages' runs ask
    for it): the full-set reports of both references give the typed result."""
    k = counted_profiles[_ref_ids(run)]
    s = k.source
    assert not s.has_line_info and s.lines == () and s.files == ()
    assert "without line information" in s.reason
    assert s.unattributed_samples == s.total_samples > 0
    # the fallback: SASS instructions by samples, each with its text and no source location
    hot = s.hottest_instructions
    assert hot and hot[0].samples == max(i.samples for i in hot) and hot[0].sass
    assert all(i.file is None and i.line is None and i.offset >= 0 for i in hot)


def test_numba_names_keep_the_python_name_before_the_abi_tags(profiles):
    assert profiles["numba_ufunc/baseline"].function_name.startswith("__vectorized_mycalculation[abi:")
    assert profiles["numba_ufunc/streams"].function_name.startswith("mycalculation_kernel[abi:")
    # the ncu CLI's form (raw page) drops "abi:"
    assert profiles["numba_ufunc/streams"].display_name.startswith("mycalculation_kernel[v1,")


def test_a_report_with_two_kernels_reads_each_launch():
    run = REFERENCE / "cupy_sqdiff" / "baseline" / "n16384"
    names = kernel_names(_report(run))
    assert len(names) >= 2
    for i, name in enumerate(names[:2]):
        k = read_kernel_profile(_report(run), launch=i)
        assert k.function_name == name and k.launches_in_report == len(names)
    with pytest.raises(AnalysisInputError, match="no launch"):
        read_kernel_profile(_report(run), launch=len(names))


def test_plain_and_gzipped_reports_read_the_same(tmp_path):
    gz = PYCUDA / "vectorized" / "n268435456" / "ncu.ncu-rep.gz"
    plain = tmp_path / "r.ncu-rep"
    with gzip.open(gz, "rb") as src, open(plain, "wb") as dst:
        shutil.copyfileobj(src, dst)
    a, b = read_kernel_profile(str(gz)), read_kernel_profile(str(plain))
    assert a.source == b.source and a.metrics == b.metrics


def test_bad_inputs_raise_typed_errors(tmp_path):
    with pytest.raises(AnalysisInputError, match="no such file"):
        read_kernel_profile(str(tmp_path / "missing.ncu-rep"))
    bogus = tmp_path / "x.ncu-rep"
    bogus.write_bytes(b"not a report")
    with pytest.raises(AnalysisInputError, match="magic"):
        read_kernel_profile(str(bogus))


# --- Warp's generated source: map lines back to Python ------------------------------------------------


@pytest.fixture(scope="module")
def warp_generated(tmp_path_factory):
    """Real Warp output: a kernel compiled for Warp's CPU device, whose generated C++ carries the same
    per-statement ``// <python>  <L n>`` comments as the CUDA it generates for a GPU."""
    wp = pytest.importorskip("warp")
    cache = tmp_path_factory.mktemp("warp-cache")
    saved = wp.config.kernel_cache_dir
    wp.config.kernel_cache_dir = str(cache)

    @wp.kernel
    def pairwise(x: wp.array(dtype=float), out: wp.array(dtype=float), n: int):
        i = wp.tid()
        s = float(0.0)  # a variable, not a constant: the loop below changes it
        for j in range(n):
            d = x[j] - x[i]
            s += d * d
        out[i] = wp.sqrt(s)

    x = wp.array([1.0, 2.0, 4.0], dtype=float, device="cpu")
    out = wp.zeros(3, dtype=float, device="cpu")
    wp.launch(pairwise, dim=3, inputs=[x, out, 3], device="cpu")
    assert out.numpy().tolist() == pytest.approx([10 ** 0.5, 5 ** 0.5, 13 ** 0.5])
    generated = list(cache.rglob("*.cpp"))
    assert len(generated) == 1
    src_lines, first = inspect.getsourcelines(pairwise.func)
    yield generated[0].read_text(), {first + i: t.strip() for i, t in enumerate(src_lines)}
    # Warp resolved its cache folder at initialisation: setting None back afterwards breaks later
    # Warp tests of the session, so only a real previous folder is restored
    if saved is not None:
        wp.config.kernel_cache_dir = saved


def test_warp_generated_lines_map_to_the_python_statement_above_them(warp_generated):
    text, python = warp_generated
    assert has_warp_comments(text)
    mapping = warp_python_lines(text)
    lines = text.splitlines()
    assert len(mapping) == len(lines)
    mapped = [(c, p) for c, p in zip(lines, mapping) if p is not None]
    assert mapped
    for _, p in mapped:
        # the comment quotes the Python line it names (backward-pass comments prefix "adj: ")
        assert python[p.line] == p.text.removeprefix("adj: "), (p, python.get(p.line))
    # the CUDA/C++ of `d = x[j] - x[i]` (a wp::sub) maps to that Python line
    d_line = next(n for n, t in python.items() if t == "d = x[j] - x[i]")
    subs = [p for c, p in mapped if "wp::sub(" in c and "adj_" not in c]
    assert subs and all(p == PythonLine(d_line, "d = x[j] - x[i]") for p in subs)
    # the kernel's signature and Warp's own prologue map to no statement
    sig = next(i for i, c in enumerate(lines) if "_cpu_kernel_forward(" in c)
    assert mapping[sig] is None


def test_source_without_warp_comments_maps_nothing():
    from workloads.pycuda_kernel.kernels import SOURCE

    assert not has_warp_comments(SOURCE)
    assert set(warp_python_lines(SOURCE)) == {None}


# --- source text for CUDA kept in a Python file (#line directive: workloads/cuda_source.py) -----------------
#
# The H100 kernel-page capture of scale_vec4 has it (tests above); the cases no capture shows (a file
# ncu found elsewhere, two candidates, a file it could not import) use a stand-in for ncu_report's
# action whose line table names the Python file on the capture host, a path that does not exist here,
# as a `#line` directive makes it.


class _Ids:
    def __init__(self, addresses):
        self._addresses = addresses

    def num_instances(self):
        return len(self._addresses)

    def value(self, i):
        return self._addresses[i]


class _Metric:
    def __init__(self, by_address):
        self._items = list(by_address.items())

    def has_correlation_ids(self):
        return True

    def correlation_ids(self):
        return _Ids([a for a, _ in self._items])

    def num_instances(self):
        return len(self._items)

    def value(self, i):
        return self._items[i][1]


class _Where:
    def __init__(self, file, line):
        self._file, self._line = file, line

    def file_name(self):
        return self._file

    def line(self):
        return self._line


class _Action:
    """Addresses -> (file, line), samples and instructions per address, and the imported files."""

    def __init__(self, where, samples, files):
        self._where, self._files = where, files
        self._metrics = {"smsp__pcsamp_sample_count": _Metric(samples),
                         "inst_executed": _Metric({a: 32 for a in where}),
                         "smsp__pcsamp_warps_issue_stalled_long_scoreboard": _Metric(samples)}

    def metric_by_name(self, name):
        return self._metrics.get(name)

    def metric_names(self):
        return list(self._metrics)

    def source_info(self, pc):
        return _Where(*self._where[pc])

    def sass_by_pc(self, pc):
        return f"INSTR_{pc:x}"

    def source_files(self):
        return self._files


CAPTURE_HOST_PATH = "/gpu-host/checkout/workloads/pycuda_kernel/kernels.py"


def _vec4_action(files):
    """The vec4 kernel's load, multiply and store lines, numbered as the #line directive numbers them."""
    from pathlib import Path

    from workloads.cuda_source import source_line
    from workloads.pycuda_kernel import kernels

    first = source_line(kernels.SOURCE, kernels.__file__)
    text = kernels.SOURCE.splitlines()
    at = {t.strip(): first + i for i, t in enumerate(text) if t.strip()}
    load, mul, store = at["float4 v = in4[i];"], at["v.x *= 2.0f; v.y *= 2.0f; v.z *= 2.0f; v.w *= 2.0f;"], \
        at["out4[i] = v;"]
    where = {0x100: (CAPTURE_HOST_PATH, load), 0x110: (CAPTURE_HOST_PATH, mul), 0x120: (CAPTURE_HOST_PATH, store)}
    action = _Action(where, {0x100: 5, 0x110: 90, 0x120: 5}, files(Path(kernels.__file__).read_text()))
    return action, (load, mul, store)


def test_text_of_a_python_file_outside_the_report_comes_from_what_ncu_imported():
    assert not os.path.exists(CAPTURE_HOST_PATH)  # read from the report, never from this disk
    action, (load, mul, store) = _vec4_action(lambda text: {CAPTURE_HOST_PATH: text})
    view = _source_view(action, 100)
    assert view.has_line_info and view.unattributed_samples == 0
    assert [(sl.line, sl.text.strip(), sl.samples) for sl in view.lines] == [
        (mul, "v.x *= 2.0f; v.y *= 2.0f; v.z *= 2.0f; v.w *= 2.0f;", 90),
        (load, "float4 v = in4[i];", 5), (store, "out4[i] = v;", 5)]
    assert view.files == (SourceFile(CAPTURE_HOST_PATH, True, 100),)
    assert all(sl.python is None for sl in view.lines)  # no Warp comments in this file


def test_a_file_ncu_found_in_another_folder_is_matched_by_its_name():
    # ncu stores the path where --source-folders found a file missing at its recorded path
    action, (_, mul, _) = _vec4_action(lambda text: {"/elsewhere/kernels.py": text, "/x/other.h": "int x;\n"})
    view = _source_view(action, 100)
    assert view.lines[0].line == mul and view.lines[0].text.strip().startswith("v.x *= 2.0f")
    # two candidates of that name: no guess, no text
    action, _ = _vec4_action(lambda text: {"/a/kernels.py": text, "/b/kernels.py": text})
    view = _source_view(action, 100)
    assert all(sl.text is None for sl in view.lines) and view.files[0].imported is False


def test_a_file_ncu_could_not_import_has_line_numbers_but_no_text():
    # what the PyCUDA captures without the directive hold: the file's entry with empty text
    action, _ = _vec4_action(lambda text: {CAPTURE_HOST_PATH: ""})
    view = _source_view(action, 100)
    assert view.has_line_info and all(sl.text is None for sl in view.lines)
    assert view.files == (SourceFile(CAPTURE_HOST_PATH, False, 100),)
