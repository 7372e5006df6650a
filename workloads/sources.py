"""The documents the recipes come from, named as readers can find them (title, author or site, date).

Recipes refer to a document by its key (``Recipe.seed_document``); reports and help texts name it
through ``cite``. Run records captured before the reports named documents say "seed 000" in their
variant summaries; ``name_sources`` rewrites those words when a report shows them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    short: str  # how a sentence names it
    title: str
    origin: str  # author and/or site
    date: str  # as the document states it; "" when it states none


SOURCES: dict[str, Source] = {
    "000": Source("the RAPIDS blog post on NVTX and Nsight Systems for PyData",
                  "NVTX and Nsight Systems for PyData (blog post: nvtx.annotate, CuPy, RMM, cuDF groupby)",
                  "RAPIDS / NVIDIA blog", ""),
    "001": Source("the HPC-center guide \"GPU Profiling, Optimization, and Debugging\"",
                  "GPU Profiling, Optimization, and Debugging", "an HPC center's user documentation (JAX example)",
                  "as of June 20, 2023"),
    "002": Source("the KAUST Ibex page on profiling a CUDA ufunc",
                  "Profiling a CUDA Ufunc written in Python using Nsight Systems",
                  "KAUST Ibex documentation, Kadir Akbudak", ""),
    "003": Source("the article \"How can PyCUDA GPU kernels be profiled?\"",
                  "How can PyCUDA GPU kernels be profiled?", "Q&A article", "2025-01-30"),
    "004": Source("NVIDIA Warp's profiling guide", "Profiling (ScopedTimer, Nsight Compute, cold-start compilation)",
                  "NVIDIA Warp documentation", ""),
}


def cite(key: str) -> str:
    """The sentence form of a document: ``cite("002")`` -> "the KAUST Ibex page on profiling a CUDA ufunc".
    A recipe drawn from none of the listed documents names its source in words, returned as written."""
    if key in SOURCES:
        return SOURCES[key].short
    if key.isdigit():  # a document number that is not listed is a typo, not a source in words
        raise KeyError(f"workloads/sources.py: no source document {key!r} (have: {', '.join(SOURCES)})")
    return key


def name_sources(text: str) -> str:
    """``text`` with "seed 001" replaced by the document's name, "the seed's" by "the source's" and
    "seed-style" by "as in the source"."""
    text = re.sub(r"\bseed (\d{3})\b", lambda m: cite(m.group(1)), text)
    return text.replace("the seed's", "the source's").replace("seed-style", "as in the source")
