"""NVTX ranges of an nsys SQLite export as a tree: which range ran inside which, with each range's
domain, depth, duration and payload. Generic: any export, any domains (the suite's ``cookbook``,
a library's own such as ``libcudf``, ``cudf_python``, ``CCCL``).

- :func:`read_tree`: the export's ranges (push/pop by default; start/end on request) as a
  :class:`NvtxTree`. Pure function of the file.
- :func:`build_tree`: the nesting itself, from plain :class:`RawRange` records.
- :func:`outline`: one range's subtree folded by path (domain and name from the root down), with
  counts and total durations: what "this call ran these ranges, nested so" looks like in a report.

Nesting. Push/pop ranges nest per thread: a range's parent is the innermost range on the same
thread whose interval holds it (start <= child start, child end <= end); nsys' own NVTX reports
use the same per-thread rule (``nvtx_gpu_proj_sum``'s range level). Ranges are visited by start,
longer first on equal starts, then in table order: exact for push/pop ranges, which never
partially overlap on one thread. Start/end ranges may cross threads and overlap partially; when
included they are placed on the thread that started them by the same rule, an approximation.

Domains. An NVTX domain has a handle per process: the ``NvtxDomainCreate`` event (eventType 75)
gives the handle (``domainId``) and the name. Names are looked up by (process, handle), the process
being the globalTid without its thread bits; ranges in NVTX's default domain (handle 0 or NULL, or
one no create event names) have ``domain`` None, and are labelled by their name alone, as
``nsys stats`` labels them.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Iterable, Sequence

from analysis.common.errors import AnalysisInputError
from analysis.readers.nsys.trace import RANGE_STYLE, Interval, Trace


@dataclasses.dataclass(frozen=True)
class RawRange:
    """One closed NVTX range as the export holds it (``order``: its position in the table)."""

    start_ns: int
    end_ns: int
    name: str
    domain: str | None
    style: str  # "PushPop" | "StartEnd"
    global_tid: int
    payload: int | None
    category: int | None
    order: int


@dataclasses.dataclass(frozen=True)
class TreeRange(Interval):
    """One range in its tree. ``parent``: index of the enclosing range in :attr:`NvtxTree.ranges`
    (None for a root); ``depth``: 0 for roots. Has ``global_tid``, ``start_ns`` and ``end_ns`` as
    :class:`analysis.readers.nsys.trace.NvtxRange` does, so the suite's range-based readers take it."""

    index: int
    start_ns: int
    end_ns: int
    name: str
    domain: str | None
    style: str
    global_tid: int
    payload: int | None
    category: int | None
    parent: int | None
    depth: int

    @property
    def label(self) -> str:
        """``domain:name``, or the name alone in the default domain (as ``nsys stats`` prints it)."""
        return f"{self.domain}:{self.name}" if self.domain is not None else self.name


@dataclasses.dataclass(frozen=True)
class NvtxTree:
    """Every range of an export with its parent; ranges sorted by (start, longer first)."""

    path: str
    ranges: tuple[TreeRange, ...]
    children: tuple[tuple[int, ...], ...]

    def roots(self) -> list[TreeRange]:
        return [r for r in self.ranges if r.parent is None]

    def kids(self, index: int) -> list[TreeRange]:
        return [self.ranges[i] for i in self.children[index]]

    def subtree(self, index: int) -> list[TreeRange]:
        """The range and everything nested in it, depth first in start order."""
        out, stack = [], [index]
        while stack:
            i = stack.pop()
            out.append(self.ranges[i])
            stack.extend(reversed(self.children[i]))
        return out

    def ancestors(self, index: int) -> list[TreeRange]:
        """Enclosing ranges, innermost first."""
        out = []
        parent = self.ranges[index].parent
        while parent is not None:
            out.append(self.ranges[parent])
            parent = self.ranges[parent].parent
        return out

    def find(self, *, domain: str | None = None, name: str | None = None, any_domain: bool = False,
             payload: int | None = None) -> list[TreeRange]:
        """Ranges with this name (None: any) in this domain (``any_domain``: in any), and payload."""
        return [r for r in self.ranges
                if (any_domain or r.domain == domain) and (name is None or r.name == name)
                and (payload is None or r.payload == payload)]


@dataclasses.dataclass(frozen=True)
class OutlineRow:
    """Ranges of a subtree that share a path from its root: how many, and their summed duration."""

    depth: int
    domain: str | None
    name: str
    count: int
    total_ns: int

    @property
    def label(self) -> str:
        return f"{self.domain}:{self.name}" if self.domain is not None else self.name


# --- building -------------------------------------------------------------------------------------


def build_tree(raw: Iterable[RawRange], path: str = "") -> NvtxTree:
    """Nest ``raw`` per thread (see the module docstring) and number the ranges in start order."""
    by_tid: dict[int, list[RawRange]] = defaultdict(list)
    for r in raw:
        if r.end_ns < r.start_ns:
            raise AnalysisInputError(path or "NVTX ranges", f"range {r.name!r} ends before it starts")
        by_tid[r.global_tid].append(r)
    key = (lambda r: (r.start_ns, -r.end_ns, r.order))
    ordered = sorted((r for rs in by_tid.values() for r in rs), key=key)
    index_of = {id(r): i for i, r in enumerate(ordered)}
    parent: list[int | None] = [None] * len(ordered)
    depth = [0] * len(ordered)
    for rs in by_tid.values():
        stack: list[RawRange] = []
        for r in sorted(rs, key=key):
            # sorted by start: the top started no later; it encloses r only if it ends no earlier
            while stack and stack[-1].end_ns < r.end_ns:
                stack.pop()
            i = index_of[id(r)]
            if stack:
                parent[i] = index_of[id(stack[-1])]
                depth[i] = len(stack)
            stack.append(r)
    children: list[list[int]] = [[] for _ in ordered]
    for i, p in enumerate(parent):
        if p is not None:
            children[p].append(i)
    ranges = tuple(TreeRange(i, r.start_ns, r.end_ns, r.name, r.domain, r.style, r.global_tid, r.payload,
                             r.category, parent[i], depth[i]) for i, r in enumerate(ordered))
    return NvtxTree(path, ranges, tuple(tuple(c) for c in children))


def _raw_ranges(ex: Trace, include_start_end: bool) -> list[RawRange]:
    types = [t for t, style in RANGE_STYLE.items() if include_start_end or style == "PushPop"]
    return [RawRange(e.start, e.end, e.text, e.domain, e.style, e.tid, e.payload, e.category, e.id)
            for e in ex.nvtx_events(types) if e.end is not None]


def read_tree(ex: Trace, include_start_end: bool = False) -> NvtxTree:
    """The NVTX tree of an export."""
    return build_tree(_raw_ranges(ex, include_start_end), ex.path)


# --- folding --------------------------------------------------------------------------------------


def outline(tree: NvtxTree, index: int) -> list[OutlineRow]:
    """The subtree of range ``index`` folded by path: ranges reached through the same chain of
    (domain, name) from the root are one row, with their count and total duration. Rows come depth
    first, in the order each path is first met; depth 0 is the root."""
    root = tree.ranges[index]
    rows: dict[tuple, list] = {}
    order: list[tuple] = []
    stack: list[tuple[int, tuple]] = [(index, ())]
    while stack:
        i, prefix = stack.pop()
        r = tree.ranges[i]
        path = prefix + ((r.domain, r.name),)
        if path not in rows:
            rows[path] = [r.depth - root.depth, r.domain, r.name, 0, 0]
            order.append(path)
        rows[path][3] += 1
        rows[path][4] += r.duration_ns
        stack.extend((c, path) for c in reversed(tree.children[i]))
    # a path first met later may belong under an earlier sibling path: list each under its parent
    position = {p: k for k, p in enumerate(order)}
    kids: dict[tuple, list[tuple]] = defaultdict(list)
    for p in order[1:]:
        kids[p[:-1]].append(p)
    out: list[OutlineRow] = []
    walk = [order[0]]
    while walk:
        p = walk.pop()
        out.append(OutlineRow(*rows[p]))
        walk.extend(sorted(kids[p], key=position.__getitem__, reverse=True))
    return out


def domain_totals(tree: NvtxTree, index: int) -> dict[str | None, dict[str, int]]:
    """Per domain, inside range ``index`` (itself excluded): ranges, their summed duration, and the
    shallowest and deepest depth below the root."""
    root = tree.ranges[index]
    out: dict[str | None, dict[str, int]] = {}
    for r in tree.subtree(index)[1:]:
        d = out.setdefault(r.domain, {"ranges": 0, "total_ns": 0, "min_depth": 1 << 30, "max_depth": 0})
        rel = r.depth - root.depth
        d["ranges"] += 1
        d["total_ns"] += r.duration_ns
        d["min_depth"] = min(d["min_depth"], rel)
        d["max_depth"] = max(d["max_depth"], rel)
    return out


def counts_by_label(ranges: Sequence[TreeRange]) -> dict[tuple[str, str], tuple[int, int]]:
    """(style, label) -> (instances, total ns): what ``nsys stats --report nvtx_sum`` counts."""
    out: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for r in ranges:
        acc = out[(r.style, r.label)]
        acc[0] += 1
        acc[1] += r.duration_ns
    return {k: (v[0], v[1]) for k, v in out.items()}
