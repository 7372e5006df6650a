"""Everything read from an Nsight Systems SQLite export goes through this package: the only code
that issues SQL against one. Open an export as a :class:`Trace`; the nsys-stats-compatible
reports are in :mod:`analysis.readers.nsys.stats`, the columnar (numpy) readers and the one join of
GPU operations to the ranges that launched them in :mod:`analysis.readers.nsys.columns`."""
from analysis.readers.nsys.trace import ApiCall, GpuInfo, GpuOp, NvtxEvent, NvtxRange, Trace, api_base_name, api_family

__all__ = ["ApiCall", "GpuInfo", "GpuOp", "NvtxEvent", "NvtxRange", "Trace", "api_base_name", "api_family"]
