"""Markdown for one kernel: its key metrics and its hottest source lines, from what
:mod:`analysis.readers.ncu_source` read out of the Nsight Compute report and the capture's
``kernel-run.json`` (workloads/tools/kernel_profile.py). Presents, never parses."""
from __future__ import annotations

import os
import shlex

from analysis.readers.ncu_source import KernelProfile, SourceLine
from workloads import frameworks
from workloads.harness.provenance import gpu_slug
from analysis.report import mdtext
from analysis.common.errors import AnalysisInputError

#: what the common PC-sampling states mean (ncu's "Warp State" names, without the prefix)
STALL_MEANING = {
    "long_scoreboard": "waiting for data from global/local memory (an L1TEX result)",
    "short_scoreboard": "waiting for shared memory or a slow math unit (MUFU) result",
    "wait": "a fixed wait the compiler put between dependent instructions",
    "selected": "issuing an instruction (not a stall)",
    "not_selected": "ready, but another warp was issued",
    "math_pipe_throttle": "the math unit it needs is busy",
    "lg_throttle": "the local/global memory queue is full",
    "mio_throttle": "the memory input/output queue (shared memory, special math) is full",
    "tex_throttle": "the texture/L1 unit is busy",
    "barrier": "waiting at __syncthreads / a block barrier",
    "membar": "waiting at a memory barrier",
    "branch_resolving": "waiting for a branch target",
    "no_instructions": "no instruction fetched yet (instruction cache miss, kernel start)",
    "imc_miss": "waiting for an immediate-constant cache miss",
    "dispatch_stall": "the dispatcher could not issue",
    "drain": "waiting for memory stores to drain before exiting",
    "sleeping": "sleeping (nanosleep or a yielded warp)",
    "misc": "other reasons",
}

#: how to turn on line information, per framework (the page's reference table)
LINE_INFO_HOWTO = frameworks.line_info_table()


def _fmt_ns(ns: float | None) -> str:
    if ns is None:
        return "n/a"
    if ns >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    return f"{ns / 1e3:.1f} µs"


def _fmt_pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f} %"


def _fmt_gb(v: float | None) -> str:
    return "n/a" if v is None else f"{v / 1e9:.3f} GB"


def _fmt_int(v: float | int | None) -> str:
    return "n/a" if v is None else f"{int(v):,}"


def _cell(text: str) -> str:
    return mdtext.cell(text)


def _code(text: str | None, width: int = 90) -> str:
    """A source line as an inline code span inside a table cell."""
    if text is None:
        return "*(text not in the report)*"
    text = " ".join(text.split())
    if not text:
        return "*(blank)*"
    if len(text) > width:
        text = text[: width - 1] + "…"
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return _cell(f"{fence}{pad}{text}{pad}{fence}")


def display_path(path: str) -> str:
    """A source path as the page shows it: from ``workloads/`` for the suite's own files (the same on
    every machine), else the base name (temporary and cache folders differ per run)."""
    marker = f"{os.sep}workloads{os.sep}"
    if marker in path:
        return path[path.index(marker) + 1:]
    return os.path.basename(path) or path


def _main_stall(sl: SourceLine) -> str:
    if not sl.stalls or not sl.samples:
        return ""
    reason, n = sl.stalls[0]
    return f"{reason} {100.0 * n / sl.samples:.0f} %"


def _ordinal(skipped: int) -> str:
    """'first' for no skipped launch, else '<n>th' of the matching launches (n = skipped + 1)."""
    if skipped == 0:
        return "first"
    n = skipped + 1
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix} (ncu -s {skipped})"


def capture_paths(run: dict | None) -> tuple[str, str] | None:
    """(live, reference) paths of the report, from the capture's name; None without a run record."""
    if not run:
        return None
    name = capture_name(run["workload"], run["variant"], run["kernel"], run.get("line_directives"))
    # a committed capture lives in the reference folder of the GPU it was captured on
    gpus = (run.get("provenance") or {}).get("gpus") or []
    reference = f"reports/reference/{gpu_slug(gpus[0]['name'])}" if gpus else "reports/reference/<gpu>"
    return (f"results/captures/kernels/{name}/kernel.ncu-rep",
            f"{reference}/kernels/{name}/kernel.ncu-rep.gz")


def capture_name(workload: str, variant: str, kernel: str, line_directives: bool | None = True) -> str:
    """``<workload>_<variant>_<kernel>``, with ``_cuda_c`` for a Warp capture correlated to the
    generated CUDA-C (``line_directives`` False)."""
    name = f"{workload}_{variant}_{kernel}"
    return name + ("_cuda_c" if line_directives is False else "")


def _metrics_table(k: KernelProfile) -> list[str]:
    m = k.metrics
    rows = [
        ("Duration", _fmt_ns(m["gpu__time_duration.sum"]), "gpu__time_duration.sum"),
        ("DRAM throughput", f"{_fmt_pct(m['gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed'])} of peak",
         "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
        ("DRAM bytes read / written", f"{_fmt_gb(m['dram__bytes_read.sum'])} / {_fmt_gb(m['dram__bytes_write.sum'])}",
         "dram__bytes_read.sum, dram__bytes_write.sum"),
        ("Memory throughput (busiest memory unit)",
         f"{_fmt_pct(m['gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed'])} of peak",
         "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
        ("SM throughput (busiest SM unit)",
         f"{_fmt_pct(m['sm__throughput.avg.pct_of_peak_sustained_elapsed'])} of peak",
         "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        ("Achieved occupancy (theoretical)",
         f"{_fmt_pct(m['sm__warps_active.avg.pct_of_peak_sustained_active'])} "
         f"({_fmt_pct(m['sm__maximum_warps_per_active_cycle_pct'])})",
         "sm__warps_active.avg.pct_of_peak_sustained_active, sm__maximum_warps_per_active_cycle_pct"),
        ("Registers per thread", _fmt_int(m["launch__registers_per_thread"]), "launch__registers_per_thread"),
        ("Grid × block", f"{_fmt_int(m['launch__grid_size'])} × {_fmt_int(m['launch__block_size'])}",
         "launch__grid_size, launch__block_size"),
        ("Warp instructions executed", _fmt_int(m["smsp__inst_executed.sum"]), "smsp__inst_executed.sum"),
        ("L2 / L1 hit rate", f"{_fmt_pct(m['lts__t_sector_hit_rate.pct'])} / {_fmt_pct(m['l1tex__t_sector_hit_rate.pct'])}",
         "lts__t_sector_hit_rate.pct, l1tex__t_sector_hit_rate.pct"),
        ("Warp-state samples",
         f"{_fmt_int(m['smsp__pcsamp_sample_count'])} (one per {_fmt_int(m['smsp__pcsamp_interval_cycles'])} cycles "
         "per SM sub-partition)", "smsp__pcsamp_sample_count"),
    ]
    out = ["| metric | value | ncu metric |", "|---|---:|---|"]
    out += [f"| {a} | {b} | `{c}` |" for a, b, c in rows]
    return out


def _stalls_table(k: KernelProfile, top: int = 6) -> list[str]:
    total = sum(n for _, n in k.stalls)
    if not total:
        return ["The report holds no warp-state samples."]
    out = ["| state | samples | share | what the warp was doing |", "|---|---:|---:|---|"]
    for reason, n in k.stalls[:top]:
        out.append(f"| `{reason}` | {n:,} | {100.0 * n / total:.1f} % | {STALL_MEANING.get(reason, '')} |")
    return out


def _lines_table(k: KernelProfile, top: int) -> list[str]:
    src = k.source
    rows = [sl for sl in src.lines if sl.samples or sl.instructions][:top]
    with_python = any(sl.python is not None for sl in rows)
    with_l2 = any(sl.l2_sectors for sl in rows)
    head = ["#", "line", "source"] + (["Python line (Warp comment)"] if with_python else []) + \
        ["samples", "share", "main stall", "warp instructions"] + (["L2 sectors (global)"] if with_l2 else []) + \
        ["SASS"]
    align = ["---:", "---", "---"] + (["---"] if with_python else []) + ["---:", "---:", "---", "---:"] + \
        (["---:"] if with_l2 else []) + ["---:"]
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    for i, sl in enumerate(rows, 1):
        cells = [str(i), f"`{_cell(display_path(sl.file))}:{sl.line}`", _code(sl.text)]
        if with_python:
            cells.append("" if sl.python is None else f"L{sl.python.line}: {_code(sl.python.text, 60)}")
        cells += [f"{sl.samples:,}", f"{sl.samples_pct:.1f} %", _main_stall(sl), f"{sl.instructions:,}"]
        if with_l2:
            cells.append("" if sl.l2_sectors is None else f"{sl.l2_sectors:,}")
        cells.append(str(sl.sass_count))
        out.append("| " + " | ".join(cells) + " |")
    return out


def _instructions_table(k: KernelProfile, top: int) -> list[str]:
    total = k.source.total_samples
    out = ["| offset | SASS | samples | share | warp instructions |", "|---:|---|---:|---:|---:|"]
    for ins in k.source.hottest_instructions[:top]:
        share = 100.0 * ins.samples / total if total else 0.0
        out.append(f"| 0x{ins.offset:04x} | {_code(ins.sass, 70)} | {ins.samples:,} | {share:.1f} % | "
                   f"{ins.instructions:,} |")
    return out


def _source_section(k: KernelProfile, run: dict | None, top: int) -> list[str]:
    src = k.source
    out = ["## Hottest source lines", ""]
    if not src.has_line_info:
        out += [f"**No line information**: {src.reason}.", "",
                "The hottest SASS instructions instead (offset from the kernel's first instruction):", ""]
        out += _instructions_table(k, top)
        return out
    out += [
        f"Per source line: the warp-state samples at the SASS instructions the line information puts on it "
        f"({src.total_samples:,} in all), their main state, the warp-level instructions executed, the ideal "
        "32-byte L2 sectors of its global loads and stores, and how many SASS instructions it compiled to. "
        "A sample is charged to the instruction the warp is *at*: a warp waiting for a load is counted at "
        "the first instruction that uses the loaded value, often the line after the load.",
        "",
    ]
    out += _lines_table(k, top)
    notes = []
    if src.unattributed_samples:
        notes.append(f"{src.unattributed_samples:,} samples ({100.0 * src.unattributed_samples / src.total_samples:.1f} %) "
                     "fall on instructions without line information.")
    missing = [f for f in src.files if not f.imported]
    if missing:
        names = ", ".join(f"`{_cell(display_path(f.name))}`" for f in missing)
        notes.append(f"No text was imported for {names}: the file did not exist where the line information "
                     "points when ncu imported the sources (see the table of frameworks below).")
    if any(sl.python is not None for sl in src.lines):
        notes.append("The source is Warp's generated CUDA-C (`line_directives = False`); the Python column "
                     "is the statement in the comment Warp writes above each statement's CUDA.")
    if notes:
        out += [""] + [f"- {n}" for n in notes]
    if len(src.files) > 1:
        out += ["", "Samples per file:", "", "| file | samples | text imported |", "|---|---:|---|"]
        out += [f"| `{_cell(display_path(f.name))}` | {f.samples:,} | {'yes' if f.imported else 'no'} |"
                for f in src.files]
    return out


def _gui_section(run: dict | None, report_hint: str) -> list[str]:
    paths = capture_paths(run)
    out = ["## Opening the report", ""]
    if paths:
        live, ref = paths
        out += ["```sh", f"ncu-ui {live}", "# the committed copy is gzipped:",
                f"gunzip -k {ref} && ncu-ui {ref[:-3]}",
                f"ncu --import {live} --page source --csv   # the Source page in the terminal", "```", ""]
    elif report_hint.endswith(".gz"):
        out += ["```sh", f"gunzip -k {report_hint} && ncu-ui {report_hint[:-3]}", "```", ""]
    else:
        out += ["```sh", f"ncu-ui {report_hint}", "```", ""]
    out += [
        "In the GUI, the *Source* page shows the source next to the SASS (View: *Source and SASS*), with these "
        "counters per line and per instruction; the source files are inside the report (`--import-source yes`), "
        "so it opens correctly on any machine and after the code has changed. If the page shows only SASS, "
        "the kernel was compiled without line information.",
    ]
    return out


def _line_directives_section(k: KernelProfile, run: dict) -> list[str]:
    ld = run.get("line_directives") is not False
    out = ["## Python or CUDA-C lines", ""]
    out += [
        "Warp compiles each Python kernel to CUDA-C. With line information on, it writes `#line` directives "
        "into that CUDA-C by default, so that ncu correlates the SASS with the Python lines; one Python line can "
        "then own tens or hundreds of SASS instructions. With `warp.config.line_directives = False` the SASS is "
        "correlated with the generated CUDA-C in the kernel cache instead, one statement per line, and a comment "
        "above each statement says which Python line produced it (Warp's profiling guide). ncu must "
        "then find that `.cu` file: `--source-folders <kernel cache>` (searched recursively); this tool gives "
        "it the run's fresh kernel cache. With either view, instructions of Warp's built-in functions may be "
        "attributed to the native headers they are inlined from (`builtin.h`, `array.h`, ...) rather than to "
        "the line that calls them; the samples-per-file table shows how much.",
        "",
    ]
    w, v, name = run["workload"], run["variant"], run["kernel"]
    other = not ld
    state = "on: the lines are Python lines" if ld else "off: the lines are generated CUDA-C lines"
    flag = "--line-directives" if other else "--no-line-directives"
    out += [f"This capture: line directives {state}. The other view:", "", "```sh",
            f"snakemake kernel_page --config kernel_workload={w} kernel_variant={v} kernel_name={name}"
            f" kernel_line_directives={other}",
            f"# or: python -m workloads.tools.kernel_profile --workload {w} --variant {v} --kernel {name} {flag}",
            f"#       --ncu ncu --python python3 --work-dir results "
            f"--output-dir results/captures/kernels/{capture_name(w, v, name, other)}",
            "```"]
    return out


def _howto_section() -> list[str]:
    out = ["## Line information per framework", "", "| framework | how | lines correlate to |", "|---|---|---|"]
    out += [f"| {a} | {_cell(b)} | {_cell(c)} |" for a, b, c in LINE_INFO_HOWTO]
    return out


def captured_at(run: dict) -> str:
    """Where and at which commit the capture was made, in one sentence: a reader compares the page
    with the code of that commit and with the recipe pages of that GPU."""
    prov = run.get("provenance") or {}
    gpus = prov.get("gpus") or []
    commit = prov.get("git_commit") or ""
    clean = commit.removesuffix("-dirty")
    where = f"on an {gpus[0]['name']}" if gpus else "on a GPU the record does not name"
    if not clean:
        at = "at a commit the record does not name"
    elif clean != commit:
        at = f"at commit `{clean[:10]}` with uncommitted changes (recorded as `-dirty`)"
    else:
        at = f"at commit `{clean[:10]}`"
    date = f", {prov['date_utc'][:10]}" if prov.get("date_utc") else ""
    return f"Captured {where} {at}{date}."


def kernel_runs_of(workload: str, workload_root: str | None) -> list[tuple[str, dict]]:
    """(page name, kernel-run.json record) of each kernel capture of ``workload`` beside its run
    captures (``<captures>/kernels/<page>/``: the reference folder of the GPU the recipe page is for,
    or a live run's), by page name. A record that does not parse is a typed error naming it."""
    import json


    if not workload_root:
        return []
    folder = os.path.join(os.path.dirname(os.path.normpath(workload_root)), "kernels")
    if not os.path.isdir(folder):
        return []
    out = []
    for page in sorted(os.listdir(folder)):
        path = os.path.join(folder, page, "kernel-run.json")
        if not os.path.isfile(path):
            continue
        try:
            with open(path) as f:
                run = json.load(f)
        except (OSError, ValueError) as e:
            raise AnalysisInputError(path, f"not a readable kernel-run record ({e})") from None
        if run.get("workload") == workload:
            out.append((page, run))
    return out


def links_section(workload: str, workload_root: str | None, variant_order: list[str] | tuple[str, ...] = ()
                  ) -> str | None:
    """The recipe page's paragraph linking its kernel pages (published in ``kernels/`` beside the
    recipe pages of the same GPU); None when the recipe has none."""
    runs = kernel_runs_of(workload, workload_root)
    if not runs:
        return None
    order = {v: i for i, v in enumerate(variant_order)}
    runs.sort(key=lambda pr: (order.get(pr[1].get("variant"), len(order)), pr[0]))
    links = []
    for page, run in runs:
        view = "" if run.get("line_directives") is not False else ", generated CUDA-C lines"
        commit = ((run.get("provenance") or {}).get("git_commit") or "").removesuffix("-dirty")[:10]
        at = f"commit `{commit}`" if commit else "commit not recorded"
        links.append(f"[`{run['kernel']}` in `{run['variant']}`](kernels/{page}.md) ({at}{view})")
    # one paragraph: the pages keep their length budget
    return ("**Kernel pages** (one launch each under Nsight Compute with line information: metrics, warp states, "
            "hottest source lines; captured on this GPU): " + "; ".join(links) + ".\n")


def _provenance_section(k: KernelProfile, run: dict | None) -> list[str]:
    out = ["## How this was captured", ""]
    if not run:
        return out + ["No `kernel-run.json` came with this report: its command and provenance are unknown."]
    prov = run.get("provenance") or {}
    gpus = prov.get("gpus") or []
    pkgs = prov.get("packages") or {}
    out += [
        f"- workload `{run['workload']}`, variant `{run['variant']}`, size {run['size']:,}, one call; the "
        f"{_ordinal(run.get('launch_skip') or 0)} launch matching `-k regex:{run['kernel_regex']}` inside the "
        f"variant's NVTX `compute` range: "
        f"`{k.function_name}`",
        f"- environment added: {', '.join(f'`{a}={_portable_value(b)}`' for a, b in sorted(run.get('environment', {}).items())) or 'none'};"
        " every cache in a fresh private folder (a cold start)",
        f"- GPU: {gpus[0]['name'] if gpus else 'unknown'}, driver {prov.get('driver_version') or 'unknown'}, "
        f"CUDA runtime {prov.get('cuda_runtime') or 'unknown'}; Nsight Compute {run.get('ncu_version') or 'unknown'}",
        "- packages: " + ", ".join(f"{n} {v}" for n, v in sorted(pkgs.items()) if v),
        f"- commit {prov.get('git_commit') or 'unknown'}, captured {prov.get('date_utc') or 'unknown'}",
        "",
        "```sh",
        " ".join(_shell_word(w) for w in _portable_command(run["command"])),
        "```",
    ]
    return out


def _portable_value(value: str) -> str:
    """An environment value without the capture host's folders: the fresh cache by its role."""
    return f"<fresh cache>/{os.path.basename(value)}" if os.path.isabs(value) else value


def _portable_command(cmd: list[str]) -> list[str]:
    """The command with machine-specific paths cut to what matters: executables by name, the report
    and the source folder by role."""
    out = []
    for i, w in enumerate(cmd):
        prev = cmd[i - 1] if i else ""
        if i == 0 or (prev and prev == "--export"):
            out.append(os.path.basename(w) if i == 0 else "<output-dir>/kernel")
        elif prev == "--source-folders":
            out.append("<fresh cache>/warp")
        elif i + 1 < len(cmd) and cmd[i + 1] == "-m":
            out.append(os.path.basename(w))
        else:
            out.append(w)
    return out


def _shell_word(w: str) -> str:
    """Quoted for a POSIX shell, except the ``<placeholders>`` the reader replaces."""
    return w if w.startswith("<") else shlex.quote(w)


def kernel_page(k: KernelProfile, run: dict | None, top: int = 15, report_hint: str = "kernel.ncu-rep") -> str:
    """The page: title, key metrics, warp states, hottest lines, how to open the report, the
    line-directives note, line information per framework, and how it was captured."""
    if run:
        title = f"# Kernel `{_cell(run['kernel'])}`: {_cell(run['workload'])} / {_cell(run['variant'])}"
        intro = (f"One launch of `{_cell(k.display_name)}` at size {run['size']:,}, profiled by Nsight Compute "
                 "with `--set full`, line information on and the sources imported into the report.")
    else:
        title = f"# Kernel `{_cell(k.display_name)}`"
        intro = "Profiled by Nsight Compute with `--set full`."
    if k.launches_in_report > 1:
        intro += f" The report holds {k.launches_in_report} launches; this page shows launch {k.launch}."
    lines = [title, "", intro, ""] + ([captured_at(run), ""] if run else []) + ["## Key metrics", ""]
    lines += _metrics_table(k)
    lines += ["", "## Where the warps were", "",
              "Warp-state samples over the whole kernel (PC sampling): what each sampled warp was doing.", ""]
    lines += _stalls_table(k)
    lines += [""] + _source_section(k, run, top)
    lines += [""] + _gui_section(run, report_hint)
    record = frameworks.FRAMEWORKS.get((run or {}).get("framework", ""))
    if record is not None and record.line_directives:
        lines += [""] + _line_directives_section(k, run)
    lines += [""] + _howto_section()
    lines += [""] + _provenance_section(k, run)
    return "\n".join(lines) + "\n"
