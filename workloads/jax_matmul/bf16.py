"""Step 3: bfloat16 inputs with float32 accumulation: tensor cores.

``jnp.matmul(a, b, preferred_element_type=jnp.float32)`` on bfloat16 operands: the products are
formed from bf16 inputs and summed in float32, and the result is float32 (bf16 output would round
every sum to 8 significant bits). The precision argument is left at its default: for bf16 inputs
there is nothing to round. The inputs (arange % 7) are exact in bf16 and every sum is an integer
below 2^19, so the result is exact (see common).

PREDICTION (floor: the loop's 2 (2^3 + 4^3 + ... + 8192^3) = 1.2566e12 FLOPs at the dense 16-bit
rate cuBLAS reaches in the same run, the ``fp16_gemm`` ceiling, ~830 TFLOP/s on an H200: 1.51 ms):
the 8192 product's kernel at or above that rate (XLA picks cuBLAS's bf16 kernel itself), the loop
a few hundred microseconds over the floor (the smaller products' kernels, the per-call graph
update and the host timer's wake-up). The goal: at least 80% of the ceiling (the rate section).
(A development run on an H200: ``nvjet_sm90_tss_256x128`` at 895 TFLOP/s, 107% of CuPy's 834;
the loop 1.81 ms, 83% of the ceiling.)
"""
from workloads.jax_matmul.floats import FloatLoop


class Bf16(FloatLoop):
    name = "bf16"
    summary = "the jitted loop on bfloat16 inputs, float32 accumulation (preferred_element_type): tensor cores"
    input_dtype = "bfloat16"
    flops_kind = "fp16_tensor"

    def product(self, a, b):
        import jax.numpy as jnp

        return jnp.matmul(a, b, preferred_element_type=jnp.float32)


VARIANT = Bf16
