"""The suite's error type, in a module of its own: the light harness tools (the cold wrapper, the
GPU turns, the settings) raise it without importing the recipe contract and NumPy."""
from __future__ import annotations


class WorkloadError(RuntimeError):
    """A workload was asked for something it does not have, or computed a wrong result."""
