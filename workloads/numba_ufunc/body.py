"""The seed's scalar function, written once and compiled several ways: as a CUDA ufunc
(``vectorize(target="cuda")``), as a CUDA device function for ``@cuda.jit`` kernels (float64, and
float32 with or without ``fastmath``), and as a CPU ufunc for the tests (the CUDA simulator cannot
run CUDA ufuncs)."""
from __future__ import annotations

import math

import numpy as np
# a module-level name: the CUDA simulator swaps the kernels' global `cuda` for its own
from numba import cuda

from workloads import settings


def mycalculation(x):
    a = math.sin(x ** 2)
    b = math.exp(-a)
    c = math.sqrt(abs(x))
    d = c * math.tanh(x)
    e = b / d
    f = math.sqrt(abs(e))
    return f


def reference(x: np.ndarray) -> np.ndarray:
    """The same function in float64 NumPy."""
    x = np.asarray(x, dtype=np.float64)
    return np.sqrt(np.abs(np.exp(-np.sin(x ** 2)) / (np.sqrt(np.abs(x)) * np.tanh(x))))


#: the fill kernel's floor on its first uniform draw (keeps log() finite): it also bounds |x| by
#: :data:`FILL_MAX_ABS`, which the float32 steps' error bounds use
FILL_U1_MIN = 1e-12
#: the largest |x| the fill kernel can produce: Box-Muller's radius sqrt(-2 ln u1) at u1 = FILL_U1_MIN
FILL_MAX_ABS = math.sqrt(-2.0 * math.log(FILL_U1_MIN))

_compiled: dict[str, object] = {}


def jit_options() -> dict:
    """Extra ``cuda.jit`` options: ``lineinfo=True`` when ``COOKBOOK_LINEINFO=1`` (the kernel page's
    ncu run, workloads.tools.kernel_profile), so that Nsight Compute maps SASS to these Python lines.
    Line information leaves the generated code as it is. Nothing under the CUDA simulator, whose
    ``jit`` has no such option."""
    from numba.cuda import config  # noqa: PLC0415

    if settings.flag("COOKBOOK_LINEINFO") and not config.ENABLE_CUDASIM:
        return {"lineinfo": True}
    return {}


def _lineinfo_ufunc(signature: str):
    """The CUDA ufunc ``vectorize(target="cuda")`` builds, with line information: the CUDA vectorize
    target accepts no options, so its builder is subclassed to pass ``lineinfo=True`` to the two
    ``cuda.jit`` calls it makes (the core device function and the ``__vectorized_<name>`` kernel)."""
    from numba.cuda.vectorizers import CUDAVectorize  # noqa: PLC0415

    class LineinfoCUDAVectorize(CUDAVectorize):
        def _compile_core(self, sig):
            fn = cuda.jit(sig, device=True, inline="always", lineinfo=True)(self.pyfunc)
            return fn, fn.overloads[sig.args].signature.return_type

        def _compile_kernel(self, fnobj, sig):
            return cuda.jit(fnobj, lineinfo=True)

    builder = LineinfoCUDAVectorize(mycalculation)
    builder.add(signature)
    return builder.build_ufunc()


def cuda_ufunc():
    """``mycalculation`` as the seed builds it: ``@vectorize(["float64(float64)"], target="cuda")``."""
    if "ufunc" not in _compiled:
        from numba import vectorize  # noqa: PLC0415

        if jit_options():
            _compiled["ufunc"] = _lineinfo_ufunc("float64(float64)")
        else:
            _compiled["ufunc"] = vectorize(["float64(float64)"], target="cuda")(mycalculation)
    return _compiled["ufunc"]


def cuda_kernel():
    """An elementwise ``@cuda.jit`` kernel (grid-stride loop) calling ``mycalculation`` on the device."""
    if "kernel" not in _compiled:

        device_fn = cuda.jit(device=True, **jit_options())(mycalculation)

        @cuda.jit(**jit_options())
        def mycalculation_kernel(x, out):
            start = cuda.grid(1)
            stride = cuda.gridsize(1)
            for i in range(start, x.shape[0], stride):
                out[i] = device_fn(x[i])

        _compiled["kernel"] = mycalculation_kernel
    return _compiled["kernel"]


def fill_kernel():
    """A ``@cuda.jit`` kernel that fills an array with normal-looking values from the element index
    alone (a float hash and Box-Muller), so device-resident data never cross the host link. The
    values are computed in float64 and stored in ``out``'s dtype (a float32 array gets them rounded)."""
    if "fill" not in _compiled:

        @cuda.jit(**jit_options())
        def fill_normal(out, seed):
            start = cuda.grid(1)
            stride = cuda.gridsize(1)
            for i in range(start, out.shape[0], stride):
                h1 = math.sin((i + 1.0) * 12.9898 + seed * 78.233) * 43758.5453
                h2 = math.sin((i + 1.0) * 39.3468 + seed * 11.135) * 24634.6345
                u1 = h1 - math.floor(h1)
                u2 = h2 - math.floor(h2)
                u1 = max(u1, FILL_U1_MIN)
                out[i] = math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2)

        _compiled["fill"] = fill_normal
    return _compiled["fill"]


def gather_kernel():
    """A ``@cuda.jit`` kernel that copies ``src[idx[i]]`` to ``out[i]``: the sampled check's elements
    gathered on the device (a Numba device array takes no index array)."""
    if "gather" not in _compiled:

        @cuda.jit(**jit_options())
        def gather(src, idx, out):
            start = cuda.grid(1)
            stride = cuda.gridsize(1)
            for i in range(start, idx.shape[0], stride):
                out[i] = src[idx[i]]

        _compiled["gather"] = gather
    return _compiled["gather"]


def gathered(d_src, flat_indices: np.ndarray) -> np.ndarray:
    """``d_src``'s elements at ``flat_indices``, gathered on the device and copied to the host: in
    the profiled runs' sampled check 512 KiB cross instead of a 2 GiB array, which held the GPU for
    seconds (docs/measurement.md)."""
    d_idx = cuda.to_device(np.ascontiguousarray(flat_indices, dtype=np.int64))
    d_out = cuda.device_array(d_idx.shape[0], dtype=d_src.dtype)
    blocks, threads = launch_config(d_idx.shape[0])
    gather_kernel()[blocks, threads](d_src, d_idx, d_out)
    return d_out.copy_to_host()


def float32_kernel(fastmath: bool = False):
    """An elementwise ``@cuda.jit`` kernel calling ``mycalculation`` on float32 arrays, one element per
    thread, launched with ``forall`` as Numba launches its CUDA ufuncs (the driver's occupancy-based
    block size, as many blocks as it takes): only the precision differs from the float64 ufunc.

    Every value in the body is float32 (the input, ``x ** 2``, the libdevice ``sinf``/``expf``/
    ``tanhf``/``sqrtf`` calls and the division), so no instruction runs on the FP64 pipe. With
    ``fastmath=True`` Numba also swaps in the approximate instructions: ``sin.approx``, ``ex2.approx``
    (for exp), ``tanh.approx``, ``sqrt.approx`` and ``div.approx``, with denormals flushed to zero
    (workloads/numba_ufunc/rounding.py bounds what each costs in accuracy). Two kernels, so that
    reports and kernel pages tell them apart by name: ``mycalculation_f32`` and
    ``mycalculation_f32_fastmath``. Compiled on first use; the steps compile theirs in setup
    (``specialize``), so that no call compiles."""
    key = f"f32-fastmath-{fastmath}"
    if key not in _compiled:
        options = {"fastmath": fastmath, **jit_options()}
        device_fn = cuda.jit(device=True, **options)(mycalculation)

        def elementwise(x, out):
            i = cuda.grid(1)
            if i < out.shape[0]:
                out[i] = device_fn(x[i])

        # the name Numba mangles into the kernel's, as if each had been written out under it
        name = "mycalculation_f32_fastmath" if fastmath else "mycalculation_f32"
        elementwise.__name__ = name
        elementwise.__qualname__ = f"{float32_kernel.__qualname__}.<locals>.{name}"
        _compiled[key] = cuda.jit(**options)(elementwise)
    return _compiled[key]


def poison_kernel():
    """A ``@cuda.jit`` kernel that fills an array with NaN, so that unwritten elements fail the check."""
    if "poison" not in _compiled:

        @cuda.jit(**jit_options())
        def fill_nan(out):
            start = cuda.grid(1)
            for i in range(start, out.shape[0], cuda.gridsize(1)):
                out[i] = math.nan

        _compiled["poison"] = fill_nan
    return _compiled["poison"]


def launch_config(n: int) -> tuple[int, int]:
    """Blocks and threads for the grid-stride kernels: 32 blocks per SM fill the GPU, more only
    add scheduling; fewer if the data are small."""
    threads = 256
    try:
        sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
    except Exception:  # the CUDA simulator's fake device has no attributes
        sms = 1
    blocks = max(1, min((n + threads - 1) // threads, sms * 32))
    return blocks, threads
