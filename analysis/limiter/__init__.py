"""What limits a kernel launch and a step, from measurement (see :mod:`analysis.limiter.launch` for
a launch, :mod:`analysis.limiter.step` for a step)."""
from analysis.limiter._legacy import *  # noqa: F401,F403 - the module's names while callers migrate
from analysis.limiter._legacy import _get  # noqa: F401
from analysis.limiter.launch import Kind, LaunchLimiter, Unit, classify_launch  # noqa: F401
