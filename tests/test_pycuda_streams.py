"""PyCUDA's chunked-streams step (workloads/pycuda_kernel/streams.py) without a GPU: how the arrays are
cut, and one call of the step on a stand-in for ``pycuda.driver`` that executes what it is given on a
byte array standing for device memory (copies by address, the kernel as NumPy), recording which
stream each operation was queued on. What it checks: the addresses and byte offsets, that every
element is copied in, doubled and copied out exactly once, and that each chunk's three operations
share one stream in order. tests/test_pycuda_gpu.py runs the real thing on a GPU."""
from __future__ import annotations

import types

import numpy as np
import pytest

from workloads.contract import WorkloadError, check_result
from workloads.pycuda_kernel import RECIPE, kernels, pinned_async
from workloads.pycuda_kernel import streams as streams_step
from workloads.pycuda_kernel.streams import CHUNK_ALIGN_ELEMENTS, Streams, chunk_bounds


# --- the chunks ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 7, 1023, 1024, 1025, 8 * 1024, 100_003, 268435456])
@pytest.mark.parametrize("chunks", [1, 3, 8, 16])
def test_the_chunks_cover_every_element_exactly_once(size, chunks):
    bounds = chunk_bounds(size, chunks)
    assert 1 <= len(bounds) <= chunks
    assert bounds[0][0] == 0 and bounds[-1][1] == size
    for (a, b), (c, _) in zip(bounds, bounds[1:]):
        assert b == c  # consecutive: no gap, no overlap
    assert all(a < b for a, b in bounds)
    assert all(a % CHUNK_ALIGN_ELEMENTS == 0 for a, _ in bounds)
    assert sum(b - a for a, b in bounds) == size


def test_the_configured_size_gets_equal_chunks():
    bounds = chunk_bounds(RECIPE.default_size, 8)
    assert len(bounds) == 8 and {b - a for a, b in bounds} == {RECIPE.default_size // 8}


@pytest.mark.parametrize("args", [(0, 8), (10, 0), (-1, 8), (10, 2.5), (10, 8, 0)])
def test_bad_chunk_arguments_are_typed_errors(args):
    with pytest.raises(WorkloadError, match="streams.py: .* must be a positive integer"):
        chunk_bounds(*args)


# --- one call on a stand-in driver -------------------------------------------------------------------------


class _Allocation:
    def __init__(self, address: int) -> None:
        self.address = address
        self.freed = False

    def __int__(self) -> int:
        return self.address

    def free(self) -> None:
        self.freed = True


class _Stream:
    def __init__(self, index: int) -> None:
        self.index = index

    def synchronize(self) -> None:
        pass


class _Driver:
    """What the step uses of ``pycuda.driver``, executing at once, in issue order, on ``memory``."""

    def __init__(self, device_bytes: int) -> None:
        self.memory = np.zeros(device_bytes, dtype=np.uint8)
        self.next_address = 4096  # not 0: an offset taken for an address would show
        self.streams: list[_Stream] = []
        self.log: list[tuple[str, int, int, int]] = []  # (what, stream, device address, bytes)
        self.Context = types.SimpleNamespace(synchronize=lambda: None)

    def Stream(self) -> _Stream:
        self.streams.append(_Stream(len(self.streams)))
        return self.streams[-1]

    def pagelocked_empty(self, n: int, dtype) -> np.ndarray:
        return np.empty(n, dtype=dtype)

    def mem_alloc(self, nbytes: int) -> _Allocation:
        a = _Allocation(self.next_address)
        self.next_address += -(-nbytes // 256) * 256
        assert self.next_address <= self.memory.size
        return a

    def _bytes(self, address, nbytes: int) -> np.ndarray:
        assert isinstance(address, int), f"a device address must be an int here, got {type(address).__name__}"
        assert 0 < address and address + nbytes <= self.memory.size
        return self.memory[address:address + nbytes]

    def memcpy_htod_async(self, dest, src: np.ndarray, stream: _Stream) -> None:
        assert src.flags.c_contiguous
        self._bytes(dest, src.nbytes)[:] = src.view(np.uint8)
        self.log.append(("h2d", stream.index, dest, src.nbytes))

    def memcpy_dtoh_async(self, dest: np.ndarray, src, stream: _Stream) -> None:
        assert dest.flags.c_contiguous and dest.flags.writeable
        dest.view(np.uint8)[:] = self._bytes(src, dest.nbytes)
        self.log.append(("d2h", stream.index, src, dest.nbytes))


class _Kernel:
    """scale_grid_stride as PyCUDA's prepared call would launch it, on the driver's memory."""

    def __init__(self, drv: _Driver) -> None:
        self.drv = drv
        self.signature = None

    def prepare(self, signature: str) -> None:
        self.signature = signature

    def prepared_async_call(self, grid, block, stream, out_address, in_address, n) -> None:
        assert self.signature == "PPQ" and isinstance(n, np.uint64)
        assert block == (kernels.THREADS, 1, 1) and grid == (4, 1)
        nbytes = int(n) * 4
        source = self.drv._bytes(in_address, nbytes).view(np.float32)
        self.drv._bytes(out_address, nbytes).view(np.float32)[:] = 2.0 * source
        self.drv.log.append(("kernel", stream.index, in_address, nbytes))


@pytest.fixture
def drv(monkeypatch):
    d = _Driver(device_bytes=16 << 20)
    kernel = _Kernel(d)
    module = types.SimpleNamespace(get_function=lambda name: kernel if name == "scale_grid_stride" else None)
    monkeypatch.setattr(pinned_async, "driver", lambda: d)
    monkeypatch.setattr(streams_step, "driver", lambda: d)
    monkeypatch.setattr(kernels, "module", lambda: module)
    monkeypatch.setattr(kernels, "filling_grid", lambda: 4)
    return d


@pytest.mark.parametrize("size", [100_003, 8 * 1024, 5])
def test_one_call_doubles_every_element_once_through_the_chunks(drv, size):
    v = Streams(size=size, seed=3)
    v.setup()
    d_in, d_out = int(v.d_in), int(v.d_out)
    v.step()
    out = v.result()
    assert check_result(out, v.reference(), v.tolerance, "streams") == 0.0

    bounds = chunk_bounds(size, Streams.n_chunks)
    assert len(drv.streams) == 1 + Streams.n_streams  # pinned_async's own stream, unused here, and three
    used = {entry[1] for entry in drv.log}
    assert len(used) == min(len(bounds), Streams.n_streams) and 0 not in used
    # chunk i: copy in, kernel, copy out, in that order, on stream i % n_streams, at the chunk's offset
    assert len(drv.log) == 3 * len(bounds)
    for i, (start, stop) in enumerate(bounds):
        h2d, kern, d2h = drv.log[3 * i:3 * i + 3]
        nbytes = (stop - start) * 4
        assert h2d == ("h2d", h2d[1], d_in + 4 * start, nbytes)
        assert kern == ("kernel", h2d[1], d_in + 4 * start, nbytes)
        assert d2h == ("d2h", h2d[1], d_out + 4 * start, nbytes)
        assert h2d[1] == used_streams(drv)[i % Streams.n_streams]
    # the copies cover each array's bytes exactly once
    for kind, base in (("h2d", d_in), ("d2h", d_out)):
        spans = sorted((a - base, a - base + n) for k, _, a, n in drv.log if k == kind)
        assert spans[0][0] == 0 and spans[-1][1] == 4 * size
        assert all(b == c for (_, b), (c, _) in zip(spans, spans[1:]))
    v.teardown()


def used_streams(drv: _Driver) -> list[int]:
    """Stream indices in the order the step first used them."""
    seen: list[int] = []
    for _, s, _, _ in drv.log:
        if s not in seen:
            seen.append(s)
    return seen


def test_the_number_of_chunks_and_streams_is_configurable(drv):
    class FourOnTwo(Streams):
        n_chunks, n_streams = 4, 2

    v = FourOnTwo(size=100_003)
    v.setup()
    v.step()
    assert check_result(v.result(), v.reference(), v.tolerance, "four on two") == 0.0
    kernels_on = [s for what, s, _, _ in drv.log if what == "kernel"]
    assert len(kernels_on) == 4 and len(set(kernels_on)) == 2 and kernels_on[0] == kernels_on[2]

    class NoStreams(Streams):
        n_streams = 0

    with pytest.raises(WorkloadError, match="n_streams must be a positive integer"):
        NoStreams(size=10).setup()


def test_registered_after_the_step_it_improves_on_with_the_same_declared_work():
    from workloads.registry import recipe_facts


    assert RECIPE.parent_of("streams") == "pinned_async"
    assert RECIPE.variants.index("streams") == RECIPE.variants.index("pinned_async") + 1
    assert Streams(size=1 << 20).work() == pinned_async.PinnedAsync(size=1 << 20).work()
    # it launches pinned_async's kernel with pinned_async's grid, on each chunk: no ncu run of its own
    ncu = recipe_facts("pycuda_kernel")["ncu"]
    assert "streams" not in ncu["variants"] and "device_resident" in ncu["variants"]
