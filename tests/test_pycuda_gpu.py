"""PyCUDA variants on a real GPU (PyCUDA builds against the local CUDA; no GPU, no test)."""
from __future__ import annotations

import shutil

import pytest

pytestmark = pytest.mark.gpu

if shutil.which("nvidia-smi") is None:
    pytest.skip("no NVIDIA GPU here", allow_module_level=True)
pytest.importorskip("pycuda")

from workloads.contract import check_result  # noqa: E402
from workloads.pycuda_kernel import RECIPE  # noqa: E402


@pytest.mark.parametrize("variant", RECIPE.variants)
def test_variant_is_correct_at_a_small_size(variant):
    v = RECIPE.variant_class(variant)(size=100_003)
    v.setup()
    v.step()
    v.synchronize()
    assert check_result(v.result(), v.reference(), v.tolerance, variant) == 0.0
    v.teardown()
