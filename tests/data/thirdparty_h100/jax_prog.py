"""A small JAX program, written for capture under nsys (a third-party fixture): XLA fusions of
elementwise chains and reductions around matmuls, inside a jax.jit loop (lax.fori_loop), plus
eager ops, with NVTX ranges from the nvtx package."""
import jax
import jax.numpy as jnp
import ctypes

import nvtx

# record only the measured part: compiles happen before cudaProfilerStart (nsys --capture-range=cudaProfilerApi)
_cudart = ctypes.CDLL("libcuda.so.1")


@jax.jit
def layer(w, x):
    h = jnp.tanh(x @ w) * 0.5 + jnp.exp(-jnp.abs(x @ w))
    return h / (1.0 + jnp.sum(h * h, axis=-1, keepdims=True))


@jax.jit
def loop(w, x):
    return jax.lax.fori_loop(0, 8, lambda i, a: layer(w, a), x)


key = jax.random.PRNGKey(0)
w = jax.random.normal(key, (1024, 1024), dtype=jnp.float32) / 32.0
x = jax.random.normal(jax.random.PRNGKey(1), (2048, 1024), dtype=jnp.float32)
loop(w, x).block_until_ready()
(jnp.sin(x) + jnp.cos(x)).sum().block_until_ready()
_cudart.cuProfilerStart()
for i in range(3):
    with nvtx.annotate(f"jit_loop_{i}", domain="jaxprog"):
        y = loop(w, x).block_until_ready()
with nvtx.annotate("eager", domain="jaxprog"):
    e = (jnp.sin(x) + jnp.cos(x)).sum().block_until_ready()
_cudart.cuProfilerStop()
print(float(y.sum()), float(e))
