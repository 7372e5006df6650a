"""The one catalog of Nsight Compute metrics the analysis classifies launches by.

:mod:`analysis.readers.ncu` reads every name in :data:`METRICS` into each launch's metrics dict (and asks
for them in its metrics-only collection); :data:`STALL_METRICS` are read when a report holds them
(the WarpStateStats section of ``--set full``) and never asked for on their own.
"""
from __future__ import annotations

#: ncu's speed-of-light summary: SM throughput is the largest entry of the SM breakdown (issue
#: active and every pipe), memory throughput the largest of the memory breakdown
SOL = {
    "sm": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "memory": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
}
#: memory levels of the breakdown, deepest first: traffic to a deeper level passes through the
#: shallower ones, so the deepest level at its peak is what limits (a cache cannot relieve it)
MEMORY_LEVELS = (
    ("DRAM", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
    ("L2", "lts__throughput.avg.pct_of_peak_sustained_elapsed"),
    ("L1/shared", "l1tex__throughput.avg.pct_of_peak_sustained_elapsed"),
)
#: the issue slots: the SM breakdown's instruction-issue entry (one instruction per scheduler per cycle)
ISSUE = "sm__issue_active.avg.pct_of_peak_sustained_elapsed"
#: SM pipes of the breakdown: share of the pipe's peak while the SM was active
PIPES = (
    ("FP64", "sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_active"),
    ("FMA", "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"),
    ("TENSOR", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"),
    ("ALU", "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active"),
    ("LSU", "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active"),
    ("XU", "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"),
)
OCC_THEORETICAL = "sm__maximum_warps_per_active_cycle_pct"
OCC_ACHIEVED = "sm__warps_active.avg.pct_of_peak_sustained_active"
#: blocks per SM each launch resource allows (ncu's Occupancy section)
OCC_LIMITS = (
    ("registers", "launch__occupancy_limit_registers"),
    ("shared memory", "launch__occupancy_limit_shared_mem"),
    ("block count", "launch__occupancy_limit_blocks"),
    ("warps per SM (block size)", "launch__occupancy_limit_warps"),
)
WAVES = "launch__waves_per_multiprocessor"
SM_CLOCK = "sm__cycles_elapsed.avg.per_second"

#: tensor-core operations by input precision (ncu's hierarchical roofline counts these: an FMA is
#: two operations) and the dense peak per cycle of the fastest path for that precision
TENSOR_PRECISIONS = (
    ("BF16", "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
     ("sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained",
      "sm__ops_path_tensor_op_hmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained")),
    ("FP16", "sm__ops_path_tensor_src_fp16.sum",
     ("sm__ops_path_tensor_op_hgmma_src_fp16_sparsity_off.sum.peak_sustained",
      "sm__ops_path_tensor_op_hmma_src_fp16_dst_fp32_sparsity_off.sum.peak_sustained")),
    ("TF32", "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
     ("sm__ops_path_tensor_op_hgmma_src_tf32_dst_fp32_sparsity_off.sum.peak_sustained",
      "sm__ops_path_tensor_op_hmma_src_tf32_dst_fp32_sparsity_off.sum.peak_sustained")),
    ("FP64 tensor", "sm__ops_path_tensor_src_fp64.sum", ("sm__ops_path_tensor_src_fp64.sum.peak_sustained",)),
)
#: the hierarchical roofline's bytes per level (ncu's SpeedOfLight roofline sections): achieved
#: bytes per second, peak bytes per cycle, and the clock of that level
MEMORY_ROOFLINE = (
    ("DRAM", "dram__bytes.sum.per_second", "dram__bytes.sum.peak_sustained", "dram__cycles_elapsed.avg.per_second"),
    ("L2", "derived__lts__lts2xbar_bytes.sum.per_second", "derived__lts__lts2xbar_bytes.sum.peak_sustained",
     "lts__cycles_elapsed.avg.per_second"),
    ("L1", "derived__l1tex__lsu_writeback_bytes_mem_lgds.sum.per_second",
     "derived__l1tex__lsu_writeback_bytes_mem_lgds.sum.peak_sustained", "l1tex__cycles_elapsed.avg.per_second"),
)
#: scalar FP peaks per cycle (an FMA counts two FLOPs)
FP_PEAKS = (
    ("FP64", "sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained"),
    ("FP32", "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained"),
)

#: every metric the classifier and the roofline read (analysis.readers.ncu reads them into each launch's metrics)
METRICS: tuple[str, ...] = tuple(dict.fromkeys(
    list(SOL.values()) + [m for _, m in MEMORY_LEVELS] + [m for _, m in PIPES]
    + [ISSUE, OCC_THEORETICAL, OCC_ACHIEVED, WAVES, SM_CLOCK] + [m for _, m in OCC_LIMITS]
    + ["launch__registers_per_thread", "launch__shared_mem_per_block", "launch__grid_size", "launch__block_size",
       "launch__sm_count", "gpu__time_duration.sum"]
    + [m for _, m, _ in TENSOR_PRECISIONS] + [p for _, _, ps in TENSOR_PRECISIONS for p in ps]
    + [m for row in MEMORY_ROOFLINE for m in row[1:]] + [m for _, m in FP_PEAKS]))

#: warp stall reasons (ncu's WarpStateStats section): warps stalled per issued instruction, by reason
STALL_REASONS = (
    "barrier", "branch_resolving", "dispatch_stall", "drain", "gmma", "imc_miss", "lg_throttle",
    "long_scoreboard", "math_pipe_throttle", "membar", "mio_throttle", "misc", "no_instruction",
    "not_selected", "selected", "short_scoreboard", "sleeping", "tex_throttle", "wait",
)
STALL_METRICS: tuple[str, ...] = tuple(
    f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in STALL_REASONS)

#: the breakdown entries under the names a report without the ComputeWorkloadAnalysis section holds
#: (``--set basic``: each pipe's share over elapsed cycles, L1 over active cycles); read where a
#: launch lacks the catalog's own name, never asked for by the metrics-only collection
PIPE_FALLBACKS = tuple((name, key.replace("pct_of_peak_sustained_active", "pct_of_peak_sustained_elapsed"))
                       for name, key in PIPES)
MEMORY_FALLBACKS = (("L1/shared", "l1tex__throughput.avg.pct_of_peak_sustained_active"),)
FALLBACK_METRICS: tuple[str, ...] = tuple(m for _, m in PIPE_FALLBACKS + MEMORY_FALLBACKS)


def stall_metric(reason: str) -> str:
    return f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"
