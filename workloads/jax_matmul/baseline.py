"""Baseline: the HPC-center guide's loop exactly, eager JAX, int32.

Per side n and per call: two ``jnp.arange(n*n).reshape(n, n)`` (each an iota and a reshape,
dispatched one by one) and ``A @ B``, an int32 dot. Every operation is its own small XLA program,
launched from Python: at the seed's sizes (n <= 512, 3.1e8 FLOPs in all) the GPU work is a few
microseconds per kernel and the call is bound by dispatch, not by the GPU. And the int32 dot cannot
use cuBLAS or tensor cores: cuBLAS has no int32 GEMM, so XLA emits its own loop kernel for it.

Setup runs the loop once, untimed: the first pass compiles every eager operation (27 small XLA
programs, each through a ptxas child process). The seed's capture holds that compilation; here the
calls measured and profiled are the ones after it, as for the jitted steps, which compile in setup
too. (With the compilation inside the capture range, nsys 2025.3.1 lost the whole CUDA trace:
"Cannot find string for an exterior index".)

PREDICTION: at N = 512 the floor is the host's, not the GPU's: 45 eager operations per call
(per side: two iotas, two reshapes as device copies, one dot), each an XLA program dispatched from
Python with about nine CUDA API calls (context switch, event record and wait, host callback,
launch), so 45 x ~100 us = ~5 ms per call, while the GPU work (27 kernels, the dots of n <= 512
taking 2-130 us) is ~0.2 ms: the GPU busy a few percent, the call bound by dispatch. At N = 8192
the int32 dot's kernel (XLA's own ``wrapped_dot``, ~1.4 TOP/s) takes ~0.8 s: bound by the GPU's
work, at about 1/600 of the bf16 step's rate. (A development run on an H200 measured 4.6-5.9 ms
and 905 ms.)
"""
from workloads.jax_matmul.common import MatmulLoop


class Baseline(MatmulLoop):
    name = "baseline"
    summary = "the HPC-center guide's loop as written: eager jnp.arange inputs and A @ B per side, int32"

    def setup(self) -> None:
        import jax
        import jax.numpy as jnp

        self.require_int32_default()
        # start JAX's GPU client (and its allocator) here, not inside the first call
        jax.block_until_ready(jnp.zeros((), dtype=jnp.int32))
        # one pass of the loop: JAX compiles each eager operation (iota, reshape, dot per side) the
        # first time it meets it; the timed and profiled calls are the steady state after that
        self.step()
        self.synchronize()

    def step(self) -> None:
        import jax.numpy as np  # the seed's spelling

        products = []
        for size in self.sizes:
            A = np.arange(size**2).reshape(size, size)
            B = np.arange(size**2).reshape(size, size)
            C = A @ B
            # kept, not dropped as the seed drops them: synchronize() waits for every product
            products.append(C)
        self.pending = products


VARIANT = Baseline
