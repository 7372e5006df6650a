"""Text from a capture (kernel, range, module and file names, ncu's messages) as markdown table
cells: the one escaping every table writer uses, so that no name can end a cell, a row or the
table, or start a heading of its own."""
from __future__ import annotations

from typing import Sequence

#: line and paragraph breaks (a row of a markdown table ends at any of them): shown as a space
_BREAKS = {c: " " for c in ("\n", "\r", "\t", "\v", "\f", "\x85", "\u2028", "\u2029", "\x1c", "\x1d", "\x1e")}
#: the other control characters, shown as their Unicode control pictures (␀ ␁ … ␟ ␡) or as \\uXXXX
_CONTROLS = {**{chr(c): chr(0x2400 + c) for c in range(0x20)}, "\x7f": "\u2421",
             **{chr(c): f"\\u{c:04x}" for c in range(0x80, 0xA0)}}
_TABLE = str.maketrans({**_CONTROLS, **_BREAKS})


def cell(value: object, max_chars: int | None = None, backslash: bool = True) -> str:
    """``value`` as one markdown table cell: ``|`` escaped, breaks made spaces, control characters
    made visible; ``backslash``: a backslash escaped too (a name's own, not markdown the caller wrote);
    ``max_chars``: cut with an ellipsis, never inside an escape or leaving a code span open."""
    text = str(value).translate(_TABLE)
    if backslash:
        text = text.replace("\\", "\\\\")
    text = text.replace("|", "\\|")
    if max_chars and len(text) > max_chars:
        text = text[:max_chars - 1].rstrip("\\") + "…"
        if text.count("`") % 2:
            text += "`"
    return text


def table(header: Sequence[str], rows: Sequence[Sequence[object]], max_cell: int | None = None) -> str:
    """The page's markdown table: ``header`` and ``rows``, each cell escaped by :func:`cell`."""
    def page_cell(x: object) -> str:
        # the cells carry the page's own markdown (code spans, emphasis): a backslash is the writer's
        return cell(x, max_cell, backslash=False)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(page_cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def short_kernel_name(name: str) -> str:
    """A kernel's name without return type, namespaces, template arguments, ABI tags or parameter
    list, for labels: ``void ns::k<int>(float)`` -> ``k``."""
    depth, end = 0, len(name)
    for i, ch in enumerate(name):
        if ch in "<[":
            depth += 1
        elif ch in ">]":
            depth -= 1
        elif ch == "(" and depth == 0:
            end = i
            break
    out, depth = [], 0
    for ch in name[:end]:
        if ch in "<[":
            depth += 1
        elif ch in ">]":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    short = "".join(out).split("::")[-1].strip().split(" ")[-1]
    return short or name
