"""The hooks the runner (:mod:`workloads.harness.runner`) calls on a variant around its GPU turn,
each with a default that fits most variants; :class:`~workloads.contract.Variant` inherits them.

Before the turn, :meth:`HostInputs.prepare_host` makes what needs no GPU (``keep`` hands it to
``setup``, which ``take`` s it). After the calls, :class:`CheckHooks` compares the result with the
float64 reference: every element, or a seeded sample of them (``--check sample``, the profiled
runs), and keeps the host copy of inputs drawn on the device so that the reference can be
computed after the GPU is given back. A variant overrides a hook only where it has a cheaper way:
``reference_at`` for an elementwise reference, ``sampled_result`` for a gather on the device,
``host_reference_inputs`` for inputs drawn on the GPU.
"""
from __future__ import annotations

from typing import Callable, ClassVar

import numpy as np


class HostInputs:
    """Host work done before the run waits for its GPU turn, and what it hands to ``setup``."""

    def prepare_host(self, check: str) -> None:
        """Host work that needs no GPU, done before the run waits for its GPU turn; ``check`` is how
        much of the result the run will compare ("full" or "sample"). The default does nothing; CuPy
        pre-faults the host arrays a full check copies back into (6 GiB at 16384^2, whose first
        touch inside the copies held the GPU ~2 s a run); Numba's and PyCUDA's host-data steps draw
        their seeded inputs (setup takes them, or copies them into page-locked buffers, which need
        the CUDA context)."""

    def keep(self, name: str, value) -> None:
        """Keep ``value`` for one later :meth:`take` of ``name``: host arrays :meth:`prepare_host`
        makes before the turn for ``setup``, inputs copied back for the reference after it."""
        self.__dict__[f"_kept_{name}"] = value

    def take(self, name: str, make: Callable[[], object]):
        """What :meth:`keep` kept under ``name``, taken once (the process then holds no second
        reference to it, and a caller may change it in place), else ``make()``: a variant set up
        without :meth:`prepare_host` (by hand, in a test) makes it where it needs it."""
        kept = self.__dict__.pop(f"_kept_{name}", None)
        return make() if kept is None else kept


class CheckHooks(HostInputs):
    """How the runner compares a variant's result with its float64 reference (``reference`` and
    ``result``, the variant's own hooks) and when it computes that reference."""

    #: the variant's seed (Variant.__init__); its ``result`` and ``reference`` are what the defaults compare
    seed: int

    #: :meth:`reference` or :meth:`reference_at` computes on the device (Warp's float64 simulation):
    #: the runner then computes the reference before it frees the device and gives the GPU to the
    #: next run; otherwise after (the float64 reference on the host is CPU work: 1-4 s for a 2 GiB
    #: result). Inputs drawn on the device are copied back by :meth:`keep_reference_inputs` instead
    reference_uses_device: ClassVar[bool] = False
    #: result elements the sampled check compares (``--check sample``: the profiled runs, whose
    #: full-size check would cost seconds per process; the timed run checks every element)
    check_sample_elements: ClassVar[int] = 1 << 16

    def sample_indices(self, total: int) -> np.ndarray:
        """Flat indices of the result elements the sampled check compares: seeded by the variant's
        seed, sorted, without repeats. Override where the reference is cheap for another pattern
        (whole rows of a matrix product)."""
        if total <= self.check_sample_elements:
            return np.arange(total)
        rng = np.random.default_rng([self.seed, total])
        return np.sort(rng.choice(total, size=self.check_sample_elements, replace=False))

    def reference_at(self, flat_indices: np.ndarray) -> np.ndarray:
        """The float64 reference at ``flat_indices`` of the flattened result. The default computes
        the whole reference; elementwise recipes override it with the cheap computation."""
        return np.ascontiguousarray(self.reference().reshape(-1)[flat_indices], dtype=np.float64)

    def sampled_result(self) -> tuple[np.ndarray, np.ndarray, int]:
        """The last call's result at the sampled check's elements: (those elements, their flat
        indices from :meth:`sample_indices`, the result's element count). The default copies the
        whole result to the host and picks; a framework that can gather on the device overrides
        it (CuPy: 512 KiB cross to the host instead of a 2 GiB result)."""
        out = np.asarray(self.result())
        idx = self.sample_indices(out.size)
        return np.ascontiguousarray(out.reshape(-1)[idx]), idx, int(out.size)

    def host_reference_inputs(self, flat_indices: np.ndarray | None):
        """What :meth:`reference` (``flat_indices`` None) or :meth:`reference_at` (those elements)
        reads from the device, copied to the host now: a variant whose inputs were drawn on the GPU
        overrides it and reads its inputs through :meth:`reference_inputs`. The default: None (the
        inputs are on the host already)."""
        return None

    def keep_reference_inputs(self, flat_indices: np.ndarray | None) -> None:
        """The runner calls it once the result is on the host and before ``teardown``, while the
        run still holds the GPU: :meth:`host_reference_inputs` now, kept for the reference that
        follows, which then runs after the GPU is given back."""
        self.keep("reference_inputs", self.host_reference_inputs(flat_indices))

    def reference_inputs(self, flat_indices: np.ndarray | None):
        """For :meth:`reference` and :meth:`reference_at`: the inputs :meth:`keep_reference_inputs`
        kept, else copied from the device now."""
        return self.take("reference_inputs", lambda: self.host_reference_inputs(flat_indices))
