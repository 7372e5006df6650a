"""NVTX across processes, from the RAPIDS blog post on NVTX and Nsight Systems for PyData.

The blog's multi-process example as a recipe: a parent starts one process per
matrix size (4096 and 1024 by default, with the "spawn" start method: a forked
child cannot use CUDA). Each child names its main thread (``matrix-4096``),
builds an n x n matrix of uniform random float64 values with CuPy, takes its
mean, and checks the mean against NumPy in float64. Its phases are the suite's
NVTX ranges ``nvtx_multiprocess/n<size>/<phase>``; two CuPy functions are
wrapped in ranges of the ``cookbook.thirdparty`` domain through
:func:`workloads.annotate.annotate_functions`, without editing CuPy. The parent
writes one JSON record with each child's result and provenance.

This is not a :class:`~workloads.contract.Recipe` of optimization steps (there
is nothing to optimize: the point is the timeline), so it is not in
``workloads/registry.py``. Run it under Nsight Systems::

    nsys profile -t cuda,nvtx -s none --cpuctxsw none -o nvtx_multiprocess \\
        python -m workloads.nvtx_multiprocess --output results/nvtx_multiprocess.json
    nsys export --type sqlite nvtx_multiprocess.nsys-rep
    python -m analysis multiprocess-report nvtx_multiprocess.sqlite \\
        --output reports/nvtx_multiprocess.md --figure reports/figures/nvtx_multiprocess_timeline.png

See README.md in this folder for when to use which kind of annotation.
"""

WORKLOAD = "nvtx_multiprocess"
SEED_DOCUMENT = "000"
#: the blog's two matrices: n x n float64 (128 MiB and 8 MiB)
DEFAULT_SIZES = (4096, 1024)
#: third-party functions wrapped in each CuPy child: the matrix's generation and its mean
CUPY_FUNCTIONS = ("cupy.random.Generator.random", "cupy.mean")
#: the same on the NumPy stand-in (numpy.random.Generator is an extension type and cannot be patched)
NUMPY_FUNCTIONS = ("numpy.mean",)
REQUIRES = ("cupy",)


def variant_name(size: int) -> str:
    """The variant part of the child's range names: ``n4096``."""
    return f"n{size}"


def role_name(size: int) -> str:
    """The child's thread name: ``matrix-4096`` (fits Linux's 15-byte limit up to 9 digits)."""
    return f"matrix-{size}"
