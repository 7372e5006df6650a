"""The contract every workload variant follows.

A *recipe* is one folder under ``workloads/``: an ordered list of variants,
baseline first, then each optimization step. A *variant* is one module in that
folder holding one subclass of :class:`Variant`. The runner
(:mod:`workloads.harness.runner`) drives every variant the same way, so that the
pipeline can time, trace and profile any of them without knowing what they do:

    v = VariantClass(size=..., seed=...)
    v.setup()            # allocate and fill inputs            (NVTX phase "setup")
    v.step()             # one call of the computation, async  (NVTX phase "compute")
    out = v.result()     # bring the result to the host        (NVTX phase "transfer")
    v.teardown()         # free the device memory (the GPU may go to the next run)
    ref = v.reference()  # float64 NumPy reference             (NVTX phase "check")

Those hooks and ``work`` are the author's; the framework's mixin (:mod:`workloads.backend`) adds
the device plumbing, and :mod:`workloads.harness.check` the hooks the runner calls around its GPU
turn, with defaults (host inputs before it, the sampled check and the reference's inputs after).

Each variant declares the work it must do (:class:`Work`): the fewest bytes it
has to move through device memory and the floating-point operations it has to
perform. Reports divide these by measured time to show how close a variant is
to its floor.
"""
from __future__ import annotations

import abc
import dataclasses
import importlib
from typing import ClassVar

import numpy as np

from workloads.backend import Backend
from workloads.errors import WorkloadError
from workloads.harness.check import CheckHooks


class RecipeFactsError(WorkloadError):
    """A recipe's facts (its ``RECIPE`` table in ``workloads/<recipe>/__init__.py``, its
    ``profile.yaml``, or the config's overrides of them) are missing or wrong: names the file and
    what is wrong."""

    def __init__(self, path, what: str) -> None:
        super().__init__(f"{path}: {what}")
        self.path = str(path)
        self.what = what


class ResultMismatch(WorkloadError):
    """The variant's result disagrees with the float64 reference."""


FLOPS_KINDS = ("fp64", "fp32", "fp16_tensor", "tf32_tensor", "int32")


@dataclasses.dataclass(frozen=True)
class Work:
    """What one call of a variant must do at minimum (nvbench's 'declared bytes').

    ``bytes_read``/``bytes_written``: through device memory. ``bytes_h2d``/``bytes_d2h``: across
    the host link. ``flops``: floating-point operations as written in the source (a
    transcendental counts as one; ncu's instruction counts say what it really costs).
    Each resource gives a time (amount / measured ceiling); the floor is the largest.
    """

    bytes_read: int
    bytes_written: int
    flops: int
    bytes_h2d: int = 0
    bytes_d2h: int = 0
    #: what the FLOPs run on, which picks the ceiling they are measured against: "fp64" (FP64 FMA
    #: rate), "fp32" (FP32 FMA rate), "fp16_tensor" (dense 16-bit matrix multiply through cuBLAS:
    #: bf16/fp16 tensor cores), "tf32_tensor" (dense float32 matrix multiply through cuBLAS with TF32
    #: inputs), "int32" (no ceiling measured: integer work gets no arithmetic floor)
    flops_kind: str = "fp64"

    def __post_init__(self) -> None:
        if self.flops_kind not in FLOPS_KINDS:
            raise WorkloadError(f"Work.flops_kind must be one of {', '.join(FLOPS_KINDS)}, not {self.flops_kind!r}")

    @property
    def bytes_moved(self) -> int:
        return self.bytes_read + self.bytes_written

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


class Variant(CheckHooks, Backend):
    """One step of a recipe. Subclasses set ``name`` and ``summary`` and write the five hooks:
    :meth:`setup`, :meth:`step` (the call), :meth:`result`, :meth:`reference` and :meth:`work`
    (and :meth:`teardown` where the device memory should go before the process ends).

    The rest comes with defaults or from elsewhere. Device plumbing (``synchronize``,
    ``event_pair``, ``free_cached_device_memory``: :class:`workloads.backend.Backend`) comes from
    the framework's mixin, listed first (``class Fused(CupyDevice, Variant)``). The hooks the
    runner calls around its GPU turn (:mod:`workloads.harness.check`: ``prepare_host`` with
    ``keep``/``take`` before it; the sampled check's ``sample_indices``, ``reference_at``,
    ``sampled_result`` and the reference inputs after it) have defaults a variant overrides only
    where it has a cheaper way."""

    #: short identifier used on the command line and in file names
    name: ClassVar[str]
    #: one line saying what this step changes compared with the step it improves on
    summary: ClassVar[str]
    #: largest accepted ||out - ref|| / ||ref|| (float64 work: rounding only)
    tolerance: ClassVar[float] = 1e-12

    def __init__(self, size: int, seed: int = 0) -> None:
        if size <= 0:
            raise WorkloadError(f"size must be positive, got {size}")
        self.size = size
        self.seed = seed

    @abc.abstractmethod
    def setup(self) -> None:
        """Allocate and fill the inputs on the device."""

    @abc.abstractmethod
    def step(self) -> None:
        """Launch one call of the computation. May return before the device finishes."""

    @abc.abstractmethod
    def result(self) -> np.ndarray:
        """Copy the last call's result to the host (synchronizes)."""

    @abc.abstractmethod
    def reference(self) -> np.ndarray:
        """The float64 NumPy reference for the current inputs."""

    @abc.abstractmethod
    def work(self) -> Work:
        """Bytes and FLOPs one call of :meth:`step` must move and do."""

    def teardown(self) -> None:
        """Release the device memory setup() and the calls took (the runner then gives the GPU to
        the next run if the process holds little of it: :meth:`workloads.harness.gpu_turn.GpuTurn.release`);
        the default drops nothing and leaves it to garbage collection."""


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A workload: its variants in order (baseline first) and what it needs.

    The variants are a ladder: each step improves on the step listed just before it, and reports
    compare it with that step; a step that improves on an earlier one instead (a branch) is named in
    :attr:`improves_on`. Per-variant facts live here, not on the variant classes, so that the
    pipeline reads them without importing the variants' GPU packages."""

    name: str
    title: str
    seed_document: str
    framework: str
    #: import names the recipe needs; the pipeline skips it with a reason when one is missing
    requires: tuple[str, ...]
    variants: tuple[str, ...]
    default_size: int
    #: what "size" means for this workload, for reports and --help
    size_meaning: str
    #: the seed document's own measurement of its baseline's time split, if it gave one:
    #: ((activity, percent), ...) with activities "H2D", "kernel", "D2H"
    seed_split: tuple[tuple[str, float], ...] = ()
    seed_split_device: str = ""
    #: extra GPU runs beyond the timed/nsys/ncu runs of every variant: modules
    #: ``workloads/<name>/exp_<experiment>.py``, run as ``python -m workloads.<name>.exp_<experiment>
    #: --out-dir DIR --nsys NSYS --ncu NCU --python PYTHON``
    experiments: tuple[str, ...] = ()
    #: parts the recipe adds to its report: modules ``analysis/report/sections/<name>_<section>.py``, each with
    #: ``render(workload_root, figure_dir) -> str`` (pure functions of the recipe's capture folder)
    sections: tuple[str, ...] = ()
    #: the compute calls run inside cuProfilerStart/Stop (workloads/profiler_range.py), and nsys
    #: captures only that range (``--capture-range=cudaProfilerApi``), as the HPC-center guide
    #: "GPU Profiling, Optimization, and Debugging" does
    capture_range: bool = False
    #: the step ladder's branches: each step improves on the step listed just before it, unless named
    #: here as (step, the earlier step it improves on): a pool added to the baseline, two ways on from
    #: one step. Reports compare each step with that parent (:meth:`parent_of`). A static table, so
    #: that the pipeline reads it without importing the variants' GPU packages.
    improves_on: tuple[tuple[str, str], ...] = ()
    #: place in the reports and the index (lower first; equal orders by name)
    order: int = 1000
    #: the variants whose setup compiles (or loads) every program their calls run, so that the first
    #: call is the same whether the programs were compiled in this process or loaded from a cache. Only
    #: their nsys runs load the recipe's shared compile cache (Framework.shared_compile_cache): that
    #: first call is the cold-start page's "first call of a cold process"
    compiles_in_setup: tuple[str, ...] = ()
    #: experiments whose processes load the recipe's shared compile cache (Framework.shared_compile_cache)
    #: rather than each compiling the same programs: (experiment, variant, size), the step whose timed
    #: run compiles those programs first. An experiment that measures compiling is never listed.
    experiments_from_cache: tuple[tuple[str, str, int], ...] = ()
    #: experiments every process of which takes its turn on a GPU the pipeline's runs share
    #: (workloads/harness/gpu_turn.py: from before its GPU setup to its exit) and measures nothing the wait
    #: could enter, or whose start-ups, timed from the launch, get their turn before it
    #: (gpu_turn.turn_for_child); the others hold the GPU for their whole run
    experiments_in_turns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        named = [step for step, _ in self.improves_on]
        if len(set(named)) != len(named):
            self._refuse("a variant is named twice in improves_on")
        for step, parent in self.improves_on:
            if step not in self.variants:
                self._refuse(f"improves_on names unknown variant {step!r} (have: {', '.join(self.variants)})")
            i = self.variants.index(step)
            if i == 0:
                self._refuse(f"the baseline {step!r} cannot improve on {parent!r}")
            if parent not in self.variants[:i]:
                self._refuse(f"improves_on must name, for {step!r}, a variant listed before it (got {parent!r})")
            if parent == self.variants[i - 1]:
                self._refuse(f"improves_on names ({step!r}, {parent!r}), the step listed just before it: that is "
                             "every step's parent unless named, so leave it out")
        unknown = sorted(set(self.compiles_in_setup) - set(self.variants))
        if unknown:
            self._refuse(f"compiles_in_setup names unknown variants {unknown} (have: {', '.join(self.variants)})")
        unknown = sorted(set(self.experiments_in_turns) - set(self.experiments))
        if unknown:
            self._refuse(f"experiments_in_turns names unknown experiments {unknown}")
        for experiment, variant, size in self.experiments_from_cache:
            if experiment not in self.experiments or variant not in self.compiles_in_setup or size < 1:
                self._refuse(f"experiments_from_cache names ({experiment!r}, {variant!r}, {size}): it needs one of "
                             "its experiments, a variant that compiles in setup and a positive size")

    def _refuse(self, what: str) -> None:
        raise RecipeFactsError(f"workloads/{self.name}/__init__.py", f"RECIPE: {what}")

    def parent_of(self, variant: str) -> str | None:
        """The variant ``variant`` improves on: the one listed before it unless :attr:`improves_on`
        names another (None for the baseline)."""
        if variant not in self.variants:
            raise WorkloadError(f"workload {self.name!r} has no variant {variant!r}")
        i = self.variants.index(variant)
        return dict(self.improves_on).get(variant, self.variants[i - 1] if i else None)

    def variant_class(self, variant: str) -> type[Variant]:
        if variant not in self.variants:
            raise WorkloadError(
                f"workload {self.name!r} has no variant {variant!r}; it has: {', '.join(self.variants)}"
            )
        module = importlib.import_module(f"workloads.{self.name}.{variant}")
        cls = getattr(module, "VARIANT", None)
        if cls is None or not issubclass(cls, Variant):
            raise WorkloadError(f"workloads/{self.name}/{variant}.py must define VARIANT, a Variant subclass")
        if cls.name != variant:
            raise WorkloadError(f"workloads/{self.name}/{variant}.py: VARIANT.name is {cls.name!r}, not {variant!r}")
        return cls


def _chunk_sums(out: np.ndarray, ref: np.ndarray) -> tuple[float, float, int]:
    """(sum of ref², sum of (out - ref)², non-finite elements of out) over both flattened, chunk by
    chunk on threads: a 2 GiB result is checked in a fraction of a second instead of seconds, with no
    full-size temporary."""
    from workloads import hostmath  # noqa: PLC0415 - threads only where a check runs

    out_flat, ref_flat = np.asarray(out).reshape(-1), np.asarray(ref).reshape(-1)
    bounds = hostmath.chunk_bounds(out_flat.size)
    ref_sq, diff_sq, bad = np.zeros(len(bounds)), np.zeros(len(bounds)), np.zeros(len(bounds), dtype=np.int64)

    def work(i: int, start: int, stop: int) -> None:
        o = out_flat[start:stop].astype(np.float64, copy=False)
        bad[i] = o.size - np.count_nonzero(np.isfinite(o))
        r = ref_flat[start:stop].astype(np.float64, copy=False)
        d = o - r
        ref_sq[i], diff_sq[i] = np.dot(r, r), np.dot(d, d)

    hostmath.parallel_chunks(out_flat.size, work)
    return float(ref_sq.sum()), float(diff_sq.sum()), int(bad.sum())


def _relative(scale_sq: float, diff_sq: float) -> float:
    return float(np.sqrt(diff_sq / scale_sq)) if scale_sq > 0 else float(np.sqrt(diff_sq))


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref|| / ||ref|| in float64 (``ref`` is left as it is)."""
    if out.shape != ref.shape:
        raise ResultMismatch(f"result shape {out.shape} differs from reference shape {ref.shape}")
    scale_sq, diff_sq, _ = _chunk_sums(out, ref)
    return _relative(scale_sq, diff_sq)


def check_result(out: np.ndarray, ref: np.ndarray, tolerance: float, what: str) -> float:
    """Raise :class:`ResultMismatch` unless ``out`` matches ``ref`` within ``tolerance``: every
    value finite, and the relative error (:func:`relative_error`) at most ``tolerance``."""
    if out.shape != ref.shape:
        raise ResultMismatch(f"{what}: result shape {out.shape} differs from reference shape {ref.shape}")
    scale_sq, diff_sq, bad = _chunk_sums(out, ref)
    if bad:
        raise ResultMismatch(f"{what}: {bad} non-finite values in the result")
    err = _relative(scale_sq, diff_sq)
    if not err <= tolerance:
        raise ResultMismatch(f"{what}: relative error {err:.3e} exceeds tolerance {tolerance:.1e}")
    return err
