"""NVTX convention for the whole suite: one domain, ranges named ``workload/variant/phase``.

Each phase has a fixed colour so that timelines of different workloads read the
same way in Nsight Systems. With no profiler attached, ``nvtx`` ranges cost a
function call and a check, which is why they can stay in timed code.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import nvtx

DOMAIN = "cookbook"

#: ARGB colours, stable per phase (the analysis reads phases back by name, not colour)
PHASE_COLORS = {
    "setup": 0xFF1F77B4,     # blue
    "warmup": 0xFF7F7F7F,    # grey
    "compute": 0xFF2CA02C,   # green
    "transfer": 0xFFFF7F0E,  # orange
    "check": 0xFF9467BD,     # purple
    "measure": 0xFF8C564B,   # brown: ceiling measurements
}
PHASES = tuple(PHASE_COLORS)


def range_name(workload: str, variant: str, phase: str) -> str:
    return f"{workload}/{variant}/{phase}"


def parse_range_name(name: str) -> tuple[str, str, str] | None:
    """Inverse of :func:`range_name`; None for ranges that are not the suite's."""
    parts = name.split("/")
    if len(parts) != 3 or parts[2] not in PHASE_COLORS:
        return None
    return parts[0], parts[1], parts[2]


@contextlib.contextmanager
def phase(workload: str, variant: str, phase_name: str, payload: int | None = None) -> Iterator[None]:
    """Push an NVTX range for one phase of a variant (``payload``: e.g. the call index)."""
    if phase_name not in PHASE_COLORS:
        raise ValueError(f"unknown phase {phase_name!r}; phases are {', '.join(PHASES)}")
    with nvtx.annotate(
        message=range_name(workload, variant, phase_name),
        color=PHASE_COLORS[phase_name],
        domain=DOMAIN,
        payload=payload,
    ):
        yield
