"""How busy the machine's CPU cores were while a run measured: the run's own cores and the others.

A launch-bound step's time is the host's, and the pipeline's other jobs (imports, checks, profiler
reports, analysis) run beside it on the other cores (``workloads/harness/gpu_turn.py: split_cores``), with
which it shares the memory bus and the last-level cache. So the timed and nsys runs record, for
their measured window, the busy share of their own cores and of the others, read from Linux's
``/proc/stat`` (busy = every state but idle and iowait), and the reports show it beside the step's
time: a reader sees what ran beside a number instead of guessing. (On one H200, CuPy's fused step at
4096² measured 0.147-0.193 ms per call in three processes with the other cores idle, and
0.141-0.198 ms with them busy: there, the spread was between processes, not from the load.) Where
``/proc/stat`` cannot be read the record says why.
"""
from __future__ import annotations

import os
import time

from workloads.harness.gpu_turn import core_text

PROC_STAT = "/proc/stat"
#: /proc/stat's per-CPU columns that are not work: idle and iowait
_IDLE_COLUMNS = (3, 4)


def cpu_jiffies(path: str = PROC_STAT) -> dict[int, tuple[int, int]]:
    """CPU number -> (busy, total) clock ticks since boot, from ``/proc/stat``'s ``cpuN`` lines."""
    out = {}
    with open(path) as f:
        for line in f:
            name, *fields = line.split()
            if not name.startswith("cpu") or name == "cpu":
                continue
            ticks = [int(x) for x in fields[:8]]  # user nice system idle iowait irq softirq steal
            total = sum(ticks)
            out[int(name[3:])] = (total - sum(ticks[i] for i in _IDLE_COLUMNS), total)
    return out


def busy_share(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]], cpus) -> float | None:
    """Busy ticks over all ticks of ``cpus`` between two readings; None when no tick passed."""
    busy = total = 0
    for c in cpus:
        if c in before and c in after:
            busy += after[c][0] - before[c][0]
            total += after[c][1] - before[c][1]
    return busy / total if total > 0 else None


class HostLoad:
    """``start()`` and ``stop()`` around a measured window; ``stop()`` returns the record's
    ``host_load``: the window's seconds, this process's cores and the others, and each group's
    busy share (None: no tick passed, a window shorter than the kernel's 10 ms tick)."""

    def __init__(self, path: str = PROC_STAT) -> None:
        self.path = path
        self._start = None

    def start(self) -> None:
        try:
            self._start = (time.perf_counter(), cpu_jiffies(self.path), set(os.sched_getaffinity(0)))
        except (OSError, ValueError, AttributeError) as e:
            self._start = e

    def stop(self) -> dict:
        if self._start is None:
            raise RuntimeError("HostLoad.stop() before start()")
        if isinstance(self._start, Exception):
            return {"available": False, "reason": f"{self.path}: {self._start}"}
        t0, before, own = self._start
        try:
            after = cpu_jiffies(self.path)
        except (OSError, ValueError) as e:
            return {"available": False, "reason": f"{self.path}: {e}"}
        others = sorted(set(after) - own)
        return {
            "available": True,
            "window_s": time.perf_counter() - t0,
            "own_cores": core_text(own),
            "own_busy": busy_share(before, after, own),
            "other_cores": core_text(others),
            "other_busy": busy_share(before, after, others),
        }
