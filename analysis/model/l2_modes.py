"""Warm against cold L2: the same step timed twice at a size whose working set fits in L2, once with
samples back to back (``warm``) and once with L2 scrubbed before each sample (``cold-l2``, outside
the timed window: workloads/harness/l2.py). Pure functions of the two timed records and the run's ceilings.

The minimum-work floor is set by the device-to-device copy rate, a device-memory (DRAM) rate: it is
the floor of the cold-L2 time, where every byte of the call comes from device memory. Warm samples
can be served from L2 and may run under it; a warm time under the floor says "L2", not "faster than
the hardware".

Both are CUDA-event windows around one call, and an event window holds whatever the GPU waits for
inside it: where the host takes as long to submit the call as the events time, the window measures
the host's launch, and warm against cold-L2 compares launch gaps instead of L2 hits (the scrub run
just before each cold-L2 sample keeps the GPU busy while the host submits, hiding part of the gap).
The records' own host time per call (``host_call_ms``) says when.
"""
from __future__ import annotations

import dataclasses
from statistics import median
from typing import Sequence

from analysis.model import floors, verdicts
from analysis.common.errors import AnalysisInputError

#: host submit time per call, as a share of the warm event window, from which the window is the launch's
LAUNCH_BOUND_SHARE = 0.5


def _median_or_none(values) -> float | None:
    return median(values) if values else None


@dataclasses.dataclass(frozen=True)
class L2Row:
    variant: str
    size: int
    working_set_bytes: int
    l2_bytes: int
    warm_median_ms: float
    cold_median_ms: float
    warm_samples: int
    cold_samples: int
    scrub_median_ms: float
    floor_ms: float
    floor_resource: str
    #: warm against cold: "faster" when warm samples are faster beyond noise
    verdict: verdicts.Verdict
    #: median host time to submit one call in the warm samples (the runner's host_call_ms); None if not recorded
    warm_host_call_ms: float | None = None

    @property
    def launch_bound(self) -> bool:
        """The host spends at least half the warm window submitting the call: the window holds the launch."""
        return self.warm_host_call_ms is not None and self.warm_host_call_ms >= LAUNCH_BOUND_SHARE * self.warm_median_ms

    @property
    def cold_over_floor(self) -> float:
        return self.cold_median_ms / self.floor_ms

    @property
    def warm_over_floor(self) -> float:
        return self.warm_median_ms / self.floor_ms


def rows(records: Sequence[dict], ceilings: dict, where: str = "L2 records") -> list[L2Row]:
    """One row per (variant, size) timed in both modes, in the order the records come."""
    by_key: dict[tuple, dict] = {}
    for r in records:
        mode = r.get("l2_mode")
        if mode not in ("warm", "cold-l2") or "times_ms" not in r:
            raise AnalysisInputError(where, f"a record of {r.get('variant')!r} is not a timed run with an L2 mode")
        by_key.setdefault((r["variant"], r["size"]), {})[mode] = r
    out = []
    for (variant, size), modes in by_key.items():
        if set(modes) != {"warm", "cold-l2"}:
            raise AnalysisInputError(where, f"{variant} at size {size}: timed in {sorted(modes)} only, need warm and cold-l2")
        warm, cold = modes["warm"], modes["cold-l2"]
        scrub = cold.get("l2_scrub") or {}
        if not scrub.get("l2_bytes"):
            raise AnalysisInputError(where, f"{variant} at size {size}: the cold-l2 record has no l2_scrub.l2_bytes")
        fl = floors.floor(cold["work"], ceilings)
        out.append(L2Row(
            variant=variant, size=size,
            working_set_bytes=cold["work"]["bytes_read"] + cold["work"]["bytes_written"],
            l2_bytes=scrub["l2_bytes"],
            warm_median_ms=median(warm["times_ms"]), cold_median_ms=median(cold["times_ms"]),
            warm_samples=len(warm["times_ms"]), cold_samples=len(cold["times_ms"]),
            scrub_median_ms=median(scrub.get("scrub_ms") or [0.0]),
            floor_ms=fl.ms, floor_resource=fl.binding.resource,
            verdict=verdicts.compare(cold["times_ms"], warm["times_ms"]),
            warm_host_call_ms=_median_or_none(warm.get("host_call_ms")),
        ))
    return out


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def section(table: Sequence[L2Row], timer: str) -> str:
    """The report's section: both times, their verdict, and which one the floor applies to."""
    lines = ["## Warm and cold L2", "",
             "Where the working set fits in L2, back-to-back samples (*warm*) may time the cache, not device "
             "memory. These steps were timed again with L2 scrubbed before each sample (*cold-L2*: a buffer "
             "twice the L2 size written outside the timed window). The minimum-work floor is set by the "
             "device-to-device copy rate, a device-memory rate: **it is the floor of the cold-L2 time**; a warm "
             "time under it is served from L2.", "",
             "| step | size | working set / L2 | warm median ms (samples) | cold-L2 median ms (samples) | "
             "warm vs cold-L2 | minimum-work floor ms (resource) | cold-L2 / floor | warm / floor |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        lines.append(
            f"| `{r.variant}` | {r.size} | {_mib(r.working_set_bytes)} / {_mib(r.l2_bytes)} | "
            f"{r.warm_median_ms:.4g} ({r.warm_samples}) | {r.cold_median_ms:.4g} ({r.cold_samples}) | "
            f"{verdicts.format_verdict(r.verdict)} | {r.floor_ms:.4g} ({r.floor_resource}) | "
            f"{r.cold_over_floor:.2f}× | {r.warm_over_floor:.2f}× |")
    lines.append("")
    for r in table:
        if r.launch_bound:
            lines.append(
                f"- `{r.variant}` at {r.size}: the host takes {r.warm_host_call_ms:.3g} ms to submit each call "
                f"(median of the warm samples), {r.warm_host_call_ms / r.warm_median_ms:.2f}× the "
                f"{r.warm_median_ms:.3g} ms the {timer} time: the window holds the host's launch, not only the "
                f"GPU's work, so warm against cold-L2 ({verdicts.format_verdict(r.verdict)}) compares launch gaps, "
                f"not L2 hits; each cold-L2 sample follows a {r.scrub_median_ms:.3g} ms scrub on the GPU, during "
                "which the host is already submitting the call. The kernels' own time (nsys) says where the "
                "bytes come from; here neither mode's time is set by them.")
            continue
        if r.verdict.kind == "faster":
            what = (f"warm samples are faster than cold-L2 ones beyond the noise: the "
                    f"{r.cold_median_ms - r.warm_median_ms:.3g} ms between them is what L2 hits save")
        elif r.verdict.kind == "same":
            what = "warm and cold-L2 times are the same within the noise: where the bytes come from does not show here"
        else:
            what = f"warm against cold-L2 is {r.verdict.kind}: {r.verdict.reason}"
        far = (f" At {r.cold_over_floor:.1f}× its floor the call's time is not set by the bytes it moves, so "
               "where they come from can change little." if r.cold_over_floor > 3 else "")
        lines.append(f"- `{r.variant}` at {r.size}: {what}; cold-L2 runs at {r.cold_over_floor:.2f}× the floor "
                     f"({timer}; scrub {r.scrub_median_ms:.3g} ms a sample, not in the samples).{far}")
    return "\n".join(lines) + "\n"
