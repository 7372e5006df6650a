"""Step 2: float32 inputs, ``precision=jax.lax.Precision.HIGHEST``.

The jit step's program on float32 values (arange % 7). A float dot is one XLA hands to cuBLAS (or
its own Triton GEMM), tiled and pipelined, instead of the int32 loop kernel. The precision is
stated because JAX's default for float32 matmuls on GPUs with tensor cores (Ampere and later) lets
XLA use TF32 (inputs rounded to 10 mantissa bits); HIGHEST asks for full float32 products, so this
step measures float32 arithmetic, and the bf16 step is the tensor-core one. (With these small
integer inputs TF32 would be exact too: the kernel names in the nsys trace say which one ran.)

PREDICTION (floor: the loop's 1.26e12 FLOPs at the FP32 FMA ceiling ``fp32_fma``, ~56 TFLOP/s on
an H200: 22.4 ms): a SIMT float32 GEMM near that rate, the loop ~25 ms, far ahead of the int32 loop
kernel. (A development run on an H200: XLA chose cuBLAS/CUTLASS ``cutlass_80_simt_sgemm`` for the
8192 product, 51.7 TFLOP/s; the loop 25.4 ms.)
"""
from workloads.jax_matmul.floats import FloatLoop


class Float32(FloatLoop):
    name = "float32"
    summary = "the jitted loop on float32 inputs, precision=HIGHEST (full float32, no TF32)"
    input_dtype = "float32"
    flops_kind = "fp32"

    def product(self, a, b):
        import jax
        import jax.numpy as jnp

        return jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST)


VARIANT = Float32
