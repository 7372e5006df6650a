"""The next thing to try for a step, from its measured limiter and its framework's knobs.

Each framework's record (:mod:`workloads.frameworks`, ``Framework.advice``) maps an advice key (the
limiter's kind or unit, or for a latency-bound step what holds it: the grid, the waves, a launch
resource, latency) to the knob that framework gives; :data:`DEFAULT_ADVICE` covers the keys a record
leaves out. Library kernels (cuBLAS, cuDNN, CUTLASS, nvjet, XLA's generated GEMMs) get no advice
about their launch configuration: the caller does not choose it. ncu's rules are quoted only where
they speak to the launch's measured limiter (:func:`rule_consistent`).
"""
from __future__ import annotations

import re

from analysis.model.limiter.launch import Kind, LaunchLimiter, Unit, WAVES_MIN
from analysis.model.limiter.step import StepLimiter

#: kernels whose launch configuration the program's own code does not choose: CUB/Thrust/cuDF/RMM
#: templates, cuBLAS/cuDNN/CUTLASS GEMMs and convolutions, PyTorch's ATen kernels, NCCL, and the
#: kernels XLA generates (a Triton kernel is the program's own: its block sizes are the caller's)
LIBRARY_KERNEL = re.compile(
    r"\b(cub|thrust|cudf|rmm|cutlass|cublas\w*|cudnn\w*|at|c10|flash|nccl)::|^nvjet_|cutlass|cudnn|xmma|"
    r"^sm\d+_|^ampere_|^volta_|^turing_|^hopper_|gemv|gemmk|[sdhi]gemm|convolve|^nchw|^nhwc|"
    r"^(wrapped_\w+|gemm_fusion\w*|loop_\w*fusion\w*|input_\w*fusion\w*|\w*_fusion(_\d+)?)$")

#: a latency-bound launch with fewer waves than this has a partial last wave worth naming
FEW_WAVES = 4.0

#: a device-bound step whose GPU idles at least this share of the timed call is told about the host first
HOST_WAIT_NOTED = 0.2


def is_library_kernel(name: str) -> bool:
    return bool(LIBRARY_KERNEL.search(re.sub(r"^void ", "", name.strip())))


DEFAULT_ADVICE = {
    "host link": "keep the data resident on the GPU across calls, or overlap the copies with compute (pinned "
                 "host memory, streams)",
    "launch/host": "fewer launches and less host work per call: fuse kernels, capture the call in a CUDA graph, "
                   "move allocation and Python out of the call",
    "DRAM": "move fewer bytes: fuse passes, narrower types, reuse data from cache or shared memory",
    "DRAM at peak": "DRAM is at its practical peak, so the kernel's access pattern has nothing left to give: only "
                    "moving fewer bytes helps (narrower types, or this pass fused with the passes before and after "
                    "it in the program)",
    "L2": "improve locality so reuse hits in L1/shared memory (tiling, sorting by key), or cut L2 atomics",
    "L1/shared": "fewer L1/shared-memory wavefronts: vector loads, no bank conflicts, coalesced access",
    "issue": "fewer instructions per element: cheaper math (lower precision, fast intrinsics), less index "
             "arithmetic, no redundant loads",
    "FP64": "FP32 where accuracy allows, or fewer FP64 operations and transcendentals",
    "FMA": "tensor cores (TF32, BF16) for matmul-like work, or fewer FP32 operations",
    "XU": "fewer transcendentals and conversions: fast-math intrinsics, algebra that avoids them",
    "ALU": "fewer integer and logic instructions: index math out of inner loops, cheaper comparisons",
    "LSU": "fewer, wider memory instructions (vector loads, shared-memory tiles)",
    "tensor": "the tensor cores are near their rate: a lower precision or less work is what is left",
    "grid": "launch more blocks (smaller blocks or more, smaller work items) so every SM has work",
    "waves": "a block count that fills whole waves of the GPU's SMs, or more work per thread",
    "registers": "fewer registers per thread (launch bounds, fewer live values)",
    "shared memory": "less shared memory per block",
    "block size": "larger blocks",
    "latency": "more memory requests in flight per thread (several elements per thread, vector loads)",
    "library": "the kernel is a library's: its launch configuration is not the caller's; a larger problem per "
               "call, or another library routine, is the lever",
    "not profiled": "profile its main kernel under Nsight Compute (the recipe's kernel filter and launch count "
                    "decide which launches are profiled) before choosing a change",
    "no counters": "profile its main kernel under Nsight Compute where counters are allowed before choosing a "
                   "change",
}

_UNIT_KEYS = {Unit.ISSUE: "issue", Unit.SM_OTHER: "issue", Unit.FP64: "FP64", Unit.FMA: "FMA", Unit.XU: "XU",
              Unit.ALU: "ALU", Unit.LSU: "LSU", Unit.DRAM: "DRAM", Unit.L2: "L2", Unit.L1: "L1/shared",
              Unit.HOST_LINK: "host link", Unit.HOST: "launch/host"}

#: advice keys about a launch's configuration (none for a library kernel)
LAUNCH_CONFIGURATION = frozenset({"grid", "waves", "registers", "shared memory", "block size"})


def latency_key(lim: LaunchLimiter) -> str:
    """What holds a latency-bound launch, as an advice key: a grid under one wave, a launch resource
    capping occupancy, a partial last wave among few waves, else latency itself."""
    waves = lim.waves_per_sm
    if waves is not None and waves < WAVES_MIN:
        return "grid"
    # a last wave under half full among few waves idles more of the GPU than any occupancy cap
    if waves is not None and waves < FEW_WAVES and (lim.last_wave_fill or 1.0) < 0.5:
        return "waves"
    cap = lim.occupancy_limiter or ""
    if cap.startswith("registers"):
        return "registers"
    if cap.startswith("shared memory"):
        return "shared memory"
    if cap.startswith(("block count", "warps")):
        return "block size"
    if waves is not None and waves < FEW_WAVES and (lim.last_wave_fill or 1.0) < 1.0:
        return "waves"
    return "latency"


#: DRAM throughput (% of peak) from which a memory-bound kernel's access pattern (vector loads,
#: coalescing, one pass) has nothing left to give: streaming kernels saturate a little above it
DRAM_AT_PEAK_PCT = 80.0


def _dram_key(pct_of_peak: float | None) -> str:
    return "DRAM at peak" if pct_of_peak is not None and pct_of_peak >= DRAM_AT_PEAK_PCT else "DRAM"


def advice_key(step: StepLimiter) -> str:
    if step.kind is Kind.NOT_PROFILED:
        return "not profiled"
    if step.kind is Kind.LATENCY and step.kernel is not None:
        # a library kernel's launch shape is not the caller's to change
        return launch_advice_key(step.kernel, step.kernel_name)
    if step.kind is Kind.NO_COUNTERS and step.evidence == "grid under one wave":
        return "grid"
    if step.unit is not None and step.unit.is_tensor:
        return "tensor"
    if step.unit is Unit.DRAM:
        return _dram_key(step.pct_of_peak)
    if step.unit is not None and step.unit in _UNIT_KEYS:
        return _UNIT_KEYS[step.unit]
    return {Kind.HOST_LINK: "host link", Kind.LAUNCH_HOST: "launch/host"}.get(step.kind, "no counters")


def launch_advice_key(lim: LaunchLimiter, kernel_name: str = "") -> str:
    """The advice key of one launch (for a capture of any program: analysis.model.limiter.launch alone)."""
    if lim.kind is Kind.LATENCY:
        # a library kernel's launch shape and per-thread work are not the caller's to change
        return "library" if is_library_kernel(kernel_name) else latency_key(lim)
    if lim.unit is not None and lim.unit.is_tensor:
        return "tensor"
    if lim.unit is Unit.DRAM:
        return _dram_key(lim.pct_of_peak)
    return _UNIT_KEYS.get(lim.unit, "issue")


def launch_advice(lim: LaunchLimiter, kernel_name: str = "", framework_advice: dict | None = None) -> str:
    """One launch's next thing to try, in words: no launch-configuration advice for a library kernel."""
    return advice(launch_advice_key(lim, kernel_name), framework_advice)


def advice(key: str, framework_advice: dict | None = None) -> str:
    return (framework_advice or {}).get(key) or DEFAULT_ADVICE[key]


def next_move(step: StepLimiter, framework_advice: dict | None = None) -> str:
    """One sentence: the measured limiter and the framework's knob for it."""
    key = advice_key(step)
    move = advice(key, framework_advice)
    if step.kind is Kind.NOT_PROFILED:
        return f"Not measured: {move}."
    if step.kind is Kind.NO_COUNTERS:
        if key == "grid":
            return f"Limited by a grid under one wave (derived without counters): {move}."
        if step.evidence:
            resource = step.evidence.removesuffix("-bound")
            return f"Bound by {resource} as far as the evidence without counters reaches: {move}."
        return f"Not measurable without counters: {move}."
    if step.kind is Kind.HOST_LINK:
        head = f"Limited by the host link ({step.share:.0%} of the call in copies)"
    elif step.kind is Kind.LAUNCH_HOST:
        head = f"Limited by the host (the GPU idles {step.share:.0%} of the call)"
    elif step.kind is Kind.LATENCY:
        reasons = step.kernel.reasons if step.kernel else ()
        mark = {"grid": "grid under", "waves": "waves:", "registers": "registers", "shared memory": "shared memory",
                "latency": "stalled"}.get(key, "")
        why = next((r for r in reasons if mark and mark in r), reasons[0] if reasons else "no unit near its peak")
        head = f"Latency-bound ({why})"
    elif step.kind is Kind.MEMORY:
        head = f"Limited by {step.unit} bandwidth ({step.pct_of_peak:.0f}% of peak)"
    else:
        head = f"Limited by the {step.unit} ({step.pct_of_peak:.0f}% of peak)"
    text = f"{head}: {move}"
    host = step.host
    if step.borderline:
        text += f"; the host/device decision is borderline, so also: {advice('launch/host', framework_advice)}"
    elif step.kind in (Kind.COMPUTE, Kind.MEMORY, Kind.LATENCY) and host is not None \
            and host.idle_share >= HOST_WAIT_NOTED:
        text = (f"The GPU idles {host.idle_share:.0%} of each timed call (host wait): "
                f"{advice('launch/host', framework_advice)}; then, on the GPU side, {text[0].lower()}{text[1:]}")
    return text + "."


#: ncu rules that speak to one kind of limiter; a rule not listed applies to any. A rule is quoted
#: only for a launch whose measured limiter is of a kind it speaks to.
RULE_KINDS = {
    "HighPipeUtilization": {Kind.COMPUTE},
    "FPInstructions": {Kind.COMPUTE},
    "SOLFPRoofline": {Kind.COMPUTE},
    "IssueSlotUtilization": {Kind.COMPUTE, Kind.LATENCY},
    "MemoryCacheAccessPattern": {Kind.MEMORY, Kind.LATENCY},
    "MemoryL2Compression": {Kind.MEMORY},
    "UncoalescedGlobalAccess": {Kind.MEMORY, Kind.LATENCY},
    "SharedMemoryConflicts": {Kind.MEMORY, Kind.LATENCY},
    "AchievedOccupancy": {Kind.LATENCY},
    "TheoreticalOccupancy": {Kind.LATENCY},
    "LaunchConfiguration": {Kind.LATENCY},
    "WorkloadImbalance": {Kind.LATENCY},
    "CPIStall": {Kind.LATENCY, Kind.MEMORY},
    "SOLBottleneck": {Kind.COMPUTE, Kind.MEMORY, Kind.LATENCY},
}

#: rules whose message speaks of a unit the limiter must not contradict (HighPipeUtilization's
#: "all compute pipelines are under-utilized" on a launch whose limiter is memory). L2 compression
#: is never quoted: its knob, compressible allocations through the driver's virtual memory API, is
#: no Python framework's to turn, so it reads as advice that does not apply
RULE_UNITS: dict[str, set] = {"MemoryL2Compression": set()}


def rule_consistent(rule: str, limiter: LaunchLimiter | None, kernel_name: str = "") -> bool:
    """Whether ncu's rule ``rule`` speaks to the launch's measured limiter (and, for launch
    configuration rules, whether the launch's configuration is the program's to change)."""
    if limiter is None:
        return rule not in RULE_KINDS
    if rule in ("LaunchConfiguration", "TheoreticalOccupancy", "WorkloadImbalance") and kernel_name \
            and is_library_kernel(kernel_name):
        return False
    kinds = RULE_KINDS.get(rule)
    if kinds is not None and limiter.kind not in kinds:
        return False
    units = RULE_UNITS.get(rule)
    return units is None or limiter.unit in units
