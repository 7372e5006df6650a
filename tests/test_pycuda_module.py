"""How the PyCUDA recipe builds its module (workloads/pycuda_kernel/kernels.py), without a GPU: on
stand-ins for ``pycuda.driver`` and ``pycuda.compiler``. PyCUDA writes its compile-cache entries in
place, and the pipeline's runs of one recipe share that cache (Framework.shared_compile_cache): a
cubin that will not load is compiled again without the cache, while a compile error stays an error.
tests/test_pycuda_gpu.py builds the real module on a GPU."""
from __future__ import annotations

import sys
import types

import pytest

from workloads.pycuda_kernel import kernels


class _Error(Exception):
    pass


class _CompileError(_Error):
    pass


class _LogicError(_Error):
    pass


def _stand_ins(monkeypatch, fails_from_cache: Exception | None):
    """pycuda, pycuda.driver, pycuda.autoprimaryctx and pycuda.compiler; returns the calls made."""
    calls = []

    class SourceModule:
        def __init__(self, source, options=None, no_extern_c=False, cache_dir=None):
            calls.append(cache_dir)
            if cache_dir is None and fails_from_cache is not None:
                raise fails_from_cache
            self.source = source

    driver = types.ModuleType("pycuda.driver")
    driver.Error, driver.CompileError, driver.LogicError = _Error, _CompileError, _LogicError
    compiler = types.ModuleType("pycuda.compiler")
    compiler.SourceModule = SourceModule
    package = types.ModuleType("pycuda")
    package.driver, package.compiler = driver, compiler
    for name, module in (("pycuda", package), ("pycuda.driver", driver), ("pycuda.compiler", compiler),
                         ("pycuda.autoprimaryctx", types.ModuleType("pycuda.autoprimaryctx"))):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(kernels, "_module", None)
    return calls


def test_the_module_comes_from_the_cache_when_it_loads(monkeypatch):
    calls = _stand_ins(monkeypatch, None)
    module = kernels.module()
    assert calls == [None] and "scale_grid_stride" in module.source
    assert kernels.module() is module  # built once per process


def test_a_cubin_that_does_not_load_is_compiled_again_without_the_cache(monkeypatch):
    calls = _stand_ins(monkeypatch, _LogicError("cuModuleLoadDataEx failed: device kernel image is invalid"))
    module = kernels.module()
    assert calls == [None, False] and "scale_grid_stride" in module.source


def test_a_compile_error_is_not_retried(monkeypatch):
    calls = _stand_ins(monkeypatch, _CompileError("nvcc compilation of kernel.cu failed"))
    with pytest.raises(_CompileError):
        kernels.module()
    assert calls == [None]


def test_the_input_is_drawn_before_the_turn_and_handed_over_once():
    # prepare_host (before the GPU turn) draws the seeded input; make_input hands that array over, or
    # copies it into a page-locked buffer; a variant whose prepare_host did not run draws it itself
    import numpy as np

    from workloads import hostmath
    from workloads.pycuda_kernel.baseline import Baseline
    from workloads.pycuda_kernel.pinned_async import PinnedAsync

    expected = hostmath.standard_normal(5000, 3, dtype=np.float32)
    v = Baseline(size=5000, seed=3)
    v.prepare_host("full")
    drawn, poisoned = vars(v)["_kept_input"], vars(v)["_kept_poisoned_out"]
    assert v.make_input() is drawn and np.array_equal(drawn, expected)
    assert poisoned.dtype == np.float32 and np.isnan(poisoned).all()
    assert np.array_equal(v.make_input(), expected)  # taken once: drawn again, the same values
    p = PinnedAsync(size=5000, seed=3)
    p.prepare_host("sample")
    buffer = np.zeros(5000, dtype=np.float32)
    assert p.make_input(out=buffer) is buffer and np.array_equal(buffer, expected)
    with pytest.raises(ValueError, match="5000 elements into 10"):
        hostmath.copy_into(np.zeros(10, dtype=np.float32), expected)
