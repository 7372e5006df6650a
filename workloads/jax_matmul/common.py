"""What every JAX matmul variant shares: the seed's sizes, the inputs, the reference, the work.

Every variant's step() runs the HPC-center guide's loop, one product per side n = 2, 4, ..., N (``--size N``,
a power of two), so all variants do the same work; N = 512 is the seed's own loop, and at
N = 8192 the last product holds 7/8 of the FLOPs (sum of 2n^3 over the sides = 2N^3 * 8/7 nearly).

Inputs keep the seed's ``arange(n*n).reshape(n, n)``, with A and B equal, as the seed has them:

* int32 (baseline, jit): exactly the seed's values 0 .. n^2-1. From n = 128 on, the sums overflow
  int32 (n = 64 peaks at 5.4e8, n = 128 at 1.7e10, n = 512 at 1.8e13) and wrap around (two's
  complement, modulo 2^32), on the GPU as in the seed. The check compares with the exact product
  reduced modulo 2^32 (:func:`int32_wrapped_matmul`), so a wrong kernel still fails while the
  seed's overflow is reproduced, not hidden. Tolerance 0.
* float32, bf16: ``arange(n*n) % 7``: small integers, exact in bfloat16 (8 significant bits) and
  float32. Every partial sum is an integer of at most 36 n (below 2^19 at n = 8192), far under the
  2^24 up to which float32 holds every integer, so any accumulation order in float32 gives the
  exact product: the reference (float64 NumPy) must match *exactly*, and the tolerance is 0.
  With 7 (odd) as the modulus the columns of B are not constant for power-of-two n, so a
  transposed or shifted operand changes the result.
* tf32: the same values divided by 7 in float32 (``(arange(n*n) % 7) / 7``): k/7 has a repeating
  binary expansion, so every nonzero value uses all 24 bits of float32 and loses some to TF32's 11
  (10 stored): the check sees what TF32 costs, which integers below 2^11 would hide. The reference
  is the float64 product of the same float32 values; the tolerance is TF32's error bound for an
  n-term dot product (:func:`tf32_tolerance`).
"""
from __future__ import annotations

import numpy as np

from workloads import hostmath
from workloads.contract import Variant, Work, WorkloadError
from workloads.jax_backend import JaxDevice

#: values of the float inputs: arange(n*n) % FLOAT_MODULUS
FLOAT_MODULUS = 7
#: the largest side this recipe accepts: exactness of the float check (36 n < 2^24) and
#: int32 arange (n^2 < 2^31) both hold up to here
MAX_SIZE = 1 << 15


def seed_sizes(largest: int) -> tuple[int, ...]:
    """The sides 2, 4, ..., ``largest`` (the seed: ``[2**i for i in range(1, 10)]`` for 512)."""
    if not isinstance(largest, (int, np.integer)) or largest < 2 or largest & (largest - 1):
        raise WorkloadError(f"jax_matmul: --size is the largest matrix side and must be a power of two >= 2, "
                            f"got {largest}")
    if largest > MAX_SIZE:
        raise WorkloadError(f"jax_matmul: --size {largest} is over {MAX_SIZE} (int32 arange and the exact "
                            "float check need n^2 < 2^31)")
    return tuple(1 << i for i in range(1, int(largest).bit_length()))


def seed_values(n: int) -> np.ndarray:
    """The seed's matrix: arange(n*n).reshape(n, n), int64 on the host (the device gets int32)."""
    return np.arange(n * n, dtype=np.int64).reshape(n, n)


def float_values(n: int, divisor: int = 1) -> np.ndarray:
    """The float variants' matrix: arange(n*n) % 7, divided by ``divisor`` in float32 (correctly
    rounded, as the device divides), as float64 on the host."""
    values = (np.arange(n * n, dtype=np.int64) % FLOAT_MODULUS).astype(np.float32)
    if divisor != 1:
        values /= np.float32(divisor)
    return values.astype(np.float64).reshape(n, n)


#: TF32: float32's 8-bit exponent and 10 of its 23 stored mantissa bits
TF32_MANTISSA_BITS = 10
#: an input's relative error on its way to TF32: under 2^-10 if the low 13 bits are cut (a tensor
#: core fed float32 registers reads only the top 19 bits), under 2^-11 if rounded to nearest
#: (cvt.rna.tf32.f32); which one a library's kernel does is its choice, so the bound takes the cut
TF32_INPUT_ERROR = 2.0 ** -TF32_MANTISSA_BITS
#: float32 accumulation, one ulp per addition (2^-23 relative: covers adders that truncate)
FP32_ACCUMULATION_ERROR = 2.0 ** -23


def tf32_tolerance(n: int) -> float:
    """Largest relative error of C = A B (n x n, nonnegative entries) computed with TF32 inputs and
    float32 accumulation, element by element and so in the relative norm the check takes.

    One term a_k b_k: both inputs rounded to TF32, (1 + e_a)(1 + e_b), |e| <= TF32_INPUT_ERROR; the
    product of two 11-bit significands is exact in float32. The sum of n such terms in float32: at
    most (n - 1) FP32_ACCUMULATION_ERROR relative to the sum of the terms' magnitudes, which for
    nonnegative inputs is the exact sum itself. First order, plus the e_a e_b term:
    2 e + e^2 + (n - 1) 2^-23; 2.9e-3 at n = 8192, 2.0e-3 at n = 512."""
    e = TF32_INPUT_ERROR
    return 2.0 * e + e * e + (n - 1) * FP32_ACCUMULATION_ERROR


def tf32_round(values: np.ndarray, nearest: bool = False) -> np.ndarray:
    """float32 ``values`` as TF32 holds them (in float32): the low 13 mantissa bits cut, or rounded to
    nearest with ties away from zero (cvt.rna.tf32.f32). Finite values only. For the expected error
    of the tf32 step (the host product of the rounded inputs)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    low = np.uint32((1 << (23 - TF32_MANTISSA_BITS)) - 1)
    if nearest:
        bits = bits + np.uint32(1 << (22 - TF32_MANTISSA_BITS))
    return (bits & ~low).view(np.float32)


def parallel_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` in float64, row blocks on threads: BLAS releases the GIL, and GPU hosts often
    pin BLAS to one thread (OMP_NUM_THREADS=1), where one 8192^3 product would take ~20 s."""
    a = np.ascontiguousarray(a, dtype=np.float64)
    b = np.ascontiguousarray(b, dtype=np.float64)
    out = np.empty((a.shape[0], b.shape[1]), dtype=np.float64)

    def rows(_i: int, start: int, stop: int) -> None:
        np.matmul(a[start:stop], b, out=out[start:stop])

    hostmath.parallel_chunks(a.shape[0], rows)
    return out


def int32_wrapped_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` in int32 arithmetic that wraps modulo 2^32, computed exactly; returned as float64.

    A 32-bit integer matmul has no BLAS, and NumPy's integer loop would take minutes at 8192. So:
    each operand, as unsigned 32-bit (two's complement), splits into 16-bit halves a = a1*2^16 + a0;
    mod 2^32, a@b = a0@b0 + 2^16 (a1@b0 + a0@b1), the a1@b1 term being a multiple of 2^32. Each of
    the three products has terms below 2^32 summed over n <= 2^20 of them, under 2^52: exact in
    float64, hence three float64 BLAS products. The sum is reduced mod 2^32 and read as int32."""
    if a.shape[1] != b.shape[0]:
        raise WorkloadError(f"int32_wrapped_matmul: shapes {a.shape} and {b.shape} do not chain")
    if a.shape[1] > (1 << 20):
        raise WorkloadError("int32_wrapped_matmul: inner dimension over 2^20 is not exact in float64")
    ua = a.astype(np.int64).astype(np.uint32).astype(np.uint64)
    ub = b.astype(np.int64).astype(np.uint32).astype(np.uint64)
    a0, a1 = (ua & 0xFFFF).astype(np.float64), (ua >> 16).astype(np.float64)
    b0, b1 = (ub & 0xFFFF).astype(np.float64), (ub >> 16).astype(np.float64)
    del ua, ub
    low = parallel_matmul(a0, b0).astype(np.uint64)
    mid = parallel_matmul(a1, b0).astype(np.uint64)
    mid += parallel_matmul(a0, b1).astype(np.uint64)
    total = (low + (mid << np.uint64(16))) & np.uint64(0xFFFFFFFF)
    return total.astype(np.uint32).view(np.int32).astype(np.float64)


class MatmulLoop(JaxDevice, Variant):
    """The HPC-center guide's loop over sides 2 .. N. Subclasses set the dtypes and :meth:`step`.

    ``self.pending`` holds the products of the last call, smallest first (what synchronize waits for)."""

    #: "int32", "float32" or "bfloat16": the inputs' dtype
    input_dtype: str = "int32"
    #: the products' dtype
    output_dtype: str = "int32"
    #: Work.flops_kind: the ceiling the FLOPs are measured against
    flops_kind: str = "int32"
    #: int32: exact modulo 2^32; float32/bf16: exact, see the module doc
    tolerance = 0.0
    #: the float inputs are arange % 7 divided by this in float32 (1: the integers themselves)
    float_divisor: int = 1

    def __init__(self, size: int, seed: int = 0) -> None:
        super().__init__(size, seed)
        self.sizes = seed_sizes(size)

    def host_inputs(self, n: int) -> np.ndarray:
        """The values of A (= B) at side n, on the host, as the device gets them."""
        return seed_values(n) if self.input_dtype == "int32" else float_values(n, self.float_divisor)

    def require_int32_default(self) -> None:
        """The seed's ``jnp.arange`` is int32 only while JAX's 64-bit mode is off (the default)."""
        import jax

        if jax.config.jax_enable_x64:
            raise WorkloadError("jax_matmul: JAX_ENABLE_X64 is on, so jnp.arange gives int64, not the seed's "
                                "int32; run without it")

    def result(self) -> np.ndarray:
        if not self.pending:
            raise WorkloadError("jax_matmul: result() before any step()")
        return np.asarray(self.pending[-1]).astype(np.float64)

    def reference(self) -> np.ndarray:
        a = self.host_inputs(self.sizes[-1])
        if self.input_dtype == "int32":
            return int32_wrapped_matmul(a, a)
        return parallel_matmul(a, a)

    #: rows of the largest product the sampled check recomputes (all of their columns)
    check_sample_rows = 8

    def sample_indices(self, total: int) -> np.ndarray:
        """Whole rows of the largest product: each costs one row times the matrix on the host,
        where scattered elements would need most rows."""
        n = self.sizes[-1]
        rng = np.random.default_rng([self.seed, total])
        rows = np.sort(rng.choice(n, size=min(n, self.check_sample_rows), replace=False))
        return (rows[:, None] * n + np.arange(n)).reshape(-1)

    def reference_at(self, flat_indices: np.ndarray) -> np.ndarray:
        n = self.sizes[-1]
        rows, position = np.unique(flat_indices // n, return_inverse=True)
        a = self.host_inputs(n)
        part = int32_wrapped_matmul(a[rows], a) if self.input_dtype == "int32" else parallel_matmul(a[rows], a)
        return part[position, flat_indices % n]

    def work(self) -> Work:
        item_in = {"int32": 4, "float32": 4, "bfloat16": 2}[self.input_dtype]
        item_out = {"int32": 4, "float32": 4}[self.output_dtype]
        return Work(
            bytes_read=sum(2 * item_in * n * n for n in self.sizes),
            bytes_written=sum(item_out * n * n for n in self.sizes),
            flops=sum(2 * n ** 3 for n in self.sizes),
            flops_kind=self.flops_kind,
        )

    def teardown(self) -> None:
        self.pending = None


class JittedLoop(MatmulLoop):
    """The jitted steps: one program for the whole loop over inputs made once in setup."""

    def compile(self, loop, inputs) -> None:
        """jax.jit ``loop`` and run it once on ``inputs``: tracing and compiling happen in setup, so
        that no call in the compute phase does."""
        import jax

        self.inputs = inputs
        self.program = jax.jit(loop)
        self.pending = self.program(self.inputs)
        jax.block_until_ready(self.pending)

    def step(self) -> None:
        self.pending = self.program(self.inputs)

    def teardown(self) -> None:
        self.pending = self.inputs = None
