"""The float steps' shared code: the jit step's program on float inputs (arange % 7, see common)."""
from __future__ import annotations

import abc

from workloads.jax_matmul.common import FLOAT_MODULUS, JittedLoop


class FloatLoop(JittedLoop):
    """Subclasses set ``input_dtype`` and :meth:`product`."""

    output_dtype = "float32"

    @abc.abstractmethod
    def product(self, a, b):
        """``a @ b`` as this step computes it (precision, accumulation type)."""

    def setup(self) -> None:
        import jax.numpy as jnp

        dtype = jnp.dtype(self.input_dtype)

        def matrix(n: int):
            if self.float_divisor != 1:
                # made on the host, where the reference is: the same float32 quotients bit for bit
                return jnp.asarray(self.host_inputs(n).astype(dtype))
            return (jnp.arange(n * n) % FLOAT_MODULUS).astype(dtype).reshape(n, n)

        product = self.product

        def seed_loop(pairs):
            # the name XLA gives the program (jit_seed_loop), as in the jit step
            return tuple(product(a, b) for a, b in pairs)

        self.compile(seed_loop, tuple((matrix(n), matrix(n)) for n in self.sizes))
