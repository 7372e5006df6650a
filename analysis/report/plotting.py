"""matplotlib set up to draw into files, and the one way a report's figure is saved: what the
figure modules (analysis.report.figures, analysis.report.roofline, the recipes' sections) share.
Importing it imports matplotlib, so only modules that draw import it."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # no display on GPU hosts and CI
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402,F401 - the figure modules' tick formatters

from analysis.common.outputs import save_figure_atomic  # noqa: E402

__all__ = ["matplotlib", "plt", "save_figure"]

# Deterministic PNGs: no timestamp or version in the file's metadata
_PNG_META = {"Software": None}


def save_figure(fig, path: str) -> None:
    """Write ``fig`` to ``path`` (110 dpi, no timestamp or version in a PNG's metadata) and close it."""
    save_figure_atomic(fig, path, dpi=110, metadata=_PNG_META)
