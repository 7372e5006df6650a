"""Step 1: the whole loop as one ``jax.jit`` program, int32 as in the seed.

One jitted function for the whole loop, not one per side: what the baseline pays is per-operation
dispatch from Python, and one program per call leaves one dispatch per call (one per side would
leave nine). The function takes the inputs as arguments, made once in setup with the seed's
``jnp.arange(n*n).reshape(n, n)``: were they built inside the function from constants, XLA could
fuse the iota into the dot or fold the products at compile time, and the program would no longer
do the work the recipe declares. The function returns every product, so none is dropped as dead
code. It is compiled by a first call in setup.

What does not change: the int32 dot is still XLA's own loop kernel (no cuBLAS, no tensor cores).
PREDICTION: at N = 512 a call is one dispatch (XLA runs the program as one CUDA graph) plus the
nine dots back to back on the GPU, ~0.16 ms of kernels: ~0.3 ms, an order of magnitude under the
baseline; at N = 8192 the same int32 kernel time as the baseline (~0.8 s), so jit alone buys
nothing there. (docs/measurement.md gives the int32 loop's time at 8192; the pipeline runs this
step at 512 only: variant_sizes in workloads/jax_matmul/profile.yaml.)
"""
from workloads.jax_matmul.common import JittedLoop


def seed_loop(pairs):
    """a @ b for every (a, b): the seed's loop body, traced once by jax.jit (XLA names the
    program jit_seed_loop in its NVTX ranges and kernel names)."""
    return tuple(a @ b for a, b in pairs)


class Jit(JittedLoop):
    name = "jit"
    summary = "the loop as one jax.jit program over inputs made once, int32"

    def setup(self) -> None:
        import jax.numpy as jnp

        self.require_int32_default()
        self.compile(seed_loop, tuple(
            (jnp.arange(n * n).reshape(n, n), jnp.arange(n * n).reshape(n, n)) for n in self.sizes))


VARIANT = Jit
