"""Step 4: float32 data and float32 arithmetic, still on the device.

``device_resident`` is compute-bound on the FP64 pipe: ncu counts 128 executed FP64 FLOPs per element
(libdevice's double-precision sin, exp, tanh, two sqrt and a division), 55% of the pipe's peak, 1.8x
the floor of that limiter. This step keeps everything else and changes the precision: the input and
the result are float32 arrays on the device (4 bytes a value instead of 8), and the body runs in
float32 (libdevice's ``sinf``, ``expf``, ``tanhf``; IEEE division and square root), in a ``@cuda.jit``
kernel of one element per thread launched as Numba launches its ufuncs (``forall``: the block size
the driver's occupancy calculator picks, 1024 threads for the ufunc). A hand-written kernel because
the CUDA ufunc target takes no options, which the next step needs (``fastmath``), and so that every
line of it is Python the kernel page can show (the ufunc's own kernel is generated from a string).

Accuracy, the trade-off: float32 keeps 24 significant bits (u = 2^-24 = 6.0e-8). The check is still
against the float64 reference (on the same float32 inputs), with the tolerance
workloads/numba_ufunc/rounding.py derives from u and the body's condition: (x^2/2 + 8.5) u at the
largest |x| the fill can draw (7.434): 2.15e-6. Measured on the CPU (Numba's float32 CPU ufunc of the
same body): 2.6e-8, the tolerance about 80x above it; the float64 steps agree with the reference to
1e-17.

Floors on an H100 (HBM3 3.35 TB/s, FP32 67 TFLOP/s), 268,435,456 elements:

* device memory: 4 B read + 4 B written per element, 2.147 GB: 0.641 ms;
* FP32 pipe: about 64 FP32 FLOPs per element (the PTX of the float32 body: 19 FMA, 9 multiplies and
  adds, an IEEE division and two IEEE square roots that expand to a few FMA each; FMA = 2), 1.7e10
  FLOPs: 0.26 ms.

DRAM binds, at 2.5x the FP32 floor. But the body is still long: about 100 SASS instructions per
element (the FP32 work, the integer side of sinf's argument reduction, the division's and square
roots' special-case branches, indexing), and an SM issues one warp instruction per cycle per
scheduler: 100 x 2.7e8 / (132 SM x 4 x 32 lanes x 1.98 GHz = 3.3e13 per s) = 0.80 ms, above the DRAM
floor. PREDICTION: the kernel at about 0.85 ms (0.75-0.95 ms), limited by instruction issue (ncu:
compute, the FMA pipe or issue slots near 75-85%; DRAM near 75%), so about 1.3x the DRAM floor;
about 3.3x faster than ``device_resident`` (2.84 ms on the H200 reference; the H100's FP64 rate is the
same chip's). ncu's executed FP64 FLOPs per element: 0 (from 128).

Measured on an H100 (NVIDIA H100 80GB HBM3; timed runs, CUDA events, and the kernel page
``reports/kernels/numba_ufunc_float32_mycalculation_f32.md``): 1.589 ms per call against
``device_resident``'s 2.947 ms in the same session (1.85x, not 3.3x); the kernel 1.41 ms under ncu,
SM throughput 67% (the busiest unit), DRAM 45% of peak, 990 M warp instructions executed (~118 per
element, near the ~100 predicted), 24 registers. Why slower than predicted: ``math.sin(x ** 2)``
alone compiles to 135 SASS instructions and takes 56% of the warp samples (likely sinf's slow-path
argument reduction, which arguments up to x^2 = 55 need; the page shows the count, not the path). Error 4.6e-8 against the 2.15e-6 tolerance.
"""
from workloads.contract import Work
from workloads.numba_ufunc import body, rounding
from workloads.numba_ufunc.device_resident import DeviceResident


class Float32(DeviceResident):
    """``device_resident``'s arrays, fill and check in float32 (the fill rounds the float64 steps'
    values; the reference takes the rounded ones), with a ``@cuda.jit`` kernel in place of the ufunc."""

    name = "float32"
    summary = "float32 data and float32 math (libdevice sinf/expf/tanhf, IEEE division and sqrt): no FP64 instruction"
    dtype = "float32"
    #: Numba's fastmath for the kernel (the next step)
    fastmath = False
    tolerance = rounding.tolerance(body.FILL_MAX_ABS, fastmath=False)

    def setup(self) -> None:
        super().setup()
        # compiled now for these arrays' types: forall on a specialized kernel launches it as it is,
        # where an unspecialized one would compile a specialization in the first call
        self.kernel = body.float32_kernel(self.fastmath).specialize(self.d_x, self.d_out)

    def step(self) -> None:
        self.kernel.forall(self.size)(self.d_x, self.d_out)

    def work(self) -> Work:
        n4 = 4 * self.size
        # the same 10 operations per element as the float64 steps, now in float32
        return Work(bytes_read=n4, bytes_written=n4, flops=10 * self.size, flops_kind="fp32")

    def teardown(self) -> None:
        super().teardown()
        self.kernel = None


VARIANT = Float32
