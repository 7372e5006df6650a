"""The file names of a capture folder, live (``<work_dir>/captures``) or reference
(``reports/reference/<name>``): the one place they are spelled.

    <root>/ceilings.json                          the machine's measured ceilings
    <root>/noise.json                             the between-run noise model (reference only)
    <root>/coldstart/<workload>_<variant>.json    cold/warm process records
    <root>/kernels/<page>/...                     single-kernel pages' captures
    <root>/<workload>/ceilings.json               a merged workload's own ceilings (reference only)
    <root>/<workload>/experiments/<name>/...      a recipe's experiments
    <root>/<workload>/<variant>/n<size>/          one run:
        timing.json     the timed run          nsys.nsys-rep   nsys' report (live only)
        nsys.sqlite     its SQLite export      nsys-run.json   the run under nsys
        nsys-stats/     nsys' own CSVs         ncu.ncu-rep     the ncu report (sizes ncu profiled)
        ncu-raw.csv     ncu's raw page         ncu-run.json    the run under ncu

A reference keeps the SQLite export and the ncu report gzipped (``.gz`` added); readers take
either (:func:`capture`).
"""
from __future__ import annotations

import os

from analysis.common.errors import AnalysisInputError
from analysis.common.gzfiles import existing_capture

TIMING = "timing.json"
NSYS_REPORT = "nsys.nsys-rep"
NSYS_EXPORT = "nsys.sqlite"
NSYS_RUN = "nsys-run.json"
NSYS_STATS = "nsys-stats"
NCU_REPORT = "ncu.ncu-rep"
#: a reference's between-run noise model (analysis.model.noise): derived from several runs, so a
#: new reference of the same GPU keeps the old one's (analysis.readers.captures.replace_reference)
NOISE = "noise.json"
NCU_RAW = "ncu-raw.csv"
#: per workload: <workload>/l2/<variant>/n<size>/timing-<warm|cold-l2>.json (rules/profile.smk: timed_l2)
L2_DIR = "l2"
NCU_RUN = "ncu-run.json"
CEILINGS = "ceilings.json"
COLDSTART = "coldstart"
KERNELS = "kernels"
EXPERIMENTS = "experiments"
#: what a reference adds to the large capture files it keeps (analysis.readers.captures)
GZIP_SUFFIX = ".gz"


def run_dir(root: str, workload: str, variant: str, size: int | str) -> str:
    return f"{root}/{workload}/{variant}/n{size}"


def capture(folder: str, name: str) -> str:
    """The path of capture ``name`` in ``folder``, plain or gzipped, whichever is there."""
    path = existing_capture(folder, name)
    if path is None:
        raise AnalysisInputError(os.path.join(folder, name), "no such file (nor .gz)")
    return path


def nsys_export(folder: str) -> str:
    """The run's SQLite export (``nsys.sqlite`` or ``nsys.sqlite.gz``)."""
    return capture(folder, NSYS_EXPORT)
