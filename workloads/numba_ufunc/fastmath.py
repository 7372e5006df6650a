"""Step 5: ``fastmath=True``: the float32 body on the GPU's approximate instructions.

The same kernel as ``float32`` compiled with Numba's ``fastmath``: ``sin`` becomes ``sin.approx``,
``exp`` a multiply and ``ex2.approx``, ``tanh`` ``tanh.approx`` (Turing and later), the two square
roots ``sqrt.approx`` and the division ``div.approx``, with denormals flushed to zero. Those run on
the SM's special-function units (the XU pipe, MUFU instructions), one instruction each instead of
libdevice's polynomial and the IEEE division's and square roots' refinement: the body's
device function drops from 172 PTX instructions (with sinf's rarely taken reduction path) to 16: 6
approximate functions, 3 multiplies, 2 absolute values, the parameter loads, the store and the return.

Accuracy, the trade-off: ``ex2.approx`` (as ``__expf``) and ``div.approx`` (as ``__fdividef``) are good
to 2-3 ulp by the CUDA Programming Guide, ``sqrt.approx`` is taken as 2 ulp too; two are worse.
``sin.approx`` has an absolute error (2^-21.41 on [-pi, pi]) and reduces its argument in float32, so
its error grows with x^2; ``tanh.approx`` has no ulp bound in the CUDA Programming Guide and is taken as good to 2^-11
relative (looser than what has been reported for it, about 16 bits). The tolerance
(workloads/numba_ufunc/rounding.py, the same derivation as ``float32``'s with these figures) is
2.5e-4, set by that tanh assumption; the CPU cannot run these instructions (Numba's CPU ``fastmath``
keeps the library calls), so the GPU run's check is the measurement. Expected there: well under the
tolerance, 1e-6 to 1e-5 (the norm is set by the elements near x = 0, where the terms that grow with
x^2 vanish and tanh.approx's real error, not the assumed bound, counts).

Floors on an H100 (HBM3 3.35 TB/s, FP32 67 TFLOP/s, 16 MUFU operations per SM per cycle),
268,435,456 elements:

* device memory: 2.147 GB, 0.641 ms (as ``float32``);
* FP32 pipe: about 6 FLOPs per element (the multiplies, the range reductions), 1.6e9 FLOPs: 0.02 ms;
* XU pipe: 6-8 MUFU operations per element (sin, ex2, tanh, the division's reciprocal, two square
  roots, each one or two), 1.6e9-2.1e9 / (132 SM x 16 x 1.98 GHz = 4.2e12 per s): 0.39-0.51 ms;
* instruction issue: about 30 SASS instructions per element with the indexing: 0.24 ms.

DRAM binds. PREDICTION: the kernel at the device-memory rate the suite measures with a copy (on an
H100 about 90% of the 3.35 TB/s peak): about 0.72 ms, 1.1x the datasheet DRAM floor; ncu: memory-bound
(DRAM), the XU pipe near 60-70%; about 1.2x faster than ``float32`` (0.85 ms predicted) and 3.9x
faster than ``device_resident`` (2.84 ms). The step ends at its measured limit: a float32 elementwise
map cannot move fewer than 8 bytes an element.

Measured on an H100 (NVIDIA H100 80GB HBM3; the kernel page
``reports/kernels/numba_ufunc_fastmath_mycalculation_f32_fastmath.md``): 1.235 ms per call (1.29x
``float32``'s 1.589 ms, 2.39x ``device_resident``'s 2.947 ms); the kernel 1.08 ms under ncu with
DRAM at 58.6% of peak, not ~90%: the step does not reach its DRAM floor (the kernel 1.69x the
datasheet floor of 0.641 ms; the call 1.73x the 0.714 ms floor at the 3008 GB/s device copy rate the
ceilings measured in the same session). The counters say why: 81% of the warp samples sit at
``out[i] = device_fn(x[i])`` waiting on the load (``long_scoreboard``), with 16 registers and 68%
achieved occupancy. An estimate by Little's law, not a counter: one 4-byte load per resident thread
keeps ~0.7 MB in flight across the GPU, where covering DRAM latency at full rate takes ~2 MB; so the
next step is more bytes per thread (several elements or vector loads per thread), not less
arithmetic. Error 5.0e-8, far inside the 2.5e-4 tolerance.
"""
from workloads.numba_ufunc import body, rounding
from workloads.numba_ufunc.float32 import Float32


class Fastmath(Float32):
    """Float32's kernel compiled with ``fastmath=True``; inputs, launch and check as there."""

    name = "fastmath"
    summary = "fastmath=True: sin/exp/tanh/sqrt/division on the approximate (MUFU) instructions, denormals flushed"
    fastmath = True
    tolerance = rounding.tolerance(body.FILL_MAX_ABS, fastmath=True)


VARIANT = Fastmath
