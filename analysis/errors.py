"""Typed errors: each names the file and what is wrong with it."""
from __future__ import annotations

import os


class AnalysisInputError(Exception):
    """An input file is missing, unreadable, or not what the analysis needs."""

    def __init__(self, path: str | os.PathLike, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self):
        # rebuilt from (path, problem) so the error crosses a process boundary intact (the ncu reader's child)
        return (type(self), (self.path, self.problem))


class NoDataInExport(AnalysisInputError):
    """The export is sound but holds nothing of what a report summarizes (no memory copies, no
    kernels): ``nsys stats`` then writes an empty file and says SKIPPED."""
