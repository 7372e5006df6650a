"""Step 2b, beside ``bf16``: the float32 loop on the tensor cores, through TF32.

``float32`` runs at 1.12x its FP32 FMA floor with ``precision=HIGHEST``: a SIMT SGEMM
(``cutlass_80_simt_sgemm``), as fast as float32 on the FP32 pipe goes, while the tensor cores idle.
This step keeps float32 data and float32 results and asks for TF32: every input rounded to TF32 (8-bit
exponent, 10 stored mantissa bits), products summed in float32, on the tensor cores' TF32 path.

How it is asked for, in JAX 0.10 (read from XLA's GPU sources, xla/service/gpu/matmul_utils.cc and
the Triton GEMM emitter): ``precision=jax.lax.DotAlgorithmPreset.TF32_TF32_F32`` names the algorithm,
and both of XLA's GEMM paths (cuBLAS and its Triton GEMMs, between which the autotuner picks per
product) honour it. The alternatives only allow TF32: ``Precision.DEFAULT`` (JAX's default for
float32, no flag needed) lets both paths use it; ``jax.default_matmul_precision("tensorfloat32")``
means ``Precision.HIGH``, which XLA's cuBLAS path takes as TF32 but its Triton emitter as full
float32 (it allows TF32 only for DEFAULT operands), so the kernel would depend on the autotuner's
pick. JAX's CPU backend rejects the preset ("not supported by dot_general on CPU"), so the CPU path
(the tests) runs ``Precision.DEFAULT``, which the CPU computes in full float32: the CPU does not
honour TF32, and the GPU check is what measures its error.

Inputs: ``(arange(n*n) % 7) / 7`` in float32 (the float32 step's integers are exact in TF32 and would
hide its rounding; see common). Accuracy, the trade-off: TF32 keeps 11 significant bits of float32's
24. The tolerance is the error bound of an n-term dot product with TF32 inputs and float32
accumulation (common.tf32_tolerance): 2 * 2^-10 + 2^-20 + (n - 1) 2^-23 = 2.9e-3 at n = 8192.
Expected: the inputs' rounding, computed on the host (common.tf32_round, then a float64 product):
6.5e-4 if the kernel cuts the low mantissa bits, 3.3e-4 if it rounds to nearest, so the GPU check's
relative error also tells which one the kernel does (float32 accumulation adds about 1e-6). On the
CPU: 1.4e-6 at N = 512, 1.8e-6 at 2048 (full float32).

PREDICTION (floor: the loop's 2 (2^3 + ... + 8192^3) = 1.2566e12 FLOPs at the dense TF32 tensor rate
of an H100 SXM, 495 TFLOP/s, the same on an H200: 2.54 ms; the 8192 product alone 2.22 ms): XLA picks
a cuBLAS (or Triton) TF32 kernel for the 8192 product at about 65-75% of that peak (TF32 moves twice
bf16's bytes per FLOP and its power draw holds the clock lower; bf16 reached 90% of its peak on the
H200), the loop about 3.6 ms: 1.4x the datasheet floor, and about 1.15x the floor at ``tf32_gemm``,
the TF32 cuBLAS rate the suite measures in the same run (workloads/harness/ceilings.py, the same inputs),
as ``bf16`` sits at 1.2x its measured floor; about 7x faster than ``float32`` (25 ms). ncu's limiter:
the tensor pipe (TF32).

Measured on an H100 (NVIDIA H100 80GB HBM3): the loop at 8192 in 3.368 ms per call (IQR 0.089 ms)
against ``float32``'s 25.20 ms: 7.5x faster. ``tf32_gemm`` measured 435.4 TFLOP/s in the same
session, so the loop's floor is 2.886 ms and it runs at 1.17x it (1.33x the datasheet 2.54 ms). The
kernel XLA picked is cuBLAS's ``sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32...``. The
relative error is 3.8e-4 (tolerance 2.9e-3): near the 3.2e-4 that rounding the inputs to TF32
predicts, against 6.6e-4 for cutting them: it suggests the kernel rounds. ncu under ``profile_all`` crashed in this
step's process (exit 139) on that run: the limiter column needs a capture that completes.
"""
from workloads.jax_matmul.common import tf32_tolerance
from workloads.jax_matmul.floats import FloatLoop

#: XLA's name for TF32 inputs with float32 accumulation
TF32_ALGORITHM = "TF32_TF32_F32"


def tf32_precision(platform: str):
    """The ``precision`` that asks for TF32 on ``platform`` (``jax.default_backend()``): the algorithm
    preset on GPUs, ``Precision.DEFAULT`` on the CPU, whose backend refuses the preset (and computes
    DEFAULT in full float32)."""
    import jax

    if platform == "cpu":
        return jax.lax.Precision.DEFAULT
    return getattr(jax.lax.DotAlgorithmPreset, TF32_ALGORITHM)


class Tf32(FloatLoop):
    name = "tf32"
    summary = "the float32 loop with TF32 inputs on the tensor cores (DotAlgorithmPreset.TF32_TF32_F32), float32 sums"
    input_dtype = "float32"
    flops_kind = "tf32_tensor"
    float_divisor = 7

    def __init__(self, size: int, seed: int = 0) -> None:
        super().__init__(size, seed)
        # the check compares the largest product, an N-term dot product per element
        self.tolerance = tf32_tolerance(self.sizes[-1])
        self.platform = None

    def setup(self) -> None:
        import jax

        self.platform = jax.default_backend()
        super().setup()

    def product(self, a, b):
        import jax.numpy as jnp

        return jnp.matmul(a, b, precision=tf32_precision(self.platform))


VARIANT = Tf32
