"""What limits a kernel launch and a step, from measurement.

- :mod:`analysis.readers.ncu_metrics`: the ncu metric catalog;
- :mod:`analysis.model.limiter.launch`: one launch, from the speed-of-light breakdown (:class:`Kind`, :class:`Unit`);
- :mod:`analysis.model.limiter.step`: one step, on the timed run's clock, its kernels matched by launch;
- :mod:`analysis.model.limiter.advice`: the next thing to try, in the framework's own terms;
- :mod:`analysis.model.limiter.work_check`: declared work beside measured work.
"""
from analysis.model.limiter.advice import is_library_kernel, launch_advice, next_move, rule_consistent  # noqa: F401
from analysis.model.limiter.launch import (BOUND_PCT, Kind, LaunchLimiter, Unit, classify_launch,  # noqa: F401
                                     tensor_precision)
from analysis.readers.ncu_metrics import METRICS, TENSOR_PRECISIONS  # noqa: F401
from analysis.model.limiter.step import (COVERAGE_COMPLETE, HostTime, StepLimiter, fastest_steady_call,  # noqa: F401
                                   host_time, kernel_key, launches_by_kernel, pool_of, step_class, step_kernels,
                                   step_limiter)
from analysis.model.limiter.work_check import (MISMATCH_FACTOR, WorkCheck, bytes_by_level, device_peaks,  # noqa: F401
                                         flops_by_precision, work_check)
