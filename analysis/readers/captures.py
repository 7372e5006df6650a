"""Moving captures around: the reference copy, and the rebuild check."""
from __future__ import annotations

import difflib
import os
import shutil
import sys

from analysis.common import layout
from analysis.common.errors import AnalysisInputError
from analysis.common.gzfiles import gzip_copy, kept_gzipped
from workloads.registry import BY_NAME

#: what a reference keeps: small raw captures. The .nsys-rep files are large and the
#: SQLite export holds what the analysis reads. SQLite and ncu reports are gzipped (5-10x smaller).
KEEP_SUFFIXES = (".json", ".sqlite", ".ncu-rep", ".csv")
#: files with a kept suffix that a reference still leaves out: nsys' per-launch trace CSV repeats what
#: the SQLite export holds, no report or test reads it, and it was half the CSV bytes of a reference
#: (3.5 MB of the H200 one: one row per kernel of Warp's graph-traced frames)
NOT_KEPT = ("stats_cuda_gpu_trace.csv",)


#: where a reference keeps the GPU job records of its run (reports/gpu_jobs.md and the pages'
#: exact commands are made from them; config ``reference: gpu_jobs:``)
GPU_JOBS = "gpu-jobs"


def _own(folder: str, path: str) -> str:
    """``path``, refused unless it is the reference's own: strictly inside ``folder`` once links are
    resolved, and no symlink on the way from ``folder`` down to it (a linked sub-folder would have
    what is deleted under it deleted at the link's target)."""
    real_folder, real = os.path.realpath(folder), os.path.realpath(path)
    if os.path.commonpath([real_folder, real]) != real_folder or real == real_folder:
        raise AnalysisInputError(path, f"lies outside the reference folder {folder}; refusing to replace it")
    walked = folder
    for part in os.path.relpath(os.path.abspath(path), os.path.abspath(folder)).split(os.sep):
        walked = os.path.join(walked, part)
        if os.path.islink(walked):
            raise AnalysisInputError(walked, f"is a symlink (to {os.readlink(walked)}) inside the reference folder "
                                             f"{folder}; refusing to replace what it points at")
    return path


def _remove_tree(folder: str, path: str) -> None:
    """Delete ``path`` (a folder or a file) once :func:`_own` says it is ``folder``'s own."""
    _own(folder, path)
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _checked_reference(dst: str, doing: str) -> str:
    """``dst`` normalized: a folder named reports/reference/<name> (the only place this deletes
    from), and not a symlink (what is replaced would be the link's target, outside the reference)."""
    dst = os.path.normpath(dst)
    if os.path.basename(os.path.dirname(os.path.abspath(dst))) != "reference":
        raise AnalysisInputError(dst, f"a reference folder must be reports/reference/<name>; refusing to {doing} it")
    if os.path.islink(dst):
        raise AnalysisInputError(dst, f"is a symlink (to {os.readlink(dst)}); refusing to {doing} it: give the "
                                      "reference folder itself")
    if os.path.lexists(dst) and not os.path.isdir(dst):
        raise AnalysisInputError(dst, f"is not a folder; refusing to {doing} it")
    return dst


_RENAME_EXCHANGE = 2  # renameat2's flag (linux/fs.h): swap two paths in one step


def _exchange(a: str, b: str) -> bool:
    """Swap the folders ``a`` and ``b`` atomically (Linux renameat2); False where the system or the
    filesystem cannot."""
    import ctypes  # noqa: PLC0415 - only a whole-reference replace swaps folders

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_cwd = -100  # AT_FDCWD
    return renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), _RENAME_EXCHANGE) == 0


def replace_reference(src: str, dst: str, gpu_jobs: str | None = None) -> list[str]:
    """Make ``dst`` hold exactly the small capture files of ``src``: a new reference replaces the
    old one whole, so no stale capture of a removed variant survives. ``dst`` must sit in a folder
    named ``reference`` (the only place this deletes from). ``gpu_jobs``: the run's GPU job records
    (``<work_dir>/gpu-jobs``), kept in ``dst/gpu-jobs``.

    The new reference is made beside the old one (``<dst>.new``) and swapped in at once: a reader
    sees the old reference or the new one, never a mix, and nothing named ``.old`` is left."""
    dst = _checked_reference(dst, "replace")
    parent = os.path.dirname(os.path.abspath(dst))
    fresh = dst + ".new"
    for leftover in (fresh, dst + ".old"):
        if os.path.lexists(leftover):
            _own(parent, leftover)
            print(f"copy-captures: removing {leftover}, left by an interrupted copy", file=sys.stderr)
            _remove_tree(parent, leftover)
    try:
        copied = copy_captures(src, fresh)
        kept_noise = os.path.join(dst, layout.NOISE)
        if not os.path.exists(os.path.join(fresh, layout.NOISE)) and os.path.isfile(kept_noise):
            _own(parent, kept_noise)
            # the noise model is derived from several runs, not captured by one: a new run of the same
            # GPU keeps it until it is derived again (docs/compare.md)
            shutil.copy2(kept_noise, os.path.join(fresh, layout.NOISE))
            copied.append(layout.NOISE)
            print(f"copy-captures: kept {layout.NOISE}, the previous reference's between-run noise model; derive "
                  "it again with `python -m analysis noise` once runs of the new code are at hand", file=sys.stderr)
        if gpu_jobs is not None:
            records = sorted(n for n in os.listdir(gpu_jobs) if n.endswith(".json")) if os.path.isdir(gpu_jobs) else []
            if not records:
                raise AnalysisInputError(gpu_jobs, "no GPU job records (*.json) to keep with the reference")
            os.makedirs(os.path.join(fresh, GPU_JOBS))
            for name in records:
                shutil.copy2(os.path.join(gpu_jobs, name), os.path.join(fresh, GPU_JOBS, name))
                copied.append(f"{GPU_JOBS}/{name}")
        if not os.path.isdir(dst):
            os.rename(fresh, dst)
        elif not _exchange(fresh, dst):
            # no atomic swap here: the old reference is moved aside for the shortest time possible
            old = dst + ".old"
            os.rename(dst, old)
            os.rename(fresh, dst)
            _remove_tree(parent, old)
    finally:
        # after the swap: the old reference; after an error: the half-made new one
        if os.path.lexists(fresh):
            _remove_tree(parent, fresh)
    return copied


def merge_reference(src: str, dst: str, workloads: list[str]) -> list[str]:
    """Put the captures of a run that profiled only ``workloads`` into an existing reference: each
    workload's folder is replaced whole, its cold-start records replace the old ones, and the run's
    ceilings are kept beside its captures (``<workload>/ceilings.json``): the floors of its report
    are then those measured in the same run, while the other workloads keep theirs. Every path
    replaced or deleted is checked to be the reference's own first (:func:`_own`)."""
    dst = _checked_reference(dst, "merge into")
    if not os.path.isdir(dst):
        raise AnalysisInputError(dst, "no reference to merge into; copy a whole run first (replace_reference)")

    if not workloads:
        raise AnalysisInputError(dst, "no workload to merge named")
    for w in workloads:
        if w not in BY_NAME:
            raise AnalysisInputError(dst, f"--merge {w!r}: no such workload (registered: {', '.join(BY_NAME)})")
    ceilings = os.path.join(src, layout.CEILINGS)
    if not os.path.isfile(ceilings):
        raise AnalysisInputError(ceilings, "missing: a merged workload needs the ceilings of its own run")
    cold_src, cold_dst = os.path.join(src, layout.COLDSTART), os.path.join(dst, layout.COLDSTART)
    k_src = os.path.join(src, layout.KERNELS)
    pages = sorted(os.listdir(k_src)) if os.path.isdir(k_src) else []
    # every path the merge replaces or deletes, checked before anything is changed
    for w in workloads:
        if not os.path.isdir(os.path.join(src, w)):
            raise AnalysisInputError(os.path.join(src, w), f"no captures of workload {w!r} in this run")
        _own(dst, os.path.join(dst, w))
        _own(dst, os.path.join(dst, w) + ".new")
    _own(dst, cold_dst)
    for name in sorted(os.listdir(cold_dst)) if os.path.isdir(cold_dst) else []:
        _own(dst, os.path.join(cold_dst, name))
    for page in pages:
        _own(dst, os.path.join(dst, layout.KERNELS, page))
    copied = []
    for w in workloads:
        w_src, w_dst = os.path.join(src, w), os.path.join(dst, w)
        fresh = w_dst + ".new"
        if os.path.lexists(fresh):
            _own(dst, fresh)
            print(f"copy-captures: removing {fresh}, left by an interrupted merge", file=sys.stderr)
            _remove_tree(dst, fresh)
        copied += [f"{w}/{rel}" for rel in copy_captures(w_src, fresh)]
        shutil.copy2(ceilings, os.path.join(fresh, layout.CEILINGS))
        copied.append(f"{w}/{layout.CEILINGS}")
        if os.path.isdir(w_dst) and _exchange(fresh, w_dst):
            _remove_tree(dst, fresh)
        else:
            if os.path.lexists(w_dst):
                _remove_tree(dst, w_dst)
            os.rename(fresh, w_dst)
        for name in sorted(os.listdir(cold_dst)) if os.path.isdir(cold_dst) else []:
            if name.startswith(f"{w}_") and name.endswith(".json"):
                _remove_tree(dst, os.path.join(cold_dst, name))
        for name in sorted(os.listdir(cold_src)) if os.path.isdir(cold_src) else []:
            if name.startswith(f"{w}_") and name.endswith(".json"):
                os.makedirs(cold_dst, exist_ok=True)
                shutil.copy2(os.path.join(cold_src, name), os.path.join(_own(dst, cold_dst), name))
                copied.append(f"{layout.COLDSTART}/{name}")
    # single-kernel pages captured in this run (rules/kernel.smk) replace their older captures
    for page in pages:
        p_dst = os.path.join(dst, layout.KERNELS, page)
        if os.path.lexists(p_dst):
            _remove_tree(dst, p_dst)
        copied += [f"{layout.KERNELS}/{page}/{rel}" for rel in copy_captures(os.path.join(k_src, page), p_dst)]
    return sorted(copied)


def copy_captures(src: str, dst: str) -> list[str]:
    """Copy the small capture files from ``src`` into ``dst`` (same layout); returns what was copied."""
    if not os.path.isdir(src):
        raise AnalysisInputError(src, "no such capture folder")
    copied = []
    for root, _dirs, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith(KEEP_SUFFIXES) or name in NOT_KEPT:
                continue
            rel = os.path.relpath(os.path.join(root, name), src)
            target = os.path.join(dst, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if kept_gzipped(name):
                gzip_copy(os.path.join(root, name), target + layout.GZIP_SUFFIX)
                rel += layout.GZIP_SUFFIX
            else:
                shutil.copy2(os.path.join(root, name), target)
            copied.append(rel)
    if not copied:
        raise AnalysisInputError(src, "holds no capture files")
    return sorted(copied)


def compare_reports(rebuilt: str, committed: str) -> list[str]:
    """Unified diffs of every markdown file in ``rebuilt`` that differs from ``committed``."""
    diffs = []
    for folder in (rebuilt, committed):
        if not os.path.isdir(folder):
            raise AnalysisInputError(folder, "no such folder")
    names = sorted(n for n in os.listdir(rebuilt) if n.endswith(".md"))
    if not names:
        raise AnalysisInputError(rebuilt, "no rebuilt markdown reports")
    for name in names:
        theirs = os.path.join(committed, name)
        if not os.path.isfile(theirs):
            diffs.append(f"{theirs}: missing (rebuilt {name} has no committed counterpart)")
            continue
        with open(os.path.join(rebuilt, name)) as a, open(theirs) as b:
            new, old = a.read().splitlines(), b.read().splitlines()
        if new != old:
            diffs.append("\n".join(difflib.unified_diff(old, new, theirs, os.path.join(rebuilt, name),
                                                        lineterm="", n=1)))
    return diffs
