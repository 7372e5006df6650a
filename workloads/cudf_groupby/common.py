"""Inputs, result, reference and declared work shared by every groupby variant.

The same code runs through cuDF (default) or pandas (``COOKBOOK_DATAFRAME=pandas``, the CPU tests):
see :mod:`workloads.cudf_backend`.

Inputs. ``key``: int64, uniform over :data:`NUM_GROUPS` groups. Ten thousand is a realistic
cardinality (stores, products, sensors) and, with random keys, more than the 128 distinct keys per
thread block up to which libcudf aggregates in shared memory, so cuDF takes its general
global-memory path, as any groupby over unsorted keys with more than a few hundred groups does. ``value``: float64 uniform in
[0, :data:`VALUE_HIGH`). cuDF's inputs are drawn on the GPU with CuPy's generator (50 M rows take
milliseconds there, seconds with NumPy plus a copy), after ``import cudf`` has made RMM CuPy's
allocator (cudf/__init__.py does), so they are allocated as cuDF's own buffers are; pandas' with
NumPy's generator, from the same seed (not the same numbers).

Result: a float64 array of shape (:data:`NUM_GROUPS`, 3), row k = (count, mean, sum) of group k;
a group no row fell into is (0, 0, 0). The result's keys index the rows, so a wrong key moves
numbers to the wrong row and fails the check. Reference: ``np.bincount`` in float64 on the inputs
drawn again from the seed (not read back from the frame, so a damaged frame cannot agree with it).

Tolerance. Counts are exact. A sum of n values in any order (cuDF adds with atomics, in whatever
order the threads arrive; pandas with compensated summation; bincount left to right) is within
(n - 1) u sum|x_i| of the exact sum, u = 2^-53; values are positive, so sum|x_i| is the sum itself.
Result and reference can each be that far off, and the mean adds one rounding of a division, so
every entry agrees within 2 (n_max + 1) u relative, n_max the largest group's row count, and so does
the relative norm the check takes: 1.2e-12 at 50 M rows (n_max near 5,300), 3e-14 at 1 M rows.
"""
from __future__ import annotations

import abc

import numpy as np

from workloads.contract import ResultMismatch, Variant, Work
from workloads.cudf_backend import CudfDevice, frame_library, import_frame_library

NUM_GROUPS = 10_000
VALUE_HIGH = 100.0
#: result columns, in the order result() and reference() return them
COLUMNS = ("count", "mean", "sum")
#: bytes the result holds per group: key, count, mean and sum, 8 bytes each
OUTPUT_BYTES_PER_GROUP = 32
#: RMM pool for the pool steps: the inputs (16 B/row; ``import cudf`` routes CuPy's allocations
#: through RMM, so the CuPy-drawn columns live in the pool too) plus a pass's peak (hash set 8 B,
#: per-row block mapping 4 B, per-row SUM and COUNT intermediates 12 B: 24 B/row), with room to
#: spare; a pool that had to grow would show as cudaMalloc inside the compute ranges
POOL_BYTES_PER_ROW = 64
POOL_MIN_BYTES = 256 * 1024 * 1024
#: RMM's pool needs its initial size in multiples of the CUDA allocation alignment
RMM_ALIGNMENT = 256
UNIT_ROUNDOFF = 2.0 ** -53


def summation_tolerance(max_group_rows: int) -> float:
    """Largest relative difference two float64 summations (and means) of groups of at most
    ``max_group_rows`` positive values can show, whatever their order (see the module docstring)."""
    return 2.0 * (max_group_rows + 1) * UNIT_ROUNDOFF


def pool_bytes(rows: int) -> int:
    nbytes = max(POOL_MIN_BYTES, POOL_BYTES_PER_ROW * rows)
    return -(-nbytes // RMM_ALIGNMENT) * RMM_ALIGNMENT


def use_rmm_pool(rows: int) -> int:
    """Make an RMM pool cuDF's memory resource (before cuDF allocates); returns its initial size."""
    import rmm

    nbytes = pool_bytes(rows)
    # pool over cudaMalloc, one block of nbytes now; it grows (more cudaMalloc) only if it must
    rmm.reinitialize(pool_allocator=True, initial_pool_size=nbytes)
    return nbytes


def generate_inputs(library: str, rows: int, seed: int):
    """(keys, values) for ``library``: CuPy arrays on the GPU for cuDF, NumPy arrays for pandas."""
    if library == "cudf":
        import cupy

        rng = cupy.random.default_rng(seed)
        keys = rng.integers(0, NUM_GROUPS, size=rows, dtype=cupy.int64)
        values = rng.random(rows, dtype=cupy.float64)
    else:
        rng = np.random.default_rng(seed)
        keys = rng.integers(0, NUM_GROUPS, size=rows, dtype=np.int64)
        values = rng.random(rows, dtype=np.float64)
    values *= VALUE_HIGH
    return keys, values


def host_inputs(library: str, rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    keys, values = generate_inputs(library, rows, seed)
    if library == "cudf":
        import cupy

        return cupy.asnumpy(keys), cupy.asnumpy(values)
    return keys, values


def reference_table(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """(count, mean, sum) per group 0..NUM_GROUPS-1 in float64; empty groups are (0, 0, 0)."""
    count = np.bincount(keys, minlength=NUM_GROUPS).astype(np.float64)
    total = np.bincount(keys, weights=values, minlength=NUM_GROUPS)
    mean = np.divide(total, count, out=np.zeros_like(total), where=count > 0)
    return np.column_stack([count, mean, total])


def table_from_frame(frame, what: str) -> np.ndarray:
    """A pandas frame indexed by key with columns count/mean/sum, as the (NUM_GROUPS, 3) result."""
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ResultMismatch(f"{what}: result has columns {list(frame.columns)}, lacks {missing}")
    keys = np.asarray(frame.index)
    if keys.dtype.kind not in "iu":
        raise ResultMismatch(f"{what}: result is indexed by {keys.dtype}, not by the integer key")
    if len(keys) and (keys.min() < 0 or keys.max() >= NUM_GROUPS):
        raise ResultMismatch(f"{what}: result has keys outside 0..{NUM_GROUPS - 1}")
    if len(np.unique(keys)) != len(keys):
        raise ResultMismatch(f"{what}: result repeats a key")
    table = np.zeros((NUM_GROUPS, len(COLUMNS)), dtype=np.float64)
    for j, column in enumerate(COLUMNS):
        table[keys, j] = frame[column].to_numpy(dtype=np.float64)
    return table


class GroupbyVariant(CudfDevice, Variant):
    """Subclasses choose how to get count/mean/sum from the grouped values (:meth:`compute`) and
    whether cuDF allocates from an RMM pool (:attr:`use_pool`)."""

    #: cuDF's memory from an RMM pool made in setup (pandas: nothing to pool, the step is skipped)
    use_pool = False

    def __init__(self, size: int, seed: int = 0) -> None:
        super().__init__(size, seed)
        self.library = frame_library()
        self.allocator = "pending setup"
        self.frame = self.out = None

    @abc.abstractmethod
    def compute(self, lib, grouped):
        """The variant's aggregations on ``frame.groupby("key")["value"]``: a frame indexed by key
        with columns count, mean, sum. ``lib`` is the data-frame module (cudf or pandas)."""

    def setup(self) -> None:
        if self.use_pool and self.library == "cudf":
            self.allocator = f"RMM pool of {use_rmm_pool(self.size)} bytes over cudaMalloc"
        elif self.use_pool:
            # pandas works in host memory with the system allocator: an RMM pool would change nothing
            # it uses, so the pool step is skipped (the computation stays the one under test)
            self.allocator = "pandas: host memory, RMM pool step skipped"
        elif self.library == "cudf":
            self.allocator = "RMM's default resource (cudaMalloc/cudaFree per buffer)"
        else:
            self.allocator = "pandas: host memory"
        self.lib = import_frame_library(self.library)
        keys, values = generate_inputs(self.library, self.size, self.seed)
        # the largest group's rows, counted on the host: in a process with a fresh CuPy cache,
        # cupy.bincount spent 6.3 of the 7.0 s of setup at 10 M rows compiling its kernels (H100)
        host_keys = keys if self.library == "pandas" else _to_host(keys)
        # instance value: the runner reads v.tolerance when it checks
        self.tolerance = summation_tolerance(int(np.bincount(host_keys, minlength=NUM_GROUPS).max()))
        self.frame = self.lib.DataFrame({"key": keys, "value": values})
        del keys, values
        self.out = None

    def step(self) -> None:
        # sort=False: cuDF's default; ordering 10,000 result rows is not what the steps compare
        # (result() orders by key on the host)
        grouped = self.frame.groupby("key", sort=False)["value"]
        self.out = self.compute(self.lib, grouped)

    def result(self) -> np.ndarray:
        if self.out is None:
            raise ResultMismatch(f"{self.name}: result() before any step()")
        frame = self.out.to_pandas() if self.library == "cudf" else self.out
        return table_from_frame(frame, f"cudf_groupby/{self.name} ({self.library})")

    def host_reference_inputs(self, flat_indices: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        # drawn again, on the GPU as setup did (every group: the sample is the whole result)
        return host_inputs(self.library, self.size, self.seed)

    def reference(self) -> np.ndarray:
        return reference_table(*self.reference_inputs(None))

    def work(self) -> Work:
        groups = min(NUM_GROUPS, self.size)
        # the least the result needs: key and value read once (one pass), the groups written once;
        # FLOPs as written: mean and sum each add every value (count adds integers; the mean's
        # division is per group)
        return Work(bytes_read=16 * self.size, bytes_written=OUTPUT_BYTES_PER_GROUP * groups,
                    flops=2 * self.size)

    def teardown(self) -> None:
        self.frame = self.out = None


def _to_host(keys) -> np.ndarray:
    import cupy

    return cupy.asnumpy(keys)
