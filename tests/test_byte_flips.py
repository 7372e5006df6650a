"""Every committed capture (.ncu-rep, .sqlite; the gzipped ones decompressed), with bytes flipped at
seeded positions: each reader gives a result or an AnalysisInputError naming the file, never a
crash of the test process and never another exception.

The default run makes one damaged copy of each capture (the same positions on every run); with
HYPOTHESIS_PROFILE=deep it makes several per capture at random positions (the seed is printed).
"""
from __future__ import annotations

import gzip
import os
import random
import zlib

import pytest

from analysis.common.errors import AnalysisInputError
from analysis.readers.ncu import NCU_REP_MAGIC, read_launches
from analysis.readers.ncu_source import kernel_names, read_kernel_profile

from conftest import DEEP, REPO
from test_fuzz_readers import _read_everything

CAPTURES = sorted(p for pattern in ("*.ncu-rep", "*.ncu-rep.gz", "*.sqlite", "*.sqlite.gz")
                  for root in (REPO / "reports" / "reference", REPO / "tests" / "data")
                  for p in root.rglob(pattern))
COPIES = 8 if DEEP else 1
FLIPS_PER_COPY = 4
#: the deep profile's runs differ; the seed is printed so a failure can be replayed
RUN_SEED = int.from_bytes(os.urandom(4), "little") if DEEP else 0


def _plain_bytes(path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.name.endswith(".gz") else data


def _damaged(data: bytes, rng: random.Random) -> bytes:
    """FLIPS_PER_COPY bits flipped: one in the first 4 KiB (headers, where one bit does the most
    harm to either format), the rest anywhere."""
    b = bytearray(data)
    positions = [rng.randrange(min(4096, len(b)))] + [rng.randrange(len(b)) for _ in range(FLIPS_PER_COPY - 1)]
    for pos in positions:
        b[pos] ^= 1 << rng.randrange(8)
    return bytes(b)


def _typed_or_value(fn, *args):
    try:
        return fn(*args)
    except AnalysisInputError as e:
        assert e.path == str(args[0]), e
        return None


def test_there_are_captures_of_both_kinds():
    names = [p.name for p in CAPTURES]
    assert sum(".ncu-rep" in n for n in names) >= 10 and sum(".sqlite" in n for n in names) >= 30


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: str(p.relative_to(REPO)))
def test_byte_flipped_capture(capture, tmp_path):
    data = _plain_bytes(capture)
    rel = str(capture.relative_to(REPO))
    kind = ".ncu-rep" if ".ncu-rep" in capture.name else ".sqlite"
    for copy in range(COPIES):
        seed = zlib.crc32(f"{RUN_SEED}:{rel}:{copy}".encode())
        damaged = tmp_path / f"damaged{copy}{kind}"
        damaged.write_bytes(_damaged(data, random.Random(seed)))
        print(f"{rel} copy {copy}: run seed {RUN_SEED}, seed {seed}")
        if kind == ".ncu-rep":
            assert data.startswith(NCU_REP_MAGIC)
            launches = _typed_or_value(read_launches, damaged)
            assert launches is None or all(launch.kernel_name for launch in launches)
            _typed_or_value(kernel_names, damaged)
            _typed_or_value(read_kernel_profile, damaged, 0)
        else:
            _read_everything(str(damaged))


def test_crash_inside_ncu_report_is_a_typed_error(tmp_path):
    """Bit 0 of byte 15 damages the report's header: ncu_report aborts the process (SIGABRT, "Check
    failed: count >= 0"); the reader's child takes the abort, the caller gets the file named."""
    source = REPO / "reports/reference/h200/numba_ufunc/streams/n268435456/ncu.ncu-rep.gz"
    data = bytearray(_plain_bytes(source))
    data[15] ^= 0x01
    damaged = tmp_path / "header-flip.ncu-rep"
    damaged.write_bytes(bytes(data))
    for read in (read_launches, kernel_names, lambda p: read_kernel_profile(p, 0)):
        with pytest.raises(AnalysisInputError, match="header-flip.ncu-rep.*crashed.*SIGABRT") as caught:
            read(damaged)
        assert "pip package ncu-report" in str(caught.value) or "Nsight Compute install" in str(caught.value)


def test_reader_module_is_checked_once_and_named():
    from analysis.readers.ncu_child import reader_module
    module = reader_module()
    assert reader_module() is module  # checked once per process
    assert str(module).startswith("ncu_report ") and os.path.exists(module.file)


def test_kernel_page_on_a_damaged_kernel_report_names_the_file_and_metric(tmp_path, capsys):
    """Twelve flipped bits that leave a source-counter instance without a value: the page's sums
    raised TypeError (ncu_source.py, issue 20); now the metric is named."""
    from analysis.cli.main import main

    source = REPO / "reports/reference/h200/kernels/warp_sph_baseline_get_acceleration/kernel.ncu-rep.gz"
    data = bytearray(_plain_bytes(source))
    for pos, mask in [(1133260, 8), (1988679, 128), (536636, 32), (1823071, 128), (2206029, 32), (459654, 8),
                      (1763771, 1), (1095549, 4), (99667, 1), (818238, 4), (957290, 1), (1195618, 32)]:
        data[pos] ^= mask
    damaged = tmp_path / "kernel-damaged.ncu-rep"
    damaged.write_bytes(bytes(data))
    assert main(["kernel-page", "--report", str(damaged), "--output", str(tmp_path / "page.md")]) == 2
    err = capsys.readouterr().err
    assert "kernel-damaged.ncu-rep" in err and "smsp__pcsamp_warps_issue_stalled_" in err, err
    assert "not a number" in err and not (tmp_path / "page.md").exists()


def _copy_of_a_report(tmp_path):
    """A committed report under another path: read by a child each time (conftest keeps committed reads)."""
    copy = tmp_path / "copy.ncu-rep"
    copy.write_bytes(_plain_bytes(REPO / "reports/reference/h200/cupy_sqdiff/raw_kernel/n16384/ncu.ncu-rep.gz"))
    return copy


def test_a_read_past_the_time_limit_is_stopped_and_the_next_read_works(tmp_path, monkeypatch):
    """A damaged report can make the native reader spin: past READ_TIMEOUT_S its child is killed and
    the report named; the template that forks the children serves the next read."""
    from analysis.readers import ncu_child

    report = _copy_of_a_report(tmp_path)
    monkeypatch.setattr(ncu_child, "READ_TIMEOUT_S", 0.001)
    with pytest.raises(AnalysisInputError, match=r"copy.ncu-rep.*took over 0.001 s"):
        ncu_child.read_report("kernel_names", report)
    monkeypatch.setattr(ncu_child, "READ_TIMEOUT_S", 300)
    assert ncu_child.read_report("kernel_names", report) == ["cookbook_squared_diff_raw"]


def test_a_forked_caller_reads_through_a_template_of_its_own(tmp_path):
    """The template's pipes belong to the process that started it: a fork of that process (a
    pipeline job started by fork, a multiprocessing worker) starts its own and both keep reading."""
    from analysis.readers import ncu_child

    report = _copy_of_a_report(tmp_path)
    assert ncu_child.read_report("kernel_names", report) == ["cookbook_squared_diff_raw"]
    result = tmp_path / "child.txt"
    pid = os.fork()
    if pid == 0:
        try:
            result.write_text(",".join(ncu_child.read_report("kernel_names", report)))
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert result.read_text() == "cookbook_squared_diff_raw"
    assert ncu_child.read_report("kernel_names", report) == ["cookbook_squared_diff_raw"]


def test_the_template_finds_the_one_host_library_the_readers_load(tmp_path):
    """The template loads NVIDIA's NVPerf host library before it forks (a child loading it took most
    of a read's time): the pip package's copy beside the module; in an install, the one under host/,
    and none where there are several to choose from."""
    import ncu_report

    from analysis.readers import ncu_child
    [library] = ncu_child._nvperf_host_libraries(ncu_report)
    assert os.path.dirname(library) == os.path.dirname(ncu_report.__file__)

    class Installed:  # an Nsight Compute install's extras/python/ncu_report.py
        __file__ = str(tmp_path / "extras" / "python" / "ncu_report.py")

    assert ncu_child._nvperf_host_libraries(Installed) == []
    for platform in ("linux-desktop-glibc_2_11_3-x64", "linux-desktop-t210-a64"):
        (tmp_path / "host" / platform).mkdir(parents=True)
        (tmp_path / "host" / platform / "libnvperf_host.so").write_bytes(b"")
        found = ncu_child._nvperf_host_libraries(Installed)
        assert found == ([str(tmp_path / "host" / platform / "libnvperf_host.so")]
                         if platform.endswith("x64") else [])
