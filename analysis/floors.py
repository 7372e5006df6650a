"""The floor of a variant: the time the declared work takes at the ceilings measured in the
same run. Each resource gives a time (amount / ceiling); the floor is the largest, and the
resource that sets it is named, so a report can say what bounds the variant."""
from __future__ import annotations

import dataclasses


#: Work.flops_kind -> (resource named in reports, ceiling in ceilings.json). Integer work has none.
ARITHMETIC_CEILINGS = {
    "fp64": ("FP64 arithmetic", "fp64_fma"),
    "fp32": ("FP32 arithmetic", "fp32_fma"),
    "fp16_tensor": ("16-bit tensor-core matmul", "fp16_gemm"),
}


@dataclasses.dataclass(frozen=True)
class Term:
    resource: str  # human-readable, e.g. "device memory"
    amount: float  # bytes or FLOPs
    unit: str  # "GB/s" or "TFLOP/s"
    ceiling: float  # in unit
    ms: float


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
            terms.append(Term(resource, amount, unit, rate, amount / rate / scale))

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
