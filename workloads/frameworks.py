"""What the suite knows about each framework, in one record per framework.

A recipe names its framework (``Recipe.framework``); everything that depends on the framework reads
it from :data:`FRAMEWORKS`: the distributions provenance records (:mod:`workloads.harness.provenance`), the
caches a cold start empties (:mod:`workloads.harness.cold`), the ncu kernel-name pattern and line
information switches (:mod:`workloads.tools.kernel_profile`, :mod:`analysis.report.kernel_page`), the timer
reports name (:mod:`analysis.report.markdown`), the environment the profilers need
(``rules/profile.smk``) and how ``--device cpu`` / ``--device cuda`` are honoured
(:mod:`workloads.harness.runner`).

Nothing here imports a GPU package at import time: the analysis imports this module on machines
without any. The checks in :attr:`Framework.cuda_problem` import their package when called.

Adding a framework = one :class:`Framework` record: in :data:`FRAMEWORKS`' table below, or as
``FRAMEWORK`` in the ``__init__.py`` of the first recipe that uses it (the registry finds it there,
so a new framework's recipe folder holds everything about it).
"""
from __future__ import annotations

import dataclasses
import importlib.util
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping

from workloads.warp_backend import configured_warp

#: the CUDA driver's own JIT cache (PTX -> SASS): every framework that loads PTX goes through it
DRIVER_CACHE_VARIABLES = MappingProxyType({"CUDA_CACHE_PATH": "cuda"})

#: distributions every record names, whatever the framework
BASE_DISTRIBUTIONS = MappingProxyType({"numpy": ("numpy",), "nvtx": ("nvtx",)})

CUDA_EVENTS = "CUDA events"


@dataclasses.dataclass(frozen=True)
class Framework:
    """One framework's facts. ``name`` is the value of ``Recipe.framework``."""

    name: str
    #: how pages name it ("Warp", "CuPy")
    title: str
    #: import name -> distribution names to try for its version, first found wins (provenance)
    distributions: Mapping[str, tuple[str, ...]]
    #: environment variable -> sub-folder of a cold run's fresh cache root
    cache_variables: Mapping[str, str]
    #: check that finds a CUDA device through the framework: None when there is one, else one line
    #: saying what is missing (imports the package when called)
    cuda_problem: Callable[[], str | None]
    #: ``ncu -k regex:`` template for a kernel's Python/CUDA name (``{name}``; braces doubled);
    #: None: no rule known (kernel_profile then needs --kernel-regex)
    kernel_pattern: str | None = None
    #: what its kernel names look like (error messages, docs)
    kernel_example: str = ""
    #: how its kernels get line information, and what the lines correlate to (kernel pages' table)
    line_info_howto: str = ""
    line_info_target: str = ""
    #: settings a cold start's private cache folders need besides the folder itself: a framework
    #: that keeps a persistent cache only where told (JAX) gets it turned on, so that a warm start
    #: loads what the cold one compiled, as it does for the frameworks that cache by default
    cache_settings: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: settings that let a recipe's timed and ncu runs share their compiled programs within a
    #: pipeline run; ``{dir}`` becomes the recipe's shared folder. Only for a framework whose
    #: compiles happen outside what those runs measure: in setup or in the warm-up calls before
    #: the timed samples, and on the host, never in a kernel ncu profiles. A step's nsys run shares
    #: only where the step compiles in setup (Recipe.compiles_in_setup), so that its first call, the
    #: cold-start page's, is unchanged; cold/warm starts never share (workloads.harness.cold)
    shared_compile_cache: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: how its variants are timed, in the reports' words
    timer: str = CUDA_EVENTS
    #: environment a step's timed, nsys and ncu runs add (ncu replays kernels: a framework that
    #: preallocates the GPU would make every replay save and restore it; a run that holds little of
    #: the GPU gives it back before its float64 check). Cold/warm starts and the experiments run as
    #: users do
    measurement_env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: NVTX domains the framework itself writes that no report reads, left out of nsys captures
    #: (``--nvtx-domain-exclude``; "default" is the unnamed domain)
    nsys_nvtx_domains_excluded: tuple[str, ...] = ()
    #: environment that makes its recipes run on the CPU (``--device cpu``); None: no CPU path
    cpu_env: Mapping[str, str] | None = None
    #: import names the CPU path needs instead of ``Recipe.requires`` (None: the same)
    cpu_requires: tuple[str, ...] | None = None
    #: the variable that chooses whether SASS relates to the Python lines ("1") or to the generated
    #: CUDA-C ("0"), for frameworks that generate CUDA-C with ``#line`` directives (Warp); None: one view
    line_directives_variable: str | None = None
    #: the variable that puts its kernel cache (the generated sources ncu imports) in a given folder
    kernel_cache_variable: str | None = None
    #: kernel-page table: the order frameworks are listed in (None: not listed)
    howto_order: int | None = None
    #: the next thing to try, in this framework's own terms, by advice key (analysis.model.limiter.advice:
    #: "DRAM", "L2", "issue", "FP64", "XU", "tensor", "grid", "waves", "registers", "latency",
    #: "host link", "launch/host", ...); a key left out gets the advice module's default
    advice: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def line_directives(self) -> bool:
        """Whether its kernel pages come in two views (Python lines or generated CUDA-C)."""
        return self.line_directives_variable is not None

    def kernel_regex(self, name: str) -> str | None:
        return None if self.kernel_pattern is None else self.kernel_pattern.format(name=name)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")


def driver_problem(library: str = "libcuda.so.1") -> str | None:
    """None when the CUDA driver loads and lists a device; else one line saying what is missing.
    Asked through ctypes first, so that a machine without a GPU gets one line and not each
    framework's own warnings and banners."""
    import ctypes

    try:
        lib = ctypes.CDLL(library)
    except OSError:
        return f"the CUDA driver library {library} is not on this machine (no NVIDIA driver)"
    rc = lib.cuInit(0)
    if rc != 0:
        return f"the CUDA driver is present but cuInit failed with CUresult {rc} (no usable GPU)"
    count = ctypes.c_int(0)
    rc = lib.cuDeviceGetCount(ctypes.byref(count))
    if rc != 0 or count.value == 0:
        return "the CUDA driver lists no GPU"
    return None


def _device_count_problem(title: str, module: str, count_devices: Callable[[Any], int],
                          count_errors: type[Exception], count_failed: str, no_device: str) -> str | None:
    """Why the framework ``module`` cannot run on a CUDA GPU here, or None: it must import, and
    ``count_devices(module)`` must find a device without raising ``count_errors``."""
    try:
        imported = importlib.import_module(module)
    except ImportError as e:
        return f"{title} is not importable ({_first_line(e)})"
    try:
        n = count_devices(imported)
    except count_errors as e:
        return f"{count_failed} ({_first_line(e)})"
    return None if n > 0 else no_device


def _cupy_cuda_problem() -> str | None:
    # any exception: CUDARuntimeError for no driver, an insufficient driver, no device
    return _device_count_problem("CuPy", "cupy", lambda cupy: cupy.cuda.runtime.getDeviceCount(), Exception,
                                 "CuPy finds no usable CUDA GPU", "CuPy finds no CUDA GPU")


def _numba_cuda_problem() -> str | None:
    try:
        from numba import cuda
    except ImportError as e:
        return f"Numba CUDA is not importable ({_first_line(e)})"
    # is_available() swallows the driver's errors (CudaSupportError) and answers False
    return None if cuda.is_available() else "Numba finds no CUDA GPU or driver"


def _pycuda_device_count(drv) -> int:
    drv.init()
    return drv.Device.count()


def _pycuda_cuda_problem() -> str | None:
    # any exception: pycuda._driver.Error and its subclasses
    return _device_count_problem("PyCUDA", "pycuda.driver", _pycuda_device_count, Exception,
                                 "PyCUDA finds no usable CUDA GPU", "PyCUDA finds no CUDA GPU")


def _warp_cuda_problem() -> str | None:
    if importlib.util.find_spec("warp") is None:
        return "Warp is not installed (pip install warp-lang)"
    wp = configured_warp()
    return None if wp.is_cuda_available() else "Warp finds no CUDA GPU or driver"


def _jax_cuda_problem() -> str | None:
    # RuntimeError: "Unknown backend cuda" / "Unable to initialize backend 'cuda'"
    return _device_count_problem("JAX", "jax", lambda jax: len(jax.devices("cuda")), RuntimeError,
                                 "JAX has no CUDA backend here", "JAX finds no CUDA device")


def _cudf_cuda_problem() -> str | None:
    if importlib.util.find_spec("cudf") is None:
        return "cuDF is not installed"
    return _cupy_cuda_problem()


_BUILT_IN: Mapping[str, Framework] = MappingProxyType({f.name: f for f in (
    Framework(
        name="cupy", title="CuPy",
        distributions={"cupy": ("cupy-cuda13x", "cupy-cuda12x", "cupy"), "rmm": ("rmm-cu13", "rmm-cu12", "rmm")},
        cache_variables={"CUPY_CACHE_DIR": "cupy"},
        # RawKernel / cupy.fuse(kernel_name=...) as given; ufuncs and ElementwiseKernels add __<types>
        kernel_pattern=r"^{name}(__.*)?$",
        kernel_example="cookbook_squared_diff, cupy_subtract__float64_float64_float64",
        line_info_howto="`RawKernel`/`RawModule`/`ElementwiseKernel(..., options=(\"-lineinfo\",))`; `cupy.fuse` "
                        "and CuPy's own ufuncs take no compile options, so their kernels have no line information",
        line_info_target="raw kernels: the Python file holding the source, through a `#line` directive (the "
                         "`raw_kernel` step); without one, `kern.cu` in a temporary folder CuPy deletes: line "
                         "numbers, no text",
        cuda_problem=_cupy_cuda_problem,
        howto_order=3,
        advice={
            "DRAM at peak": "DRAM is at its practical peak: only fewer bytes help: float32 instead of float64 where "
                            "accuracy allows, or the operations before and after this one fused into the same "
                            "`cupy.fuse` function, so that their arrays never round-trip through memory",
            "DRAM": "one pass over the data: `cupy.fuse` or an `ElementwiseKernel` instead of chained array "
                    "operations (each writes a temporary), narrower dtypes where accuracy allows",
            "issue": "cheaper math per element in the fused kernel: `d * d` instead of `d ** 2` (a `pow` call), "
                     "float32 where accuracy allows, in an `ElementwiseKernel` or `RawKernel`",
            "FP64": "float32 where accuracy allows, and `d * d` instead of `** 2`, in an `ElementwiseKernel`",
            "launch/host": "fewer array operations per call (`cupy.fuse`, an `ElementwiseKernel`), a memory pool "
                           "grown in setup, or the call captured in a CUDA graph (`cupy.cuda.Graph`)",
            "latency": "a `RawKernel` with a grid-stride loop over several elements per thread and vector loads",
            "grid": "a `RawKernel` launched with enough blocks for every SM (grid-stride loop)",
        },
    ),
    Framework(
        name="numba", title="Numba",
        distributions={"numba": ("numba",), "numba_cuda": ("numba-cuda",)},
        cache_variables={"NUMBA_CACHE_DIR": "numba"},
        # the Python name, then ABI tags in brackets; CUDA ufuncs/gufuncs are kernels named
        # __vectorized_<name> / __gufunc_<name> around the scalar function
        kernel_pattern=r"^(__vectorized_|__gufunc_)?{name}(\[.*)?$",
        kernel_example="__vectorized_mycalculation[abi:v3,cw51c...], mycalculation_kernel[abi:v1,cw51c...]",
        line_info_howto="`@cuda.jit(lineinfo=True)`; `vectorize(target=\"cuda\")` takes no options (the suite "
                        "builds the ufunc with a subclass of its builder when `COOKBOOK_LINEINFO=1`)",
        line_info_target="the Python function",
        cuda_problem=_numba_cuda_problem,
        # Numba's CUDA simulator runs the same kernels in Python threads (slow: small sizes only)
        cpu_env={"NUMBA_ENABLE_CUDASIM": "1"},
        howto_order=1,
        advice={
            "issue": "fewer instructions per element in the `@vectorize` body: `fastmath=True` (sin, exp, "
                     "division on the approximate MUFU instructions), float32 data and math",
            "FP64": "float32 data and math (`float32` signatures), or `fastmath=True`",
            "XU": "`fastmath=True`: sin, exp, tanh, sqrt and division on the approximate MUFU instructions",
            "DRAM at peak": "DRAM is at its practical peak: only fewer bytes help: float32 inputs and outputs, or the "
                            "steps around this ufunc in the same `@cuda.jit` kernel so that their arrays stay in registers",
            "DRAM": "fewer bytes: float32 data, one `@vectorize` or `@cuda.jit` kernel for the whole expression",
            "latency": "`@vectorize` fixes one element per thread: a `@cuda.jit` kernel with a grid-stride loop "
                       "over several elements per thread keeps more loads in flight",
            "waves": "`@vectorize` chooses the grid: a `@cuda.jit` kernel with a grid-stride loop sized to the SMs",
            "host link": "keep arrays on the device (`cuda.to_device` once, device `out=` arrays), or pinned host "
                         "buffers (`cuda.pinned_array`) with chunks on streams to overlap copies and kernels",
            "launch/host": "keep the data on the device and launch once per call: a `@cuda.jit` kernel over "
                           "the whole array instead of many small ufunc calls",
        },
    ),
    Framework(
        name="pycuda", title="PyCUDA",
        distributions={"pycuda": ("pycuda",)},
        # XDG_CACHE_HOME: PyCUDA's fallback when PYCUDA_CACHE_DIR is unset, and other XDG tools'
        cache_variables={"PYCUDA_CACHE_DIR": "pycuda", "XDG_CACHE_HOME": "xdg"},
        # SourceModule runs nvcc in setup, the same program in every step: in the H100 reference's
        # nsys captures 0.6-1.05 s per process between the last allocation and cuModuleLoadDataEx
        shared_compile_cache={"PYCUDA_CACHE_DIR": "{dir}"},
        # SourceModule (extern "C" by default): the name as written in the CUDA source
        kernel_pattern=r"^{name}$",
        kernel_example="scale_vec4",
        line_info_howto="`SourceModule(src, options=[\"-lineinfo\"])`; the suite: `COOKBOOK_LINEINFO=1`",
        line_info_target="the Python file holding the CUDA-C source, through a `#line` directive in front of it "
                         "(workloads/cuda_source.py); without one, `kernel.cu` in a temporary folder PyCUDA "
                         "deletes: line numbers, no text",
        cuda_problem=_pycuda_cuda_problem,
        howto_order=2,
        advice={
            "DRAM at peak": "DRAM is at its practical peak: vector loads and coalescing have nothing left to give; only "
                            "fewer bytes help: a narrower type in the `SourceModule` kernel, or the passes before and "
                            "after it fused into the same kernel",
            "DRAM": "vector loads (`double2`/`float4`) in the `SourceModule` kernel and one pass over the data",
            "latency": "several elements per thread (grid-stride loop) and vector loads in the `SourceModule` kernel",
            "grid": "size the grid to the device (the SM count times blocks per SM) with a grid-stride loop",
            "waves": "a grid of whole waves (the SM count times blocks per SM) with a grid-stride loop",
            "registers": "`__launch_bounds__` on the kernel (or `options=[\"-maxrregcount=N\"]` in `SourceModule`)",
            "host link": "page-locked host buffers (`pagelocked_empty`) and `memcpy_htod_async` on streams to overlap "
                         "copies with the kernel, or keep the data on the device across calls",
        },
    ),
    Framework(
        name="warp", title="Warp",
        distributions={"warp": ("warp-lang",)},
        cache_variables={"WARP_CACHE_PATH": "warp"},
        # Warp builds a module at its first launch (the baseline's warm-up) or at load_module in
        # setup (the other steps), and its float64 check builds one more; a module's folder is named
        # by its hash and built in a folder of its own, then renamed, so concurrent runs are safe.
        # On an H100, plane_threads' setup took 6.0 s compiling and 0.29 s loading from a filled
        # cache, its check 1.14 s and 0.07 s
        shared_compile_cache={"WARP_CACHE_PATH": "{dir}"},
        # <python name>_<8 hex digits of the module hash>_cuda_kernel_forward (backward: _backward)
        kernel_pattern=r"^{name}_[0-9a-f]{{8}}_cuda_kernel_forward$",
        kernel_example="get_acceleration_a9fb4286_cuda_kernel_forward",
        line_info_howto="`wp.config.lineinfo = True` (or the module option `lineinfo`); the suite: "
                        "`COOKBOOK_LINEINFO=1`",
        line_info_target="the Python kernel (default) or, with `wp.config.line_directives = False`, the "
                         "generated CUDA-C in the kernel cache",
        cuda_problem=_warp_cuda_problem,
        cpu_env={"COOKBOOK_WARP_DEVICE": "cpu"},
        line_directives_variable="COOKBOOK_WARP_LINE_DIRECTIVES",
        kernel_cache_variable="COOKBOOK_WARP_KERNEL_CACHE",
        howto_order=0,
        advice={
            "waves": "`block_dim` in `wp.launch`: the grid is `dim / block_dim` blocks, and a block size that fills "
                     "whole waves of the SMs (or more work per thread) removes the partial last wave",
            "grid": "more threads per launch: a larger `dim` (one thread per neighbour plane or cell, not per "
                    "particle) or a smaller `block_dim`",
            "registers": "a smaller `block_dim` or fewer live values in the kernel (Warp has no launch-bounds knob)",
            "latency": "better locality of the neighbour loads: particles sorted by cell, a `wp.HashGrid` query, "
                       "tiles (`wp.tile_load`) for the data a block shares",
            "L2": "better locality: particles sorted by cell so neighbours share cache lines, tiles for shared data",
            "launch/host": "capture the step in a CUDA graph (`wp.ScopedCapture`) and launch it once per call",
        },
    ),
    Framework(
        name="jax", title="JAX",
        distributions={"jax": ("jax",), "jaxlib": ("jaxlib",)},
        # JAX has no persistent compilation cache until given a folder (jax_compilation_cache_dir):
        # cold/warm starts give it one in their private cache folder, so that "warm" means a filled
        # cache, as for the other frameworks (every entry kept, however quick its compile)
        cache_variables={"JAX_COMPILATION_CACHE_DIR": "jax"},
        cache_settings={"JAX_ENABLE_COMPILATION_CACHE": "true", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"},
        # every step compiles (and XLA autotunes its GEMMs, docs/measurement.md) in setup: a step's
        # timed run stores the programs, its nsys and ncu runs load them; every cache entry is
        # kept, however quick its compile or small its size
        shared_compile_cache={"JAX_ENABLE_COMPILATION_CACHE": "true", "JAX_COMPILATION_CACHE_DIR": "{dir}",
                              "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                              "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"},
        cuda_problem=_jax_cuda_problem,
        timer="a host timer around `block_until_ready()` (JAX has no CUDA-event API)",
        # JAX preallocates 75% of the GPU by default: ncu's kernel replay then saves and restores
        # ~105 GB per pass and makes no progress, and a timed or nsys run keeps the GPU through its
        # float64 check (3-4 s at 8192) and exit. Without it the steady calls are the same, so are
        # the calls nsys traces: the allocator experiment's float32 loop at 8192 made 0 allocations
        # per call and ran 0.6% faster than with it (H200 reference); preallocating cost ~1.2 s of
        # each process's setup (H100). Its cold/warm starts and experiments keep JAX's default
        measurement_env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
        # XLA's own NVTX ranges: "TSL" (one per thunk, with registered strings) and the default
        # domain (XlaLauncher). On an H100 (nsys 2025.3.1) the eager baseline at 2048 under a capture
        # range left a capture nsys could not process ("Cannot find string for an exterior index")
        # 3 times of 3 with them and 0 of 3 without (tf32 at 512: 0 of 2 either way)
        nsys_nvtx_domains_excluded=("TSL", "default"),
        cpu_env={"JAX_PLATFORMS": "cpu"},
        advice={
            "launch/host": "less host wait per call: one `jax.jit` over the whole step, arrays kept on the device, "
                           "no `block_until_ready` or Python round-trips inside the loop",
            "issue": "the GEMM on the tensor cores: `jax.default_matmul_precision(\"tensorfloat32\")` or bf16 inputs "
                     "with `preferred_element_type=jnp.float32`",
            "FMA": "the GEMM on the tensor cores: `jax.default_matmul_precision(\"tensorfloat32\")` or bf16 inputs",
            "tensor": "the tensor cores are near their rate: a lower precision (FP8 through `jax.lax.dot_general` "
                      "with `preferred_element_type`) or less work is what is left",
            "latency": "larger matrices per call (batch several products in one `jnp.matmul` or `vmap`)",
        },
    ),
    Framework(
        name="cudf", title="cuDF",
        distributions={"cudf": ("cudf-cu13", "cudf-cu12", "cudf"), "rmm": ("rmm-cu13", "rmm-cu12", "rmm"),
                       "pandas": ("pandas",)},
        cache_variables={"CUPY_CACHE_DIR": "cupy"},
        # CuPy's kernel cache: setup draws the inputs with CuPy's generator, whose kernels CuPy
        # compiles with NVRTC in every process with an empty cache (H200, 1 M rows: 5.8-9.1 s of
        # setup cold, 2.2-3.5 s warm); the timed run compiles them, its nsys and ncu runs load them
        shared_compile_cache={"CUPY_CACHE_DIR": "{dir}"},
        cuda_problem=_cudf_cuda_problem,
        # the same recipe code through pandas (workloads/cudf_backend.py)
        cpu_env={"COOKBOOK_DATAFRAME": "pandas"},
        cpu_requires=("pandas",),
        advice={
            "launch/host": "fewer, larger cuDF calls per step (each pays cuDF's Python and libcudf host work): "
                           "all aggregations in one `groupby().agg({...})`, allocations from an RMM pool "
                           "(`rmm.reinitialize(pool_allocator=True)`), several frames' groupbys batched into one; "
                           "unchanged pandas code runs the same way under the pandas accelerator mode "
                           "(`python -m cudf.pandas`)",
            "L2": "the hash aggregation's atomics run at L2's rate: fewer aggregations over the same keys, narrower "
                  "value columns (float32, int32), or fewer distinct keys per pass",
            "library": "a libcudf kernel: its launch configuration is libcudf's; all aggregations in one `agg` "
                       "call run one hash pass instead of one per aggregation",
        },
    ),
    # a new framework: one record above this line
)})


class _Frameworks(Mapping):
    """The built-in records and those recipe folders declare (``FRAMEWORK`` in their
    ``__init__.py``), merged on first use: the registry imports the recipes, which may import this
    module, so the merge waits until a record is asked for."""

    def __init__(self, built_in: Mapping[str, Framework]) -> None:
        self._built_in = built_in
        self._merged: Mapping[str, Framework] | None = None

    def _all(self) -> Mapping[str, Framework]:
        if self._merged is None:
            from workloads.registry import declared_frameworks  # noqa: PLC0415 - see the class doc

            merged = dict(self._built_in)
            for record, where in declared_frameworks():
                if record.name in merged and merged[record.name] != record:
                    raise ValueError(f"{where}: FRAMEWORK {record.name!r} is already defined "
                                     "(workloads/frameworks.py or another recipe): use that record")
                merged[record.name] = record
            self._merged = MappingProxyType(merged)
        return self._merged

    def __getitem__(self, name: str) -> Framework:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


#: every framework record: the table above and the recipes' own (see the module doc)
FRAMEWORKS: Mapping[str, Framework] = _Frameworks(_BUILT_IN)


class UnknownFramework(KeyError):
    """A recipe names a framework that has no record here."""


def framework(name: str) -> Framework:
    try:
        return FRAMEWORKS[name]
    except KeyError:
        raise UnknownFramework(f"no framework record {name!r} in workloads/frameworks.py nor as FRAMEWORK in a "
                               f"recipe's __init__.py (have: {', '.join(FRAMEWORKS)})") from None


def distributions() -> dict[str, tuple[str, ...]]:
    """Import name -> distribution names, over every framework (provenance)."""
    out = dict(BASE_DISTRIBUTIONS)
    for f in FRAMEWORKS.values():
        out.update(f.distributions)
    return out


def cache_variables() -> dict[str, str]:
    """Environment variable -> cache sub-folder, over the driver and every framework (cold starts)."""
    out = dict(DRIVER_CACHE_VARIABLES)
    for f in FRAMEWORKS.values():
        out.update(f.cache_variables)
    return out


def cache_settings() -> dict[str, str]:
    """The settings cold starts add to their private cache folders, over every framework."""
    out: dict[str, str] = {}
    for f in FRAMEWORKS.values():
        out.update(f.cache_settings)
    return out


def shared_compile_caches(folder: str) -> dict[str, dict[str, str]]:
    """Framework name -> the settings of its shared compile cache in ``folder/<framework>``, for
    the frameworks that have one."""
    return {f.name: {var: value.replace("{dir}", f"{folder}/{f.name}")
                     for var, value in f.shared_compile_cache.items()}
            for f in FRAMEWORKS.values() if f.shared_compile_cache}


def compile_cache_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The cache and shared-compile-cache settings present in ``environ`` (provenance: whether
    a run compiled afresh or loaded a recipe's shared programs)."""
    names = set()
    for f in FRAMEWORKS.values():
        names.update(f.cache_settings, f.shared_compile_cache)
    return {n: environ[n] for n in sorted(names) if n in environ}


def line_info_table() -> list[tuple[str, str, str]]:
    """(framework, how, lines correlate to) rows for kernel pages, in the frameworks' table order."""
    listed = sorted((f for f in FRAMEWORKS.values() if f.howto_order is not None), key=lambda f: f.howto_order)
    return [(f.title, f.line_info_howto, f.line_info_target) for f in listed]


def nsys_nvtx_flags(record: Framework) -> list[str]:
    """nsys flags that leave the framework's own NVTX domains out of a capture (none for most)."""
    excluded = record.nsys_nvtx_domains_excluded
    return [f"--nvtx-domain-exclude={','.join(excluded)}"] if excluded else []
