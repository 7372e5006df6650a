"""workloads.annotate: the suite's ranges and marks, the off switch, third-party function ranges,
thread names. No profiler here, so a recording stand-in for an nvtx domain observes what is pushed."""
from __future__ import annotations

import collections
import inspect
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from workloads import annotate
from workloads.annotate import AnnotationError

from conftest import REPO, run_in_thread


@pytest.fixture(autouse=True)
def _restore_wrapped():
    yield
    annotate.unannotate_functions()  # whatever a failing test left wrapped


# --- the suite's ranges and marks ---------------------------------------------------------------


def test_phase_pushes_a_named_coloured_categorised_range(recorded):
    with annotate.phase("cupy_sqdiff", "fused", "compute", payload=2):
        pass
    events = recorded[annotate.DOMAIN].events
    assert [e[0] for e in events] == ["push", "pop"]
    attrs = events[0][1]
    assert attrs == {"message": "cupy_sqdiff/fused/compute", "color": annotate.PHASE_COLORS["compute"],
                     "category": annotate.CATEGORIES["compute"], "payload": 2}


def test_categories_are_one_per_phase_and_named_in_a_fixed_order(recorded):
    assert set(annotate.CATEGORIES) == {*annotate.PHASES, "mark"}
    assert sorted(annotate.CATEGORIES.values()) == list(range(1, len(annotate.CATEGORIES) + 1))
    # whatever phase comes first, the ids are the same: all names are registered on first use
    with annotate.phase("w", "v", "check"):
        pass
    dom = recorded[annotate.DOMAIN]
    assert dom._categories == annotate.CATEGORIES
    assert dom.events[0][1]["category"] == annotate.CATEGORIES["check"]


def test_mark_is_an_instant_in_the_suite_domain(recorded):
    annotate.mark("nvtx_multiprocess/parent/start", payload=2)
    (kind, attrs), = recorded[annotate.DOMAIN].events
    assert kind == "mark"
    assert attrs["message"] == "nvtx_multiprocess/parent/start" and attrs["payload"] == 2
    assert attrs["category"] == annotate.CATEGORIES["mark"]


def test_the_range_is_popped_when_the_body_raises(recorded):
    with pytest.raises(KeyError):
        with annotate.phase("w", "v", "setup"):
            raise KeyError("boom")
    assert [e[0] for e in recorded[annotate.DOMAIN].events] == ["push", "pop"]


def test_switched_off_phase_and_mark_do_nothing(recorded, monkeypatch):
    monkeypatch.setattr(annotate, "ENABLED", False)
    ctx = annotate.phase("w", "v", "compute", payload=1)
    assert ctx is annotate._NO_RANGE
    with ctx:
        pass
    annotate.mark("x")
    assert recorded == {}  # no domain was even looked up
    with pytest.raises(AnnotationError, match="unknown phase"):
        annotate.phase("w", "v", "lunch")  # still checked


def test_without_a_profiler_ranges_are_the_shared_no_op():
    # this machine has no profiler: nvtx hands out a disabled domain
    if not annotate.ENABLED:
        pytest.skip("COOKBOOK_NVTX=0 in this environment")
    assert annotate.phase("w", "v", "compute") is annotate._NO_RANGE
    annotate.mark("no profiler, no event")


def _python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **env})


@pytest.mark.parametrize("value, enabled", [("0", False), ("off", False), ("1", True), ("", True)])
def test_cookbook_nvtx_is_read_once_at_import(value, enabled):
    r = _python("from workloads import annotate as a; import json, os; "
                "os.environ['COOKBOOK_NVTX'] = '1' if not a.ENABLED else '0'; "  # later changes are ignored
                "print(json.dumps([a.ENABLED, a.annotate_functions(['json.dumps']) == [], "
                "a.phase('w', 'v', 'compute') is a._NO_RANGE]))", COOKBOOK_NVTX=value)
    assert r.returncode == 0, r.stderr
    is_enabled, wrapped_nothing, no_op = json.loads(r.stdout)
    assert is_enabled is enabled
    assert wrapped_nothing is (not enabled)
    assert no_op  # no profiler here either way


def test_a_bad_switch_value_is_a_typed_error_naming_it():
    r = _python("import workloads.annotate", COOKBOOK_NVTX="maybe")
    assert r.returncode != 0
    assert "AnnotationError" in r.stderr and "COOKBOOK_NVTX='maybe'" in r.stderr


def test_annotation_errors_are_workload_errors_and_value_errors():
    from workloads.contract import WorkloadError

    assert issubclass(AnnotationError, WorkloadError) and issubclass(AnnotationError, ValueError)


# --- third-party functions ----------------------------------------------------------------------


class Base:
    def inherited(self, x):
        """Defined on the base class."""
        return ("base", x)


class Widget(Base):
    """A class of this test module, annotated by its dotted path."""

    def scale(self, x: int, factor: int = 2) -> int:
        """Multiply x by factor."""
        return x * factor

    @staticmethod
    def add(a, b):
        return a + b

    @classmethod
    def make(cls, n):
        return (cls.__name__, n)

    def fail(self):
        raise RuntimeError("inside")


MOD = __name__  # "test_annotate" (tests/ is on sys.path)


def _ranges(domains) -> list[str]:
    dom = domains.get(annotate.THIRDPARTY_DOMAIN)
    return [e[1]["message"] for e in dom.events if e[0] == "push"] if dom else []


def test_module_functions_are_wrapped_in_named_ranges_and_restored(recorded):
    original_dumps, original_norm = json.dumps, np.linalg.norm
    sig_dumps, sig_norm = inspect.signature(json.dumps), inspect.signature(np.linalg.norm)
    wrapped = annotate.annotate_functions(["json.dumps", "numpy.linalg.norm"])
    assert [w.path for w in wrapped] == ["json.dumps", "numpy.linalg.norm"]
    assert json.dumps is not original_dumps and wrapped[0].original is original_dumps
    # the wrapper calls through and looks like the original
    assert json.dumps({"a": 1}, sort_keys=True) == '{"a": 1}'
    assert np.linalg.norm([3.0, 4.0]) == 5.0
    assert json.dumps.__name__ == "dumps" and json.dumps.__doc__ == original_dumps.__doc__
    assert inspect.signature(json.dumps) == sig_dumps and inspect.signature(np.linalg.norm) == sig_norm
    assert _ranges(recorded) == ["json.dumps", "numpy.linalg.norm"]
    dom = recorded[annotate.THIRDPARTY_DOMAIN]
    assert [e[0] for e in dom.events] == ["push", "pop", "push", "pop"]
    assert dom.events[0][1]["color"] == annotate.THIRDPARTY_COLOR
    assert annotate.unannotate_functions(wrapped) == ["json.dumps", "numpy.linalg.norm"]
    assert json.dumps is original_dumps and np.linalg.norm is original_norm
    assert annotate.annotated_paths() == []


def test_methods_of_a_class_keep_their_kind_and_are_restored(recorded):
    raw = dict(vars(Widget))
    annotate.annotate_functions([f"{MOD}.Widget.scale", f"{MOD}.Widget.add", f"{MOD}.Widget.make",
                                 f"{MOD}.Widget.inherited"])
    w = Widget()
    assert w.scale(3) == 6 and w.scale(3, factor=5) == 15
    assert Widget.add(1, 2) == 3 and w.add(1, 2) == 3
    assert Widget.make(4) == ("Widget", 4)
    assert w.inherited(1) == ("base", 1)
    assert isinstance(vars(Widget)["add"], staticmethod) and isinstance(vars(Widget)["make"], classmethod)
    assert Widget.scale.__doc__ == "Multiply x by factor." and Widget.scale.__qualname__ == "Widget.scale"
    assert list(inspect.signature(Widget.scale).parameters) == ["self", "x", "factor"]
    assert _ranges(recorded) == [f"{MOD}.Widget.{n}" for n in ("scale", "scale", "add", "add", "make", "inherited")]
    annotate.unannotate_functions()
    assert dict(vars(Widget)) == raw  # the inherited override is gone again, not left as a copy
    assert "inherited" not in vars(Widget)


def test_a_raising_function_still_pops_its_range(recorded):
    annotate.annotate_functions([f"{MOD}.Widget.fail"])
    with pytest.raises(RuntimeError, match="inside"):
        Widget().fail()
    assert [e[0] for e in recorded[annotate.THIRDPARTY_DOMAIN].events] == ["push", "pop"]


def test_a_path_wrapped_twice_is_wrapped_once(recorded):
    first = annotate.annotate_functions(["json.dumps", "json.dumps", " json.dumps "])
    assert len(first) == 1
    assert annotate.annotate_functions(["json.dumps"]) == []
    json.dumps(1)
    assert _ranges(recorded) == ["json.dumps"]  # one range per call: not nested in itself
    # the same function under another name (json.dumps's module-level alias) is not wrapped again
    import types

    alias = types.ModuleType("alias_mod")
    alias.dumps = json.dumps
    sys.modules["alias_mod"] = alias
    try:
        assert annotate.annotate_functions(["alias_mod.dumps"]) == []
    finally:
        del sys.modules["alias_mod"]


@pytest.mark.parametrize("path, message", [
    ("nosuchpackage_xyz.f", "nosuchpackage_xyz.f: no importable module"),
    ("json.nope", "json.nope: 'json' has no attribute 'nope'"),
    ("numpy.linalg.nope.norm", "'numpy.linalg' has no attribute 'nope'"),
    ("json", "not a dotted path"),
    ("json..dumps", "not a dotted path"),
    ("os.path", "os.path: is a module, not a function"),
    ("json.JSONDecoder", "is a class; annotate its methods"),
    ("collections.OrderedDict.popitem", "cannot replace 'popitem'.*immutable"),
])
def test_bad_paths_raise_a_typed_error_naming_the_path_and_what_is_missing(path, message):
    before = collections.OrderedDict.popitem
    with pytest.raises(AnnotationError, match=message):
        annotate.annotate_functions([path])
    assert collections.OrderedDict.popitem is before


def test_one_bad_path_leaves_every_function_as_it_was():
    original = json.dumps
    with pytest.raises(AnnotationError):
        annotate.annotate_functions(["json.dumps", "collections.OrderedDict.popitem"])
    assert json.dumps is original and annotate.annotated_paths() == []
    with pytest.raises(AnnotationError, match="list of dotted paths"):
        annotate.annotate_functions("json.dumps")
    with pytest.raises(AnnotationError, match="not wrapped"):
        annotate.unannotate_functions(["json.dumps"])


def test_without_a_profiler_the_wrapper_only_calls_through():
    if not annotate.ENABLED:
        pytest.skip("COOKBOOK_NVTX=0 in this environment")
    annotate.annotate_functions(["json.dumps"])
    assert json.dumps([1, 2]) == "[1, 2]"


def test_the_environment_lists_functions(recorded):
    env = {annotate.ENV_FUNCTIONS: " json.dumps, ,numpy.linalg.norm,"}
    assert annotate.functions_from_environment(env) == ["json.dumps", "numpy.linalg.norm"]
    wrapped = annotate.annotate_from_environment(env)
    assert [w.path for w in wrapped] == ["json.dumps", "numpy.linalg.norm"]
    assert annotate.annotate_from_environment({}) == []
    with pytest.raises(AnnotationError, match="json.nope"):
        annotate.annotate_from_environment({annotate.ENV_FUNCTIONS: "json.nope"})


# --- thread names -------------------------------------------------------------------------------


def _named(role: str) -> dict:
    """Name the current thread ``role``; what the call returned and what the thread is called now."""
    out = {"returned": annotate.name_current_thread(role), "native_id": threading.get_native_id(),
           "python_name": threading.current_thread().name}
    if sys.platform.startswith("linux"):
        with open(f"/proc/self/task/{out['native_id']}/comm") as f:
            out["comm"] = f.read().rstrip("\n")
    return out


def _in_new_thread(role: str) -> dict:
    return run_in_thread(_named, role)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the OS thread name is set on Linux only")
@pytest.mark.parametrize("role, os_name", [
    ("matrix-4096", "matrix-4096"),
    ("matrix-123456789012", "matrix-12345678"),   # cut to 15 bytes
    ("é" * 9, "é" * 7),                             # 18 bytes of UTF-8, cut on a character boundary
])
def test_the_os_sees_the_thread_name(role, os_name):
    out = _in_new_thread(role)
    assert out["comm"] == os_name == out["returned"]
    assert out["python_name"] == role  # Python keeps the whole name


def test_a_thread_needs_a_real_name():
    for bad in ("", "   ", "a\x00b", None):
        with pytest.raises(AnnotationError, match="thread name"):
            annotate.name_current_thread(bad)
