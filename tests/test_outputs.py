"""Outputs (analysis/common/outputs.py): only a regular file at the target is replaced, temporary names are
unique and never left behind, and a command writes nothing before its inputs are checked."""
from __future__ import annotations

import json
import os
import stat
import threading

import pytest

from analysis.common import outputs
from analysis.cli.main import main
from analysis.common.outputs import UnsafeOutputError, atomic_output, write_text_atomic
from analysis.model.run_summary import summarize_run

from conftest import REFERENCE


def _leftovers(folder) -> list[str]:
    return [n for n in os.listdir(folder) if ".tmp" in n]


def test_symlink_target_is_refused_and_kept(tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep me")
    link = tmp_path / "out.md"
    link.symlink_to(target)
    with pytest.raises(UnsafeOutputError, match="out.md.*symlink"):
        write_text_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "keep me"
    assert not _leftovers(tmp_path)


def test_directory_target_is_refused_without_leftovers(tmp_path):
    (tmp_path / "out.json").mkdir()
    with pytest.raises(UnsafeOutputError, match="directory"):
        write_text_atomic(tmp_path / "out.json", "{}")
    assert (tmp_path / "out.json").is_dir() and not _leftovers(tmp_path)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_device_target_is_refused(tmp_path):
    dev = tmp_path / "null"
    os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a /dev/null of our own
    with pytest.raises(UnsafeOutputError, match="device"):
        write_text_atomic(dev, "x")
    assert stat.S_ISCHR(os.lstat(dev).st_mode)


def test_temporary_is_removed_on_error_and_target_kept(tmp_path):
    out = tmp_path / "fig.png"
    out.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_output(out, suffix=".png") as tmp:
            open(tmp, "wb").write(b"half")
            raise RuntimeError("drawing failed")
    assert out.read_bytes() == b"old" and not _leftovers(tmp_path)


def test_concurrent_writers_of_one_figure_do_not_collide(tmp_path):
    """Two writers of one figure at once (the fixed <fig>.tmp.png name made 1 pair in 13 crash)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = tmp_path / "fig.png"
    errors = []

    def draw():
        try:
            for _ in range(5):
                fig, ax = plt.subplots(figsize=(2, 2))
                ax.plot([0, 1], [0, 1])
                outputs.save_figure_atomic(fig, path, dpi=50)
        except Exception as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    with atomic_output(path, ".png") as a, atomic_output(tmp_path / "fig.png", ".png") as b:
        assert a != b  # unique per writer, not per target
        open(a, "w").close()
        open(b, "w").close()
    threads = [threading.Thread(target=draw) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and path.read_bytes()[:4] == b"\x89PNG" and not _leftovers(tmp_path)


def test_kernel_page_refuses_a_symlinked_output(tmp_path, capsys):
    target = tmp_path / "precious"
    target.write_text("keep")
    (tmp_path / "page.md").symlink_to(target)
    report = REFERENCE / "pycuda_kernel/vectorized/n268435456/ncu.ncu-rep.gz"
    assert main(["kernel-page", "--report", str(report), "--output", str(tmp_path / "page.md")]) == 2
    assert "page.md" in capsys.readouterr().err and target.read_text() == "keep"


@pytest.fixture(scope="module")
def summary(tmp_path_factory):
    folder = tmp_path_factory.mktemp("summaries")
    path = folder / "summary.json"
    path.write_text(json.dumps(summarize_run(str(REFERENCE / "numba_ufunc/baseline/n268435456"))))
    return path


@pytest.mark.parametrize("field,value,says", [
    (("timing", "median_ms"), "fast", "timing/median_ms"),
    (("size",), "big", "field size"),
    (("variant",), "nonesuch", "field variant"),
    (("times_ms",), [], "times_ms"),
])
def test_report_refuses_malformed_summary_before_writing(tmp_path, capsys, summary, field, value, says):
    record = json.loads(summary.read_text())
    node = record
    for key in field[:-1]:
        node = node[key]
    node[field[-1]] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(record))
    out = tmp_path / "out"
    rc = main(["report", "--workload", "numba_ufunc", "--ceilings", str(REFERENCE / "ceilings.json"),
               "--out-dir", str(out), str(summary), str(bad)])
    err = capsys.readouterr().err
    assert rc == 2 and "bad.json" in err and says in err, err
    assert not out.exists()  # no figure written before the refusal
    rc = main(["index", "--ceilings", str(REFERENCE / "ceilings.json"), "--preflight",
               str(REFERENCE / "preflight.json"), "--output", str(tmp_path / "index.md"), str(bad)])
    err = capsys.readouterr().err
    assert rc == 2 and "bad.json" in err and says in err, err


def test_report_refuses_a_symlinked_figure_before_writing(tmp_path, capsys, summary):
    out = tmp_path / "out"
    (out / "figures").mkdir(parents=True)
    (out / "figures" / "numba_ufunc_busy.png").symlink_to(tmp_path / "elsewhere.png")
    rc = main(["report", "--workload", "numba_ufunc", "--ceilings", str(REFERENCE / "ceilings.json"),
               "--out-dir", str(out), str(summary)])
    assert rc == 2 and "numba_ufunc_busy.png" in capsys.readouterr().err
    assert os.listdir(out / "figures") == ["numba_ufunc_busy.png"] and not (out / "numba_ufunc.md").exists()


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_an_output_below_a_file_is_refused_naming_the_file(tmp_path, depth):
    blocker = tmp_path / "a-file"
    blocker.write_text("keep")
    target = blocker.joinpath(*(["sub"] * depth), "out.md")
    with pytest.raises(UnsafeOutputError, match=f"{blocker} is a file, not a folder"):
        write_text_atomic(target, "new")
    assert blocker.read_text() == "keep" and not _leftovers(tmp_path)


@pytest.mark.parametrize("name,refused", [("f.png", False), ("f.PDF", False), ("f.svg", False), ("f", True),
                                          ("f.md", True), ("f.png.txt", True)])
def test_a_figure_is_written_only_under_a_format_matplotlib_writes(tmp_path, name, refused):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(1, 1))
    if refused:
        with pytest.raises(UnsafeOutputError, match="a figure's name ends in its format"):
            outputs.save_figure_atomic(fig, tmp_path / name)
        assert not os.listdir(tmp_path)
    else:
        outputs.save_figure_atomic(fig, tmp_path / name)
        assert os.listdir(tmp_path) == [name]
