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


class UnknownSchemaVersion(AnalysisInputError):
    """A record (a run summary) was written with a schema this code does not know: made by an
    older or newer suite. Summarize the captures again with this one."""


class DamagedExport(AnalysisInputError):
    """An nsys export that opens but cannot be what nsys wrote: names missing (an empty string
    table), GPU work that ends before it starts. Refused when the export is opened, before any
    report could print numbers made of it."""
