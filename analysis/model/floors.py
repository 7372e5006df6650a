"""The floor of a variant: the time the declared (minimum) work takes at the reference rates
measured in the same run. Each resource gives a time (amount / rate); the floor is the largest,
and the resource that sets it is named.

The rates are measured references (a device-to-device copy, pinned copies, an FMA loop, a library
GEMM), not hardware ceilings: a step can run at or slightly above one. :func:`time_vs_floor` says
so in words ("runs at the measured device-to-device copy rate"), never "beats the ceiling". The
effective rate here (declared minimum bytes over the measured time) is not the DRAM throughput ncu
measures (bytes the kernels really moved): reports keep the two apart and label both. What limits
a step is measured separately (analysis.model.limiter)."""
from __future__ import annotations

import dataclasses


#: Work.flops_kind -> (resource named in reports, ceiling in ceilings.json). Integer work has none.
ARITHMETIC_CEILINGS = {
    "fp64": ("FP64 arithmetic", "fp64_fma"),
    "fp32": ("FP32 arithmetic", "fp32_fma"),
    "fp16_tensor": ("16-bit tensor-core matmul", "fp16_gemm"),
    "tf32_tensor": ("TF32 tensor-core matmul", "tf32_gemm"),
}


#: ceilings.json key -> what the rate is, in the reports' words
RATE_NAMES = {
    "d2d_copy": "measured device-to-device copy rate",
    "h2d_pinned": "measured pinned host-to-device copy rate",
    "d2h_pinned": "measured pinned device-to-host copy rate",
    "fp64_fma": "measured FP64 FMA rate",
    "fp32_fma": "measured FP32 FMA rate",
    "fp16_gemm": "measured FP16 tensor-core GEMM rate",
    "tf32_gemm": "measured TF32 tensor-core GEMM rate",
}

#: A step within this factor of its floor runs at the reference rate: the rates are medians of
#: their own timed repeats, with a spread of a few percent, and a kernel can stream slightly
#: better than the copy that measured the rate.
AT_RATE_FACTOR = 1.05


@dataclasses.dataclass(frozen=True)
class Term:
    resource: str  # human-readable, e.g. "device memory"
    amount: float  # bytes or FLOPs
    unit: str  # "GB/s" or "TFLOP/s"
    ceiling: float  # in unit: the measured reference rate
    ms: float
    rate_name: str = ""  # RATE_NAMES of the reference


@dataclasses.dataclass(frozen=True)
class Floor:
    ms: float
    binding: Term
    terms: tuple[Term, ...]

    def achieved(self, median_ms: float) -> float:
        """The binding resource's achieved rate, in its unit, at the measured median."""
        scale = 1e6 if self.binding.unit == "GB/s" else 1e9
        return self.binding.amount / median_ms / scale


def floor(work: dict, ceilings: dict) -> Floor:
    """``work``: a Work as a dict; ``ceilings``: the ``ceilings`` mapping of ceilings.json."""
    terms = []

    def add(resource: str, amount: float, key: str, rate_key: str, unit: str, scale: float) -> None:
        if amount and key in ceilings:
            rate = ceilings[key][rate_key]
            terms.append(Term(resource, amount, unit, rate, amount / rate / scale, RATE_NAMES.get(key, key)))

    add("device memory", work["bytes_read"] + work["bytes_written"], "d2d_copy", "gb_per_s", "GB/s", 1e6)
    add("host-to-device link", work.get("bytes_h2d", 0), "h2d_pinned", "gb_per_s", "GB/s", 1e6)
    add("device-to-host link", work.get("bytes_d2h", 0), "d2h_pinned", "gb_per_s", "GB/s", 1e6)
    kind = work.get("flops_kind", "fp64")
    if kind in ARITHMETIC_CEILINGS:
        resource, key = ARITHMETIC_CEILINGS[kind]
        add(resource, work.get("flops", 0), key, "tflop_per_s", "TFLOP/s", 1e9)
    elif work.get("flops") and terms:
        # integer work: no ceiling is measured, so the floor is memory alone; say so where it is shown
        terms[0] = dataclasses.replace(terms[0], resource=f"{terms[0].resource}; no {kind} ceiling")
    if not terms:
        raise ValueError("no ceiling matches the declared work")
    binding = max(terms, key=lambda t: t.ms)
    return Floor(binding.ms, binding, tuple(terms))


def at_rate(median_ms: float, fl: Floor) -> str | None:
    """"runs at the <rate>" when the step is within AT_RATE_FACTOR of its floor (even a little under
    it: the rate is a measurement, not a ceiling); None otherwise."""
    return f"runs at the {fl.binding.rate_name}" if median_ms / fl.ms < AT_RATE_FACTOR else None


def time_vs_floor(median_ms: float, fl: Floor) -> str:
    """The step's time against its floor, in honest words: within AT_RATE_FACTOR it runs at the
    reference rate; else how many times the floor it takes."""
    note = at_rate(median_ms, fl)
    return f"{median_ms / fl.ms:.2f}×" + (f" ({note})" if note else "")
