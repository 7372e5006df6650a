"""The end of a recipe's experiment command: a typed error becomes one line on stderr and exit 1."""
from __future__ import annotations

import sys
from collections.abc import Callable

from workloads.contract import WorkloadError


def run_command(prog: str, body: Callable[[], str | None]) -> int:
    """Run ``body``; print the line it returns (what it wrote), or ``prog: <error>`` on stderr when it
    raises :class:`WorkloadError`. Returns the exit status: 0, or 1 for the error."""
    try:
        said = body()
    except WorkloadError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1
    if said:
        print(said)
    return 0
