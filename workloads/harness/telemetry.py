"""GPU telemetry around each timed sample, through NVML (``nvidia-ml-py``, imported as ``pynvml``).

Optional: without the package, a driver or a GPU the run records why telemetry is not
available and goes on; a value the GPU does not report is ``None``. Nothing is estimated.

Per snapshot: SM and memory clocks (MHz), temperature (°C), power (mW), the clock event
(throttle) reasons as a bit mask with their names, and the total-energy counter (mJ, on
Volta and later). A sample's energy is the counter's difference across it; the counter moves
in steps, so a single short sample's difference means little: ``energy_per_call_j`` is the sum
of the differences over all samples divided by their number, and ``loop_energy_per_call_j``
the whole timed loop's energy (idle gaps between samples included) over its calls. Where the
samples are too short for the counter, ``burst`` holds the energy of calls run back to back for
a second after them: the call's energy, measured (:func:`energy_per_call` picks).

The counter holds the energy up to its last update, and updates only every ~100 ms
(docs/measurement.md gives the intervals measured), so the difference
between two reads taken at arbitrary times covers the updates' window, not the reads': up to one
update period off at each end, ±10% of a one-second burst. The burst therefore reads the counter
in a thread of its own while the calls run (:class:`EnergyWatch`) and takes the mean power
between two updates it saw inside the calls (:func:`burst_energy`), which spread far less from
burst to burst than two reads do (docs/measurement.md).
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

from workloads.harness.l2 import cuda_pci_bus_id

#: reasons that mean the clocks were held down (not idle, not an application setting)
THROTTLING = ("SwPowerCap", "HwSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown", "SwThermalSlowdown")


def not_available(reason: str) -> dict:
    return {"available": False, "reason": reason}


class Telemetry:
    """One GPU's NVML handle; ``open`` never raises, ``available`` says whether it works."""

    def __init__(self, nvml: Any = None, handle: Any = None, reason: str = "") -> None:
        self._nvml, self._handle, self.reason = nvml, handle, reason

    @property
    def available(self) -> bool:
        return self._handle is not None

    @classmethod
    def open(cls, pci_bus_id: Callable[[], str] | None = None) -> "Telemetry":
        """The GPU the process computes on: found by its PCI bus id (NVML and CUDA number GPUs differently)."""
        try:
            import pynvml
        except ImportError:
            return cls(reason="nvidia-ml-py (pynvml) is not installed")
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            return cls(reason=f"NVML did not start: {e}")
        try:
            if pci_bus_id is None:
                pci_bus_id = cuda_pci_bus_id
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id())
        except Exception as e:  # no CUDA driver, or NVML does not know the bus id: record why
            return cls(reason=f"the GPU of this process was not found in NVML: {e}")
        return cls(pynvml, handle)

    def _get(self, fn: str, *args) -> Any:
        try:
            return getattr(self._nvml, fn)(self._handle, *args)
        except self._nvml.NVMLError:
            return None  # not supported on this GPU or driver

    def _reasons_fn(self) -> str:
        # renamed "clocks event reasons" in NVML 12.535; older bindings know only the old name
        return ("nvmlDeviceGetCurrentClocksEventReasons" if hasattr(self._nvml, "nvmlDeviceGetCurrentClocksEventReasons")
                else "nvmlDeviceGetCurrentClocksThrottleReasons")

    def _reason_bits(self) -> dict[str, int]:
        """NVML's clock event reason bits by name, read once from the bindings' constants."""
        if not hasattr(self, "_bits"):
            self._bits: dict[str, int] = {}
            for attr in sorted(dir(self._nvml)):
                for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
                    bit = getattr(self._nvml, attr)
                    name = attr[len(prefix):]
                    if attr.startswith(prefix) and name not in ("All", "None", "Unknown") \
                            and isinstance(bit, int) and bit:
                        self._bits.setdefault(name, bit)
        return self._bits

    def reason_names(self, mask: int | None) -> list[str] | None:
        if mask is None:
            return None
        return sorted(name for name, bit in self._reason_bits().items() if mask & bit)

    def snapshot(self, energy: bool = True) -> dict | None:
        """The readings now; ``energy=False`` leaves the energy counter unread (``energy_mj`` None):
        that one read takes milliseconds, every other reading here microseconds (docs/measurement.md)."""
        if not self.available:
            return None
        n = self._nvml
        mask = self._get(self._reasons_fn())
        names = self.reason_names(mask)
        return {
            "sm_clock_mhz": self._get("nvmlDeviceGetClockInfo", n.NVML_CLOCK_SM),
            "mem_clock_mhz": self._get("nvmlDeviceGetClockInfo", n.NVML_CLOCK_MEM),
            "temperature_c": self._get("nvmlDeviceGetTemperature", n.NVML_TEMPERATURE_GPU),
            "power_mw": self._get("nvmlDeviceGetPowerUsage"),
            "energy_mj": self.energy_mj() if energy else None,
            "clock_event_reasons": mask,
            "clock_event_reason_names": names,
            "throttled": None if names is None else any(r in THROTTLING for r in names),
        }

    def energy_mj(self) -> int | None:
        """The total-energy counter (mJ) alone; None where the GPU has none."""
        return self._get("nvmlDeviceGetTotalEnergyConsumption") if self.available else None

    def total_memory_bytes(self) -> int | None:
        info = self._get("nvmlDeviceGetMemoryInfo") if self.available else None
        return None if info is None else int(info.total)

    def process_memory_bytes(self, pid: int) -> int | None:
        """The GPU memory NVML counts for process ``pid`` (its context included); None where NVML
        does not list it (another PID namespace) or does not report the figure."""
        processes = self._get("nvmlDeviceGetComputeRunningProcesses") if self.available else None
        for p in processes or ():
            if p.pid == pid:
                used = getattr(p, "usedGpuMemory", None)
                return None if used is None else int(used)
        return None

    def device_state(self) -> dict:
        """For provenance: the settings that decide the clocks, and a snapshot."""
        if not self.available:
            return not_available(self.reason)
        return {"available": True, "power_limit_mw": self._get("nvmlDeviceGetPowerManagementLimit"),
                "persistence_mode": self._get("nvmlDeviceGetPersistenceMode"),
                "max_sm_clock_mhz": self._get("nvmlDeviceGetMaxClockInfo", self._nvml.NVML_CLOCK_SM),
                "snapshot": self.snapshot()}


class EnergyWatch:
    """NVML's energy counter read over and over in a thread of its own, keeping (time, mJ) at each
    change it sees: the updates' times within one read (milliseconds) of when they happened.
    The read releases the GIL (a ctypes call), so the calls beside it in the main thread go on.

        with EnergyWatch(gpu.energy_mj) as watch:
            ...calls...
        watch.updates
    """

    def __init__(self, read_mj: Callable[[], int | None], clock: Callable[[], float] = time.perf_counter) -> None:
        self._read, self._clock = read_mj, clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="energy-watch", daemon=True)
        self.updates: list[tuple[float, int]] = []

    def _run(self) -> None:
        last = self._read()
        while not self._stop.is_set():
            now_mj = self._read()
            if now_mj is None:
                return
            if now_mj != last:
                self.updates.append((self._clock(), now_mj))
                last = now_mj

    def __enter__(self) -> "EnergyWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


#: counter updates the burst must see inside its calls: the first one may still hold energy from
#: before them (the update's own averaging), so power is taken from the second to the last
MIN_BURST_UPDATES = 3


def burst_energy(updates: list[tuple[float, int]], calls_start: float, calls_end: float, calls: int) -> dict:
    """The energy per call of ``calls`` calls run back to back from ``calls_start`` to ``calls_end``
    (clock seconds), from the counter ``updates`` (time, mJ) seen meanwhile: the mean power between
    the second and the last update inside the calls, times the calls' wall time per call. With
    fewer than :data:`MIN_BURST_UPDATES` updates inside, no energy (``energy_note`` says why)."""
    wall_s = calls_end - calls_start
    inside = [(t, mj) for t, mj in updates if calls_start < t <= calls_end]
    out = {"calls": calls, "wall_s": wall_s, "counter_updates": len(inside), "window_s": None, "energy_j": None,
           "mean_power_w": None, "energy_per_call_j": None, "energy_note": None}
    if len(inside) < MIN_BURST_UPDATES:
        out["energy_note"] = (f"the energy counter updated {len(inside)} times in {wall_s:.2f} s of calls: "
                              f"fewer than {MIN_BURST_UPDATES}")
        return out
    (t_a, mj_a), (t_b, mj_b) = inside[1], inside[-1]
    joules = (mj_b - mj_a) / 1e3
    power_w = joules / (t_b - t_a)
    out.update(window_s=t_b - t_a, energy_j=joules, mean_power_w=power_w, energy_per_call_j=power_w * wall_s / calls)
    return out


#: the least number of samples across which the energy counter must have moved for the samples'
#: own energy to be reported: NVML's counter advances in steps ~100 ms apart, so a
#: few ms-long samples may see none of them, and their sum would read 0 J
MIN_ENERGY_STEPS = 10


#: seconds of back-to-back calls whose energy the counter measures when the samples' own is too
#: coarse (workloads.harness.runner.energy_burst): ~10 of the counter's updates
ENERGY_BURST_S = 1.0


#: how an energy from the samples' own counter differences is labelled
SAMPLE_WINDOWS = "sample windows, host share included"


def energy_per_call(t: dict | None) -> tuple[float | None, str]:
    """A record's energy per call in joules and how it was measured: across the calls run back to
    back after the samples (nothing but the call and its synchronize between counter reads), else
    across the timed samples when the counter moved in enough of them; (None, why) when neither.
    A sample's window runs from one NVML read to the next and holds the host's share of the call too
    (docs/measurement.md: how much that adds); the timed loop's own energy
    (``loop_energy_per_call_j``) also holds the sampling rule's statistics: never the call's."""
    if not t or not t.get("available", True):
        return None, "NVML not recorded"
    burst = t.get("burst") or {}
    if burst.get("energy_per_call_j") is not None:
        return burst["energy_per_call_j"], f"{burst['calls']} calls back to back"
    if t.get("energy_per_call_j") is not None:
        return t["energy_per_call_j"], SAMPLE_WINDOWS
    return None, burst.get("energy_note") or t.get("energy_note") or "no energy counter"


def summarize(per_sample: list[dict], loop_energy_mj: tuple[int | None, int | None], calls: int,
              burst: dict | None = None, sample_energy_read: bool = True) -> dict:
    """The record's telemetry: per-sample snapshots, and what the reports show; ``burst``: the
    energy of calls run back to back after the samples (workloads.harness.runner.energy_burst);
    ``sample_energy_read``: whether the snapshots around each sample read the energy counter."""
    def values(key):
        return [s[side][key] for s in per_sample for side in ("before", "after")
                if s.get(side) and s[side].get(key) is not None]

    sm = values("sm_clock_mhz")
    start, end = loop_energy_mj
    deltas = [s["after"]["energy_mj"] - s["before"]["energy_mj"] for s in per_sample
              if s.get("before") and s.get("after") and s["before"].get("energy_mj") is not None
              and s["after"].get("energy_mj") is not None]
    complete = bool(deltas) and len(deltas) == len(per_sample)
    moved = sum(1 for d in deltas if d > 0)
    energy_note = None
    if not sample_energy_read and burst is None and start is not None:
        # the GPU has the counter (the loop's start read it); a GPU without one falls through to
        # energy_per_call's "no energy counter"
        energy_note = ("the samples did not read the energy counter (a read takes milliseconds) and no calls ran "
                       "back to back after them")
    elif complete and moved < MIN_ENERGY_STEPS:
        energy_note = (f"the energy counter moved during {moved} of {len(deltas)} samples: too coarse for calls this "
                       "short")
    return {
        "available": True,
        "per_sample": per_sample,
        "sample_energy_read": sample_energy_read,
        "sm_clock_mhz_range": [min(sm), max(sm)] if sm else None,
        "mem_clock_mhz_range": [min(values("mem_clock_mhz")), max(values("mem_clock_mhz"))]
        if values("mem_clock_mhz") else None,
        "throttled_samples": sum(1 for s in per_sample
                                 if any((s.get(side) or {}).get("throttled") for side in ("before", "after"))),
        "energy_per_call_j": sum(deltas) / 1e3 / len(deltas) if complete and energy_note is None else None,
        "energy_note": energy_note,
        "loop_energy_per_call_j": (end - start) / 1e3 / calls if start is not None and end is not None and calls else None,
        "burst": burst,
    }


def process_gpu_memory(pid: int | None = None, gpu: Telemetry | None = None) -> tuple[int | None, int | None]:
    """(bytes of the GPU's memory process ``pid`` holds, the GPU's total bytes), as NVML counts
    them for the GPU this process computes on; (None, None) without NVML."""
    gpu = Telemetry.open() if gpu is None else gpu
    if not gpu.available:
        return None, None
    return gpu.process_memory_bytes(os.getpid() if pid is None else pid), gpu.total_memory_bytes()
