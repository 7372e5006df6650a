"""Shared fixtures. The captures under reports/reference/ are real profiler output from a GPU host."""
from __future__ import annotations

import csv
import functools
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading

import nvtx
import pytest
from hypothesis import HealthCheck, settings

REPO = pathlib.Path(__file__).resolve().parent.parent
REFERENCE = REPO / "reports" / "reference" / "h200"
sys.path.insert(0, str(REPO))

#: the frameworks' compile caches, Matplotlib's and Snakemake's (XDG) of this test process and of
#: every process it starts: in the temp folder, so that no test writes into ~/.cache (Warp's kernel
#: cache, Numba's, JAX's) or reads a cache an earlier run left there
TEST_CACHES = pathlib.Path(tempfile.mkdtemp(prefix="cookbook-test-caches-"))
for _variable, _folder in {"WARP_CACHE_PATH": "warp", "NUMBA_CACHE_DIR": "numba", "CUPY_CACHE_DIR": "cupy",
                           "PYCUDA_CACHE_DIR": "pycuda", "JAX_COMPILATION_CACHE_DIR": "jax", "CUDA_CACHE_PATH": "cuda",
                           "XDG_CACHE_HOME": "xdg", "MPLCONFIGDIR": "matplotlib"}.items():
    os.environ[_variable] = str(TEST_CACHES / _folder)
# the processes the tests start (the pipeline's jobs, `python -m analysis`, ncu's reader children)
# keep the bytecode they compile (__pycache__, ignored by git), as Python does by default: an
# environment that turned that off made each of them compile the project's modules again
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
if "warp" in sys.modules:
    # Warp read WARP_CACHE_PATH when it was imported (a plugin imported it first)
    sys.modules["warp"].config.kernel_cache_dir = os.environ["WARP_CACHE_PATH"]

# Fuzz profiles, chosen with HYPOTHESIS_PROFILE: "default" is the same examples on every run (CI is
# reproducible) and quick; "deep" is 100x the examples with fresh random seeds, for a long hunt.
_FUZZ_BASE = dict(deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("default", max_examples=100, derandomize=True, **_FUZZ_BASE)
settings.register_profile("deep", max_examples=100 * 100, derandomize=False, **_FUZZ_BASE)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
#: damaged copies the byte-flip test makes of each committed capture (deep: more, at random positions)
DEEP = os.environ.get("HYPOTHESIS_PROFILE") == "deep"


#: what copy_checkout leaves out besides virtual environments: outputs and captures that only readers' tests read
READER_FIXTURES = ("reports/reference/", "reports/figures/", "reports/h100/figures/", "tests/data/thirdparty_h100/",
                   "tests/data/ncu_lineinfo_pycuda_h200/", "tests/data/nsys_memory_h200/", "tests/data/aa_runs_h200/")


def copy_checkout(dst: pathlib.Path, parts: tuple[str, ...] = (), reference: str | tuple[str, ...] = ()
                  ) -> pathlib.Path:
    """The checkout's files that git tracks or would track (new, not ignored) into ``dst``, so that
    pipeline runs leave the checkout alone: never a virtual environment, results, caches or the
    committed figures.
    ``parts``: only these paths (all when empty). The reference captures (30 MB) are copied only
    as asked: ``reference`` names run folders under reports/reference/h200 ("" for all of them),
    or is "link" for a symbolic link to the checkout's reference, for runs that only read it."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *parts],
                            cwd=REPO, capture_output=True, text=True)
    if listed.returncode != 0:
        raise RuntimeError(f"{REPO}: not a git checkout, the pipeline tests copy its tracked files: {listed.stderr}")
    # a virtual environment that .gitignore does not name is still one (it holds pyvenv.cfg)
    venvs = {p.parent.name for p in REPO.glob("*/pyvenv.cfg")}
    # the committed figures are outputs the pipeline draws again, never inputs; the third-party
    # captures, the previous reference's captures and the A/A timing records are fixtures of tests
    # that read them in place
    files = [f for f in listed.stdout.split("\0") if f and not f.startswith(READER_FIXTURES)
             and f.split("/", 1)[0] not in venvs]
    if reference == "link":
        (dst / "reports").mkdir(parents=True, exist_ok=True)
        (dst / "reports" / "reference").symlink_to(REPO / "reports" / "reference", target_is_directory=True)
    else:
        for run in reference:
            files += [str(p.relative_to(REPO)) for p in (REFERENCE / run).rglob("*") if p.is_file()]
    for rel in files:
        if (REPO / rel).is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dst / rel)
            if rel.endswith(".py"):
                # the module's compiled bytecode too: it names the source's size and modification time,
                # which copy2 keeps, so the copy's processes load it instead of compiling the module
                cached = pathlib.Path(importlib.util.cache_from_source(str(REPO / rel)))
                if cached.is_file():
                    target = pathlib.Path(importlib.util.cache_from_source(str(dst / rel)))
                    target.parent.mkdir(exist_ok=True)
                    shutil.copy2(cached, target)
    return dst


def write_tree(root: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    """``files`` (path relative to ``root`` -> text) written under ``root``, folders made as needed."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def reference_runs(with_nsys_stats: bool = False) -> list[pathlib.Path]:
    """Every run folder of the reference capture (workload/variant/n<size>). ``with_nsys_stats``:
    only those that kept nsys' own CSVs (ground truth); a run captured by hand outside the pipeline
    has none (every run of the current H200 reference came from the pipeline and has them)."""
    # a reference keeps the timed record gzipped (timing.json.gz); a live run writes it plain
    runs = sorted({p.parent for pattern in ("*/*/n*/timing.json", "*/*/n*/timing.json.gz")
                   for p in REFERENCE.glob(pattern)})
    return [r for r in runs if (r / "nsys-stats").is_dir()] if with_nsys_stats else runs


def reference_ceilings(workload: str | None = None) -> dict:
    """The reference's ``ceilings.json`` record a workload's steps are measured against: the workload's
    own where it has one (a workload merged in from a later run keeps its own: analysis.common.layout), else
    the run's, at the reference's top level."""
    own = REFERENCE / workload / "ceilings.json" if workload else None
    return json.loads((own if own is not None and own.exists() else REFERENCE / "ceilings.json").read_text())


def has_timing_record(run: pathlib.Path) -> bool:
    """Whether a run folder holds its timed record, plain (a live run) or gzipped (a reference)."""
    return (run / "timing.json").is_file() or (run / "timing.json.gz").is_file()


def _run_id(run: pathlib.Path) -> str:
    return "/".join(run.parts[-3:])


@pytest.fixture(params=reference_runs(with_nsys_stats=True), ids=_run_id)
def run(request) -> pathlib.Path:
    """Each reference run folder that kept nsys' own CSVs."""
    return request.param


@pytest.fixture(params=reference_runs(), ids=_run_id)
def any_run(request) -> pathlib.Path:
    """Each reference run folder, those captured by hand outside the pipeline included."""
    return request.param


@functools.lru_cache(maxsize=None)
def nsys_stats_rows(run: pathlib.Path, report: str) -> list[dict]:
    """nsys' own CSV of ``report`` for a reference run (``nsys-stats/stats_<report>.csv``), as dicts."""
    with open(run / "nsys-stats" / f"stats_{report}.csv", newline="") as f:
        return list(csv.DictReader(f))


_OPEN_TRACES: dict[pathlib.Path, object] = {}


def reference_trace(path: pathlib.Path):
    """A committed export, opened once per test session (unpacking a .gz export costs time);
    tests must not change it: a test that damages an export works on its own copy."""
    from analysis.readers.nsys import Trace

    path = pathlib.Path(path)
    if path not in _OPEN_TRACES:
        _OPEN_TRACES[path] = Trace(path)
    return _OPEN_TRACES[path]


@functools.lru_cache(maxsize=None)
def summary_of(run: pathlib.Path) -> dict:
    """``summarize_run`` of a reference run folder, computed once per test session."""
    from analysis.model.run_summary import summarize_run

    return summarize_run(str(run))


#: the committed captures, never changed by a test (a test that damages one works on its own copy)
_COMMITTED = (REPO / "reports" / "reference", REPO / "tests" / "data")
_NCU_READS: dict[tuple, bytes] = {}


def _committed_file(path: str) -> bool:
    real = pathlib.Path(os.path.realpath(path))
    return any(real.is_relative_to(root) for root in _COMMITTED)


@pytest.fixture(scope="session", autouse=True)
def _committed_ncu_reports_read_once():
    """Each committed ncu report is read once per test session per task (launches, kernel profile,
    kernel names): a read is a fresh interpreter running NVIDIA's native reader (0.2 to 0.6 s), and
    some hundred tests, run summaries and CLI calls read the same dozen reports. The value the child
    returned is kept pickled, so every caller gets fresh objects, as from a child; failures are not
    kept, and files outside the committed captures (damaged copies, fuzz inputs) are always read."""
    import pickle

    from analysis.readers import ncu_child

    read = ncu_child.read_isolated

    def read_once(task, path, plain, *args):
        if not _committed_file(path):
            return read(task, path, plain, *args)
        st = os.stat(path)
        key = (task, os.path.realpath(path), st.st_size, st.st_mtime_ns, args)
        if key not in _NCU_READS:
            _NCU_READS[key] = pickle.dumps(read(task, path, plain, *args))
        return pickle.loads(_NCU_READS[key])

    ncu_child.read_isolated = read_once
    try:
        yield
    finally:
        ncu_child.read_isolated = read


@pytest.fixture(autouse=True)
def _private_gpu_lock_folder(request, tmp_path_factory, monkeypatch):
    """Each test's jobs lock GPUs in a folder of their own (workloads/tools/gpu_jobs.py), not the
    host's: tests run at once would otherwise wait for each other's fake jobs. Tests on a real GPU
    (marker ``gpu``) keep the host's folder, so that they never measure beside another job."""
    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.setenv("COOKBOOK_GPU_LOCK_DIR", str(tmp_path_factory.mktemp("gpu-locks")))


def pytest_sessionfinish(session, exitstatus):
    for trace in _OPEN_TRACES.values():
        trace.close()
    _OPEN_TRACES.clear()


def pytest_unconfigure(config):
    shutil.rmtree(TEST_CACHES, ignore_errors=True)


@pytest.fixture(scope="session")
def reference_dir() -> pathlib.Path:
    if not REFERENCE.is_dir():
        pytest.fail(f"reference captures missing: {REFERENCE}")
    return REFERENCE


@pytest.fixture
def no_gpu_env(tmp_path, monkeypatch):
    """PATH without nvidia-smi, nsys or ncu, whatever the machine has."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("python3", "bash", "sh", "tee", "env", "mkdir", "cat", "git"):
        for d in os.environ.get("PATH", "").split(os.pathsep):
            cand = pathlib.Path(d) / tool
            if cand.exists() and not (bin_dir / tool).exists():
                (bin_dir / tool).symlink_to(cand)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.delenv("NCU", raising=False)
    return bin_dir


# --- NVTX without a profiler (test_annotate, test_nvtx_multiprocess) ---------------------------

class RecordingDomain(nvtx.Domain):
    """An active nvtx.Domain that records instead of calling a profiler."""

    def __new__(cls, name=None):
        return object.__new__(cls)

    def __init__(self, name=None):
        self.name = name
        self.events: list[tuple] = []
        self._categories: dict[str, int] = {}

    def get_category_id(self, name):
        return self._categories.setdefault(name, len(self._categories) + 1)

    def get_event_attributes(self, message=None, color=None, category=None, payload=None):
        return {"message": message, "color": color, "category": category, "payload": payload}

    def push_range(self, attributes=None, **kwargs):
        self.events.append(("push", attributes))

    def pop_range(self):
        self.events.append(("pop",))

    def mark(self, attributes=None, **kwargs):
        self.events.append(("mark", attributes))


@pytest.fixture
def recorded(monkeypatch):
    """Domain name -> RecordingDomain, as if a profiler were attached; annotation switched on."""
    from workloads import annotate

    domains: dict[str, RecordingDomain] = {}
    monkeypatch.setattr(annotate, "ENABLED", True)
    monkeypatch.setattr(annotate, "_channels", {})
    monkeypatch.setattr(annotate.nvtx, "get_domain", lambda name=None: domains.setdefault(name, RecordingDomain(name)))
    return domains


def run_in_thread(fn, *args):
    """``fn(*args)`` in a new thread, for code that names or renames its thread (pytest's main thread
    keeps its name); what it raised is raised here."""
    out = {}

    def body():
        try:
            out["value"] = fn(*args)
        except BaseException as e:  # surfaced in the test's thread
            out["error"] = e

    t = threading.Thread(target=body)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def pytest_configure(config):
    if hasattr(config, "workerinput"):  # the rest runs once per run, before pytest-xdist starts its workers
        return
    if config.getoption("dist", "no") == "loadfile":
        # the files come in the order the workers collect them (pytest_collection_modifyitems)
        config.option.loadscopereorder = False
    # the project's bytecode, for the processes the tests start and the checkout's copies (copy_checkout)
    import compileall

    for package in ("analysis", "workloads"):
        compileall.compile_dir(REPO / package, quiet=1)


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist, the files holding slow tests are handed out first, then the others
    with the most tests first (xdist's own order): a long file handed out last keeps one worker busy
    while the others have finished."""
    if not hasattr(config, "workerinput"):  # only xdist's workers' order counts (and they see dist "no")
        return
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def first(tests):
        return (not any(t.get_closest_marker("slow") for t in tests), -len(tests))

    items[:] = [item for tests in sorted(files.values(), key=first) for item in tests]
