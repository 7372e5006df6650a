"""A step's declared work (its ``Work``) beside what ncu measured, and each launch's measured work
and peaks for the roofline."""
from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

from analysis.readers import ncu_metrics as M
from analysis.model.limiter.launch import _get
from analysis.model.limiter.step import launches_by_kernel, step_kernels

#: Declared and measured work more than this factor apart are flagged: undercounted
#: transcendentals, hidden temporaries or cache reuse, beyond run-to-run noise.
MISMATCH_FACTOR = 1.5

#: Measured work covers a step when ncu profiled at least this share of its kernel time.
COVERAGE_COMPLETE = 0.95


def flops_by_precision(m: dict) -> dict[str, float]:
    """Executed floating-point operations of the launch by precision, as ncu's roofline counts them:
    scalar FP64/FP32 from the SASS instruction counters (FMA = 2), tensor-core operations from the
    tensor-pipe counters by input precision. Precisions with none are left out."""
    out: dict[str, float] = {}
    cycles = _get(m, "smsp__cycles_elapsed.avg")
    if cycles is not None:
        # scalar FP16 instructions are left out: compilers emit them for integer and move work too
        for prec, ops in (("FP64", ("dadd", "dmul", "dfma")), ("FP32", ("fadd", "fmul", "ffma"))):
            per = [_get(m, f"smsp__sass_thread_inst_executed_op_{o}_pred_on.sum.per_cycle_elapsed") for o in ops]
            if all(v is not None for v in per):
                value = (per[0] + per[1] + 2 * per[2]) * cycles
                if value >= 1:
                    out[prec] = value
    for prec, key, _ in M.TENSOR_PRECISIONS:
        v = _get(m, key)
        if v:
            out[f"{prec} tensor" if not prec.endswith("tensor") else prec] = v
    return out


def bytes_by_level(m: dict) -> dict[str, float]:
    """Bytes the launch moved at each memory level (the hierarchical roofline's), from the achieved
    rate times the duration."""
    dur_s = (_get(m, "gpu__time_duration.sum") or 0.0) / 1e9
    out = {}
    for level, rate, _, _ in M.MEMORY_ROOFLINE:
        v = _get(m, rate)
        if v is not None and dur_s:
            out[level] = v * dur_s
    return out


def device_peaks(m: dict) -> dict[str, float]:
    """The device's peaks at the clocks the launch ran at: ``<level> bytes/s`` for DRAM, L2, L1 and
    ``<precision> FLOP/s`` for the FP units."""
    out = {}
    for level, _, peak, clock in M.MEMORY_ROOFLINE:
        p, c = _get(m, peak), _get(m, clock)
        if p and c:
            out[f"{level} bytes/s"] = p * c
    clock = _get(m, M.SM_CLOCK)
    if clock:
        for prec, key in M.FP_PEAKS:
            if (p := _get(m, key)):
                out[f"{prec} FLOP/s"] = 2 * p * clock
        for prec, _, peaks in M.TENSOR_PRECISIONS:
            name = f"{prec} tensor" if not prec.endswith("tensor") else prec
            p = next((v for k in peaks if (v := _get(m, k))), None)
            if p:
                out[f"{name} FLOP/s"] = p * clock
    return out


@dataclasses.dataclass(frozen=True)
class WorkCheck:
    declared_bytes: float
    measured_dram_bytes: float | None  # per steady call, over the profiled kernels
    declared_flops: float
    declared_kind: str
    measured_flops: dict[str, float]  # per steady call, by precision
    covered_share: float  # share of the call's kernel time whose kernels ncu profiled
    measured_kernel_ns: float  # ncu's duration of the profiled kernels, per steady call

    def dram_gb_per_s(self) -> float | None:
        """DRAM throughput the profiled kernels achieved (ncu bytes over ncu time)."""
        if not self.measured_dram_bytes or not self.measured_kernel_ns:
            return None
        return self.measured_dram_bytes / self.measured_kernel_ns

    def complete(self) -> bool:
        """Whether ncu profiled (nearly) all of the call's kernel time: else measured work is a lower bound."""
        return self.covered_share >= COVERAGE_COMPLETE

    def bytes_ratio(self) -> float | None:
        if not self.declared_bytes or not self.measured_dram_bytes:
            return None
        return self.measured_dram_bytes / self.declared_bytes

    def flops_ratio(self) -> float | None:
        """None for integer work, and where ncu counted no FP instructions."""
        measured = sum(self.measured_flops.values())
        if not self.declared_flops or self.declared_kind.startswith("int") or not measured:
            return None
        return measured / self.declared_flops

    def measured_bytes_below_declared(self) -> bool:
        """The profiled kernels moved fewer DRAM bytes than declared by more than MISMATCH_FACTOR (a
        working set that stays in L2): the declared bytes are no minimum, and the minimum-work floor
        rests on what ncu measured (a lower bound where ncu saw part of the call, so the floor stays
        one). More bytes than declared are waste the floor must not absorb."""
        r = self.bytes_ratio()
        return r is not None and r < 1 / MISMATCH_FACTOR

    def mismatches(self) -> list[str]:
        """Measured over declared beyond MISMATCH_FACTOR; below it only where ncu saw all the kernels."""
        out = []
        for what, r in (("DRAM bytes", self.bytes_ratio()), ("FLOPs", self.flops_ratio())):
            if r is not None and (r > MISMATCH_FACTOR or (self.complete() and r < 1 / MISMATCH_FACTOR)):
                out.append(f"measured {what} {r:.2f}× declared")
        return out


def work_check(run: dict, pool: Iterable[tuple[str, Sequence[dict]]]) -> WorkCheck | None:
    """The step's declared work beside what ncu measured per steady call (the matching launches of
    each kernel, :func:`analysis.model.limiter.step.step_kernels`, times its launches per call); None when
    no kernel of the step was profiled."""
    rows = step_kernels(run, launches_by_kernel(pool))
    total = sum(r["ns_per_call"] for r in rows)
    covered, dram, flops, kernel_ns = 0.0, 0.0, {}, 0.0
    have_dram = False
    for r in rows:
        if not r["launches"]:
            continue
        variant = r["launches"][0][0]
        same = [launch for v, launch in r["launches"] if v == variant]
        covered += r["ns_per_call"]
        d = [launch.get("dram_bytes") for launch in same if launch.get("dram_bytes") is not None]
        if d:
            have_dram = True
            dram += sum(d) / len(d) * r["per_call"]
        kernel_ns += sum(float(launch["metrics"].get("gpu__time_duration.sum") or 0) for launch in same) \
            / len(same) * r["per_call"]
        for launch in same:
            for prec, v in flops_by_precision(launch["metrics"]).items():
                flops[prec] = flops.get(prec, 0.0) + v / len(same) * r["per_call"]
    if not covered:
        return None
    w = run["work"]
    return WorkCheck(w["bytes_read"] + w["bytes_written"], dram if have_dram else None, w.get("flops", 0),
                     w.get("flops_kind", "fp64"), flops, covered / total if total else 0.0, kernel_ns)
