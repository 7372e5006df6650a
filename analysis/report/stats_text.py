"""``analysis stats``'s output formats: an nsys stats report (:mod:`analysis.readers.nsys.stats`)
as CSV, a Markdown table or JSON."""
from __future__ import annotations

import csv
import decimal
import io
import json
from typing import Any, Callable

from analysis.readers.nsys.stats import Header, Rows
from analysis.report import mdtext

# --- output -----------------------------------------------------------------------------------

def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    return str(value)


def format_csv(header: Header, rows: Rows) -> str:
    """CSV as ``nsys stats --format csv`` writes it: "\\n" line ends, fields quoted when needed."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(header)
    for row in rows:
        w.writerow([_text(v) for v in row])
    return out.getvalue()


#: longest Markdown cell: a name of megabytes (a damaged or hostile export) is cut, the CSV keeps it whole
MAX_MD_CELL_CHARS = 300
def format_md(header: Header, rows: Rows) -> str:
    """A Markdown table; numeric columns right-aligned."""
    def cell(v: Any) -> str:
        return mdtext.cell(_text(v), MAX_MD_CELL_CHARS)

    numeric = [bool(rows) and all(isinstance(r[i], (int, decimal.Decimal)) or r[i] is None for r in rows)
               for i in range(len(header))]
    lines = ["| " + " | ".join(cell(h) for h in header) + " |",
             "|" + "|".join("---:" if num else "---" for num in numeric) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def format_json(header: Header, rows: Rows) -> str:
    """A JSON list with one object per row, keyed by the column names."""
    def value(v: Any) -> Any:
        return float(v) if isinstance(v, decimal.Decimal) else v

    return json.dumps([{h: value(v) for h, v in zip(header, row)} for row in rows], indent=1) + "\n"


FORMATS: dict[str, Callable[[Header, Rows], str]] = {"csv": format_csv, "md": format_md, "json": format_json}
