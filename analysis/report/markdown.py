"""Markdown for the reports. A recipe's page formats its :class:`analysis.model.report_model.ReportModel`
(in the words of :mod:`analysis.report.page_text`) and computes nothing; the same model gives the
same bytes."""
from __future__ import annotations

import re
import shlex
from typing import Sequence

from analysis.model import report_model as rm
from analysis.report import page_text as pt
from analysis.model import verdicts
from analysis.common.outputs import write_text_atomic
from workloads import sources
from workloads.harness import telemetry
from workloads.registry import BY_NAME
from analysis.report.mdtext import table
from analysis.model.limiter import MISMATCH_FACTOR

NCU_COLUMNS = (
    ("gpu__time_duration.sum", "duration µs", lambda v: f"{v / 1e3:.1f}"),
    ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "SM %", lambda v: f"{v:.1f}"),
    ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "memory %", lambda v: f"{v:.1f}"),
    ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "DRAM %", lambda v: f"{v:.1f}"),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "occupancy %", lambda v: f"{v:.1f}"),
    ("sm__inst_executed_pipe_fp64.avg.pct_of_peak_sustained_active", "FP64 pipe %", lambda v: f"{v:.1f}"),
    ("launch__registers_per_thread", "regs", lambda v: f"{int(v)}"),
    ("launch__grid_size", "grid", lambda v: f"{int(v)}"),
    ("launch__block_size", "block", lambda v: f"{int(v)}"),
)
NCU_METRIC_KEYS = tuple(k for k, _, _ in NCU_COLUMNS)

#: a cell longer than this is cut (with an ellipsis): table rows stay readable (kernel names run to
#: thousands of characters in templated libraries)
MAX_CELL_CHARS = 90


#: no line of a page is longer than this: prose and commands are folded where they would be
MAX_LINE_CHARS = 400

_LEAD = re.compile(r"^(> )?(- |\d+\. )?")


def _utf8_len(text: str) -> int:
    # lines are measured in UTF-8 bytes, as line-length checks of tools are: "µs" is 3 bytes
    return len(text.encode("utf-8"))


def _fold_words(words: list[str], first: str, rest: str, limit: int, joiner: str = "") -> list[str]:
    """Greedy fold of ``words`` into lines of at most ``limit`` bytes (a word longer than that stays
    whole): the first line starts with ``first``, the others with ``rest``; ``joiner`` ends every line
    but the last."""
    out, current = [], None
    for word in words:
        if current is None:
            current = first + word
        elif _utf8_len(f"{current} {word}{joiner}") > limit:
            out.append(current + joiner)
            current = rest + word
        else:
            current = f"{current} {word}"
    return out + [first if current is None else current]


def _shell_words(line: str) -> list[str]:
    """A command split at the spaces a shell splits it at (not inside quotes), each word kept as
    written, quotes included (shlex in non-POSIX mode)."""
    lexer = shlex.shlex(line, posix=False)
    lexer.whitespace_split, lexer.commenters = True, ""
    return list(lexer)


def fold_long_lines(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """``text`` with every line over ``limit`` bytes folded so that it renders the same: prose at
    spaces, continued inside its quote and list item; commands in code blocks with backslash
    continuations. Table rows and headings are left as they are (tables cut their cells)."""
    out, in_code = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            in_code = not in_code
        if _utf8_len(line) <= limit or line.startswith(("|", "#", "```", "<")):
            out.append(line)
        elif in_code:
            out += _fold_words(_shell_words(line), "", "    ", limit, " \\")
        else:
            lead = _LEAD.match(line).group(0)
            quote = "> " if lead.startswith(">") else ""
            indent = quote + " " * (len(lead) - len(quote))
            out += _fold_words(line[len(lead):].split(), lead, indent, limit)
    return "\n".join(out)


def write_page(path: str, text: str) -> None:
    """Write a markdown page atomically, its long lines folded (:func:`fold_long_lines`)."""
    write_text_atomic(path, fold_long_lines(text))


def _gpu_name(prov: dict) -> str:
    gpus = prov.get("gpus") or []
    return gpus[0]["name"] if gpus else "no GPU recorded"


def _ms(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def provenance_table(prov: dict, tools: dict | None = None, extra: dict | None = None) -> str:
    rows = [
        ("GPU", _gpu_name(prov)),
        ("driver", prov.get("driver_version")),
        ("CUDA runtime / driver API", f"{prov.get('cuda_runtime')} / {prov.get('cuda_driver_api')}"),
    ]
    if tools:
        rows += [("nsys", tools["nsys"]["version"]), ("ncu", tools["ncu"]["version"])]
    rows += [("Python", prov.get("python"))]
    rows += [("packages", pt.packages_text(prov))]
    rows += [("git commit", pt.describe_commit(prov)), ("captured (UTC)", prov.get("date_utc"))]
    rows += list((extra or {}).items())
    return table(("", "value"), rows)


def ceilings_table(ceilings: dict) -> str:
    rows = []
    for name, c in sorted(ceilings.items()):
        rate = f"{c['gb_per_s']:.1f} GB/s" if "gb_per_s" in c else f"{c['tflop_per_s']:.1f} TFLOP/s"
        rows.append((name, rate, f"{c['median_ms']:.3f}"))
    return table(("measurement", "rate", "median ms"), rows)


# --- a recipe's page, from its model ----------------------------------------------------------------

def _cmp(c: rm.Comparison | None) -> str:
    if c is None:
        return "—"
    return f"**{c.label}** {c.text.split(' ', 1)[1]}" if c.text else f"**{c.label}** {pt.ratio_text(c.speedup)}"


def _median(s: rm.Step) -> str:
    return f"{s.median_ms:.4g} ({s.q1_ms:.4g}–{s.q3_ms:.4g})"


def result_box(m: rm.ReportModel) -> list[str]:
    r = m.result
    best = (f"`{r.best.variant}` {_median(r.best)} ms against `{r.baseline.variant}` {_median(r.baseline)} ms: "
            + (f"{_cmp(r.best_vs_baseline)}" if r.best_vs_baseline
               else f"{pt.baseline_label(r)} is the fastest step"))
    return [
        f"> **Result at size {r.size}.** {pt.takeaway(r)}",
        ">",
        f"> - **Best step against {pt.baseline_label(r)}:** {best} ({pt.spread_text(m.timer)}).",
        f"> - **What limits `{r.best.variant}`:** {r.limiter.what} (from {r.limiter.source})"
        f"{_limiter_floor_clause(r.best)}.",
        f"> - **Next thing to try:** {r.limiter.advice}.",
        *([">", f"> {pt.coverage_text(m)}"] if not m.counters else []),
    ]


def _limiter_floor_clause(s: rm.Step) -> str:
    """'; 1.82× the floor of that limiter (...)' or why there is none."""
    if s.time_over_limiter_floor is None:
        return f"; no floor of that limiter ({s.limiter.floor_what})" if s.limiter.floor_what else ""
    clause = f"; {pt.ratio_text(s.time_over_limiter_floor)} the floor of that limiter ({s.limiter.floor_what})"
    return clause + _host_share_clause(s)


#: below this share of the call the GPU is busy, the call's time is not the limiter's alone
BUSY_SHARE_FOR_HOST_CLAUSE = 0.9


def _host_share_clause(s: rm.Step) -> str:
    """Where the GPU is idle for part of each call (nsys), how far the GPU's own busy time is from
    the limiter's floor: the rest of the call waits on the host (launches, dispatch, the timer)."""
    busy, floor_ms = s.busy.busy_ms, s.limiter.floor_ms
    # idle time only as the timed run confirms it: a timed median within nsys' busy time has none
    if not floor_ms or busy <= 0 or busy >= BUSY_SHARE_FOR_HOST_CLAUSE * s.median_ms:
        return ""
    return (f"; the GPU is busy {busy:.4g} ms of each call (nsys), {pt.ratio_text(busy / floor_ms)} that floor: "
            f"the other {s.median_ms - busy:.3g} ms per call it waits on the host")


def _floors_cell(s: rm.Step) -> str:
    limiter_part = pt.ratio_text(s.time_over_limiter_floor) if s.time_over_limiter_floor is not None else "—"
    return f"{pt.ratio_text(s.time_over_floor)}; {limiter_part}"


def ladder_table(steps: Sequence[rm.Step], timer: str) -> str:
    rows = [(f"`{s.variant}`", f"`{s.improves_on}`" if s.improves_on else "—", _median(s), _cmp(s.vs_parent),
             _cmp(s.vs_baseline), f"{s.floor_ms:.4g} ({s.floor_resource})", _floors_cell(s),
             s.limiter.what) for s in steps]
    return table(("step", "improves on", f"median ms (IQR), {timer.split(' (')[0]}", "vs the step it improves on",
                  "vs baseline", "minimum-work floor ms (resource)", "time / floor: minimum work; limiter",
                  "limiter (measured)"), rows, MAX_CELL_CHARS)


def step_sentences(steps: Sequence[rm.Step]) -> list[str]:
    return [f"- `{s.variant}`: {s.summary}. Measured: {pt.change_text(s)}." for s in steps]


def _details(summary: str, body: Sequence[str]) -> list[str]:
    return ["<details><summary>" + summary + "</summary>", "", *body, "", "</details>", ""]


def steps_detail_table(steps: Sequence[rm.Step]) -> str:
    rows = [(f"`{s.variant}`", f"{s.achieved:.0f} {s.floor_unit} ({s.achieved_of_ceiling:.0%})",
             f"{s.busy.busy_ms:.4f} / {s.busy.wall_ms:.4f}", f"{s.busy.kernel_ms:.4f}",
             f"{s.busy.h2d_ms:.4f} / {s.busy.d2h_ms:.4f} / {s.busy.other_copy_ms:.4f}",
             f"{s.busy.overlap_ms:.4f}", "/".join(map(str, s.kernels_per_call)),
             f"{s.alloc_calls_first} / {s.alloc_calls_later}",
             f"{_ms(s.host_call_ms)} / {_ms(s.host_synced_ms)}", f"{s.first_call_ms:.1f}", f"{s.noise:.1%}",
             f"{s.relative_error:.1e}", rests_on(s))
            for s in steps]
    return table(("step", "effective rate on the floor's resource (of its reference rate)",
                  "GPU busy / wall ms",
                  "kernels ms", "copies H2D / D2H / other ms", "overlapping ms", "kernels per call",
                  "alloc calls: first / later", "host timer ms: returns / synced", "first call ms",
                  "noise (IQR / median)", "rel. error",
                  "rests on: samples, warm-up, nsys calls; SM clock, throttled samples, J/call (NVML); CPU busy: own / "
                  "others"),
                 rows)


def rests_on(s: rm.Step) -> str:
    """What a step's numbers rest on, in one cell: timed samples (why sampling stopped), warm-up
    calls, calls under nsys; then the SM clock, throttled samples and joules per call while timed;
    then how busy the run's own CPU cores and the others were meanwhile (a launch-bound step's time
    is the host's: what ran beside it is part of what its number rests on)."""
    head = f"{s.samples}" + (f" {s.stopped_because}" if s.stopped_because else "")
    head += f", {'—' if s.warmup_calls is None else s.warmup_calls} warm-up, {s.nsys_calls} nsys"
    t = s.telemetry
    if not t or not t.get("available", True):
        cell = head + "; NVML not recorded"
    else:
        lo, hi = t.get("sm_clock_mhz_range") or (None, None)
        clocks = "—" if lo is None else f"{lo}" if lo == hi else f"{lo}–{hi}"
        energy, how = telemetry.energy_per_call(t)
        joules = "— J" if energy is None else f"{energy:.3g} J ({how})"
        throttled = t.get("throttled_samples")
        throttled_text = ("— samples throttled" if throttled is None
                          else f"{throttled} of {s.samples} samples throttled")
        cell = f"{head}; {clocks} MHz, {throttled_text}, {joules}"
    return cell + _host_load_text(s.host_load)


def _host_load_text(load: dict | None) -> str:
    """"; CPU 14% (8-15) / 63% (0-7)": busy shares of the run's own cores and the others; "" in
    captures older than the record."""
    if not load:
        return ""
    if not load.get("available", True):
        return "; CPU load not recorded"

    def share(x):
        return "—" if x is None else f"{x:.0%}"

    return (f"; CPU {share(load.get('own_busy'))} ({load.get('own_cores')}) / "
            f"{share(load.get('other_busy'))} ({load.get('other_cores') or 'none'})")


def copies_table(rows: Sequence[rm.CopyRow], steps: Sequence[rm.Step]) -> str:
    """One row per phase, direction and host memory; one column per step: copies, MB, GB/s and the
    share of the pinned copy ceiling of that direction."""
    keys = list(dict.fromkeys((c.phase, c.direction, c.host_memory) for c in rows))
    by = {(c.phase, c.direction, c.host_memory, c.variant): c for c in rows}

    def cell(c: rm.CopyRow | None) -> str:
        if c is None:
            return "—"
        rate = f"{c.gb_per_s:.1f} GB/s" if c.gb_per_s is not None else "n/a"
        share = f" ({c.of_pinned_ceiling:.0%})" if c.of_pinned_ceiling is not None else ""
        return f"{c.count} × {_bytes(c.bytes / c.count)}, {rate}{share}"

    return table(["phase", "direction", "host memory"] + [f"`{s.variant}`" for s in steps],
                 [[ph, d.replace("-to-", "→").replace("Host", "H").replace("Device", "D"), h or "—"]
                  + [cell(by.get((ph, d, h, s.variant))) for s in steps] for ph, d, h in keys])


#: the row of the kernels beyond each step's longest (rm.KernelRow "N other kernels")
OTHER_KERNELS = "other kernels"


def kernels_table(rows: Sequence[rm.KernelRow]) -> str:
    """Kernels by step, one row per kernel and one column per step, so that a kernel's time reads
    across the steps: launches per call × mean µs ("—": not among that step's longest). Rows by
    their longest time per call in any step; the steps' other kernels, summed, last."""
    steps = list(dict.fromkeys(k.variant for k in rows))
    cells: dict[str, dict[str, str]] = {}
    longest: dict[str, float] = {}
    for k in rows:
        other = k.name.endswith(" " + OTHER_KERNELS)
        key = OTHER_KERNELS if other else k.name
        text = f"{k.per_call:g} × {k.avg_us:.1f}"
        cells.setdefault(key, {})[k.variant] = f"{text} ({k.name.split()[0]} kernels)" if other else text
        longest[key] = -1.0 if other else max(longest.get(key, 0.0), k.per_call * k.avg_us)
    order = sorted(cells, key=lambda name: -longest[name])
    return table(["kernel", *(f"`{s}`" for s in steps)],
                 [[name if name == OTHER_KERNELS else f"`{name}`", *(cells[name].get(s, "—") for s in steps)]
                  for name in order], MAX_CELL_CHARS)


def ncu_table(rows: Sequence[rm.NcuRow]) -> str:
    out = []
    for n in rows:
        cells = [f"`{n.variant}`", n.launch_id, f"`{n.kernel}`"]
        cells += [fmt(n.metrics[key]) if n.metrics.get(key) is not None else "n/a" for key, _, fmt in NCU_COLUMNS]
        cells.append(f"{n.dram_gb_per_s:.0f}" if n.dram_gb_per_s else "n/a")
        out.append(cells)
    return table(["step", "ID", "kernel"] + [c[1] for c in NCU_COLUMNS] + ["DRAM GB/s"], out, MAX_CELL_CHARS)


def ncu_rules_lines(rules: Sequence) -> list[str]:
    if not rules:
        return []
    variants = list(rules[0][1])

    def est(v) -> str:
        return "—" if v is None else v if isinstance(v, str) else f"{v:.0f}%"

    if len(variants) == 1:
        # one step's rules: a sentence, ordered by the estimate, rather than a one-column table
        only = variants[0]
        estimated = sorted(((rule, cells[only]) for rule, cells, _, _ in rules
                            if isinstance(cells.get(only), (int, float))), key=lambda rc: -rc[1])
        flagged = [rule for rule, cells, _, _ in rules if isinstance(cells.get(only), str)]
        # kept short, so that a step with eight rules and three flags still fits one line of MAX_LINE_CHARS
        text = (f"ncu's rules on `{only}`'s hottest kernel, those consistent with its limiter, by estimated speedup "
                f"(under "
                f"{rm.NCU_RULE_MIN_PCT:.0f}% left out): " + ", ".join(f"{rule} {v:.0f}%" for rule, v in estimated))
        if flagged:
            text += ("; " if estimated else "") + "flagged without an estimate: " + ", ".join(flagged)
        # the quotes below follow the sentence, without a heading of their own
        lines = [text + ". The largest, in ncu's words:", ""]
    else:
        lines = ["ncu's rules on each step's hottest profiled kernel, those consistent with its measured limiter, with "
                 "ncu's estimated speedup (\"—\": not flagged; "
                 f"rules under {rm.NCU_RULE_MIN_PCT:.0f}% on every step left out):",
                 "", table(["rule"] + [f"`{v}`" for v in variants], [[rule] + [est(cells.get(v)) for v in variants]
                                                                       for rule, cells, _, _ in rules]), ""]
        lines += ["The rules with the largest estimated speedups, in ncu's words:", ""]
    lines += [f"- **{rule}** (`{worst}`): {msg}" for rule, _, worst, msg in rules if msg]
    return lines


def findings_lines(m: rm.ReportModel) -> list[str]:
    lines = []
    for g in m.findings:
        places = ", ".join(f"{'`' + p.variant + '`'} n{p.size}"
                           + (f" ({p.time_at_stake_ms:.3g} ms)" if p.time_at_stake_ms is not None else "")
                           for p in g.places)
        stake = ("in the first calls only, none in the steady calls" if g.first_calls_only else
                 f"up to {g.time_at_stake_ms:.3g} ms per call")
        lines.append(f"- **{g.title}** (`{g.id}`), {stake}. *Fix:* {g.fix} "
                     f"*Where (time at stake per call):* {places}.")
    return lines or ["No rule flagged any step."]


def _bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def size_details(m: rm.ReportModel, size: int) -> list[str]:
    """One size: its ladder table (the largest size's is on the first screen), then one folded block
    with the per-step numbers and, at the largest size, copies by phase, kernels and Nsight Compute."""
    steps = m.ladder[size]
    if size != m.result.size:
        return [f"### Size {size}", "", ladder_table(steps, m.timer), ""]
    lines = []
    body = [steps_detail_table(steps), ""]
    if m.seed_split:
        parts = [n for n, _ in m.seed_split[0][1]]
        body += ["**The baseline's split of GPU busy time beside the seed's:**", "",
                 table(["measured on"] + [f"{p} %" for p in parts],
                       [[who] + [f"{pct:.1f}" for _, pct in split] for who, split in m.seed_split]), ""]
    if m.copies[size]:
        body += ["**Copies by phase** (nsys; copies × size each, rate, share of the pinned ceiling; 0-byte rows "
                 "dropped):", "", copies_table(m.copies[size], steps), ""]
    body += [f"**Kernels in the compute ranges** (nsys; per call: launches × mean µs; each step's "
             f"{rm.KERNELS_PER_STEP} longest, its other kernels summed in the last row):", "",
             kernels_table(m.kernels[size]), ""]
    if m.work_checks.get(size):
        body += ["**Declared work beside what ncu measured** (per steady call; flagged when more than "
                 f"{MISMATCH_FACTOR}× apart):", "",
                 table(("step", "kernel time profiled", "declared MB", "DRAM MB (ncu)", "measured / declared",
                        "effective GB/s (declared bytes / median)", "DRAM GB/s achieved (ncu bytes / kernel time)",
                        "declared FLOPs", "executed FLOPs (ncu)", "measured / declared", "flag"),
                       pt.work_check_cells(m.work_checks[size])), ""]
    if m.ncu[size]:
        body += ["**Nsight Compute**, each step's first profiled launch of each kernel:", "", ncu_table(m.ncu[size]),
                 "", *ncu_rules_lines(m.ncu_rules[size])]
    lines += list(pt.no_counters_lines(m, size))
    return lines + _details(f"Size {size}: rate, GPU busy (union of GPU work), copies by phase, kernels, ncu",
                            [line for line in body][:-1] if body and body[-1] == "" else body)


def appendix(m: rm.ReportModel) -> list[str]:
    lines = ["## Appendix", "", "### Provenance", "", table(("", "value"), pt.provenance_rows(m.provenance)), ""]
    if m.provenance.other_runs:
        lines += ["Captured in another run than the one above (same GPU):", "",
                  table(("run", "commit", "captured (UTC); packages"), pt.other_run_rows(m.provenance)), ""]
    lines += ["### Definitions", "",
              "- *Reference rates measured in the same run*: "
              + "; ".join(f"`{n}` {rate:.1f} {unit} ({ms:.3f} ms)" for n, rate, unit, ms in m.ceilings) + ".",
              f"- *Runs*: recipe from {sources.cite(m.seed_document)}; every step run cold, timed and under "
              "Nsight Systems, and checked against a float64 reference. " + pt.coverage_text(m),
              f"- *Timer*: {m.timer}, after warm-up; the spread shown is the interquartile range of the repeats.",
              "- *Verdicts, the two floors, GPU busy and the limiter*: defined in the README's "
              "[What the reports say, and how](../README.md#what-the-reports-say-and-how) "
              f"(verdicts: a seeded bootstrap {int(100 * verdicts.CONFIDENCE)}% interval of the ratio of medians, "
              f"*same* within ±{verdicts.THRESHOLD:.0%}).",
              f"- *Size*: {m.size_meaning}.", "",
              "### Commands", "", f"The exact commands: {pt.commands_note(m.commands_from_job_records, m.command_commits)}.", ""]
    if m.commands:
        lines += ["```sh", *command_lines(m.commands), "```", ""]
    return lines


#: stands for the variant in a command while commands are compared (letters only: never quoted)
_VARIANT_MARK = "COOKBOOKVARIANTMARK"


def _variant_free(c: rm.Command) -> tuple[str, ...] | None:
    """The command's argv with its variant replaced by a mark (the ``--variant`` value, and the
    variant as a path component), or None when the variant is not found as such."""
    variant = c.what.split("/n")[0]
    if not variant or _VARIANT_MARK in " ".join(c.argv):
        return None
    out = []
    for w in c.argv:
        out.append(_VARIANT_MARK if w == variant else w.replace(f"/{variant}/", f"/{_VARIANT_MARK}/")
                   .replace(f"\\/{variant}\\/", f"\\/{_VARIANT_MARK}\\/"))
    return tuple(out) if any(_VARIANT_MARK in w for w in out) else None


def _shell_word(word: str) -> str:
    """``word`` for bash, with the mark as ``$v``: in double quotes where the word needs quoting."""
    if _VARIANT_MARK not in word:
        return shlex.quote(word)
    if shlex.quote(word) == word:
        return word.replace(_VARIANT_MARK, "$v")
    escaped = "".join("\\" + ch if ch in '\\"$`' else ch for ch in word)
    return '"' + escaped.replace(_VARIANT_MARK, "$v") + '"'


#: a word longer than this (ncu's --metrics list) is set in a shell variable over lines of at most this many
LONG_WORD_CHARS = 380


def _hoisted(words: Sequence[str], variables: dict[str, str], lines: list[str]) -> list[str]:
    """``words`` (already quoted for bash) with each overlong comma-separated word replaced by a
    variable, whose assignment, split at commas into lines of at most LONG_WORD_CHARS, is appended to
    ``lines`` the first time the word appears (``variables``: word -> its variable's name)."""
    out = []
    for w in words:
        if len(w) <= LONG_WORD_CHARS or "," not in w or shlex.quote(w) != w:
            out.append(w)
            continue
        if w not in variables:
            name = variables[w] = f"LIST{len(variables) + 1}"
            chunks = [""]
            for item in w.split(","):
                if chunks[-1] and len(chunks[-1]) + len(item) + 1 > LONG_WORD_CHARS:
                    chunks.append(item)
                else:
                    chunks[-1] = f"{chunks[-1]},{item}" if chunks[-1] else item
            # the first line sets the variable, each further one appends its part
            lines += [f"{name}={chunks[0]}", *(f"{name}=${name},{c}" for c in chunks[1:])]
        out.append(f'"${variables[w]}"')
    return out


def command_lines(commands: Sequence[rm.Command]) -> list[str]:
    """The commands for a shell, in order; a run of commands that differ only in the variant is one
    ``for v in ...; do ...; done`` line, and an overlong list argument a variable set before it: the
    lines run exactly those commands."""
    lines: list[str] = []
    variables: dict[str, str] = {}
    group: list[rm.Command] = []
    key = None

    def flush() -> None:
        if len(group) > 1:
            variants = " ".join(shlex.quote(c.what.split("/n")[0]) for c in group)
            words = _hoisted([_shell_word(w) for w in key], variables, lines)
            lines.append(f"for v in {variants}; do {' '.join(words)}; done")
        else:
            for c in group:
                lines.append(" ".join(_hoisted([shlex.quote(w) for w in c.argv], variables, lines)))

    for c in commands:
        free = _variant_free(c)
        if group and free is not None and free == key:
            group.append(c)
            continue
        flush()
        group, key = [c], free
        if free is None:
            flush()
            group, key = [], None
    flush()
    return lines


def sizes_not_run(m: rm.ReportModel, size: int) -> list[str]:
    """A line naming the steps that ran at other sizes but not at ``size`` (``variant_sizes`` in
    the recipe's profile.yaml: a step whose calls take too long there), so that a ladder that starts later
    is not read as the recipe's baseline."""
    here = {s.variant for s in m.ladder[size]}
    elsewhere = {}
    for other in m.sizes:
        for step in m.ladder[other]:
            if step.variant not in here:
                elsewhere.setdefault(step.variant, []).append(str(other))
    if not elsewhere:
        return []
    named = "; ".join(f"`{v}` (ran at size {', '.join(sizes)})" for v, sizes in elsewhere.items())
    return [f"*Not run at this size:* {named}. The configuration's `variant_sizes` keeps them to sizes where "
            "their calls stay short; compare them at the size they ran.", ""]


def workload_report(m: rm.ReportModel, figures: Sequence[tuple[str, str]]) -> str:
    """The page: result box and step ladder first, then findings, details per size, figures, appendix.
    ``figures``: (caption, file name) in the order shown; the first is the step-ladder chart."""
    headline = m.result.size
    lines = [f"# {m.title} (`{m.name}`)", "", *result_box(m), "",
             f"## Step ladder at size {headline}", "", *sizes_not_run(m, headline),
             ladder_table(m.ladder[headline], m.timer), "", *step_sentences(m.ladder[headline]), ""]
    if figures:
        caption, name = figures[0]
        lines += [f"![{caption}](figures/{name})", ""]
    lines += ["## Findings, by time at stake", "", *findings_lines(m), "",
              "## Details per step", ""]
    for size in reversed(m.sizes):
        lines += size_details(m, size)
    lines += ["## Figures", "", *(f"![{caption}](figures/{name})" for caption, name in figures[1:]), ""]
    lines += appendix(m)
    return "\n".join(lines)


def coldstart_section(rows: Sequence[dict]) -> list[str]:
    """The cross-recipe cold-start table, and where the first call of a cold process went."""
    if not rows:
        return []
    table_rows, split_rows = [], []
    # whether the driver-cache run was left to one step a recipe (workloads.tools.coldwarm.measured_on)
    once_a_recipe = any("measured_on" in r["runs"]["warm_driver_cache_off"] for r in rows)
    for r in rows:
        runs = r["runs"]
        cold, warm = runs["cold"]["phases"], runs["warm"]["phases"]
        off = runs["warm_driver_cache_off"]
        table_rows.append((
            f"`{r['workload']}`", f"`{r['variant']}`", r["size"],
            f"{cold['time_to_first_result_s']:.2f}", f"{warm['time_to_first_result_s']:.2f}",
            f"{cold['time_to_first_result_s'] - warm['time_to_first_result_s']:+.2f}",
            # records from before the short form skipped it for one reason: no PTX JIT
            f"not run ({off.get('short', 'no PTX JIT')})" if "skipped" in off
            else f"{off['phases']['time_to_first_result_s']:.2f}",
            "n/a" if r.get("driver_cache_after_cold") is None else f"{r['driver_cache_after_cold']['bytes'] / 1e3:.1f}",
            f"{cold['interpreter_and_suite_import_s']:.2f} / {cold['setup_s']:.2f} / {cold['first_call_s']:.2f}",
            f"{warm['interpreter_and_suite_import_s']:.2f} / {warm['setup_s']:.2f} / {warm['first_call_s']:.2f}",
            f"{runs['warm']['steady_call_ms']:.3f}",
        ))
        split = r.get("nsys_first_call")
        if split:
            first, later = split["first"], split.get("later")
            split_rows.append((
                f"`{r['workload']}`", f"`{r['variant']}`", split["size"], f"{first['wall_ns'] / 1e6:.1f}",
                f"{first['module_load_ns'] / 1e6:.2f}", f"{first['launch_api_ns'] / 1e6:.2f}",
                f"{first['allocation_ns'] / 1e6:.2f}", f"{first.get('copy_api_ns', 0) / 1e6:.2f}",
                f"{first['synchronize_ns'] / 1e6:.2f}",
                f"{first['other_ns'] / 1e6:.1f}", f"{later['wall_ns'] / 1e6:.2f}" if later else "n/a"))
    return [
        "## Cold and warm starts",
        "",
        "Time to the first result of a new process (`python -m workloads.tools.coldwarm`): caches empty "
        "(cold), filled by the cold run (warm), and filled but with the CUDA driver's compute cache off "
        "(`CUDA_CACHE_DISABLE=1`). The last runs " + ("on one step a recipe (\"measured on\" names it: the driver's "
        "cache after the cold run is alike across a recipe's steps, being mostly its framework's and libraries' "
        "PTX), and " if once_a_recipe else "") + "only where the cold run left the driver's cache non-empty: the "
        "driver writes it only when it JIT-compiles PTX (\"not run (no PTX JIT)\": the process loaded compiled binaries "
        "alone; its size after the cold run is how much the driver compiled and kept). "
        "JAX's persistent compilation cache, which JAX keeps only when given a folder, gets one beside the "
        "others. Each is split into interpreter start and suite import / setup "
        "(GPU library import, context, inputs) / first call (JIT compilation, module load, launch, run).",
        "",
        table(("recipe", "variant", "size", "cold s", "warm s", "cold − warm s", "driver cache off s",
               "driver cache after cold kB",
               "cold: start / setup / first call s", "warm: start / setup / first call s",
               "steady call ms"), table_rows),
        "",
        "Where the first call of a cold process went, from its nsys capture (CPU time inside the first "
        "`compute` range, by CUDA API; \"other\" is time outside those calls: Python and, in a cold "
        "process, JIT compilation, which CUDA tracing does not show as API time):",
        "",
        table(("recipe", "variant", "size", "first call ms", "module load ms", "launch API ms",
               "allocation ms", "copy API ms", "synchronize ms", "other (compile, Python) ms", "a later call ms"),
              split_rows),
        "",
    ]


def index_report(models: Sequence[rm.ReportModel], ceilings_record: dict, preflight: dict,
                 coldstart_rows: Sequence[dict] = (), extra_pages: Sequence[tuple[str, str]] = (),
                 later_runs: Sequence[str] = (), see_also: Sequence[tuple[str, str]] = ()) -> str:
    """``models``: each recipe's report model; ``later_runs``: recipes captured in a later run than the
    rest, whose floors use that run's ceilings (in their reports); ``see_also``: (GPU, link) of the other
    references' indexes."""
    ceilings = ceilings_record["ceilings"]
    rows = []
    for m in models:
        r = m.result
        # a reference without the recipe's first step compares with the first step it has, and says so
        first = BY_NAME[m.name].variants[0] if m.name in BY_NAME else r.baseline.variant
        against = "" if r.baseline.variant == first else f" (vs `{r.baseline.variant}`: `{first}` not in this run)"
        rows.append((f"[{m.title}]({m.name}.md)", len(m.ladder[r.size]), r.size, f"`{r.best.variant}`",
                     f"{r.best.median_ms:.4f}",
                     ((r.best_vs_baseline.text or f"{r.best_vs_baseline.label} {pt.ratio_text(r.best_vs_baseline.speedup)}")
                      + against) if r.best_vs_baseline else "baseline is best" + against,
                     f"{pt.ratio_text(r.best.time_over_floor)} ({r.best.floor_resource})",
                     f"{r.best.limiter.what}"
                     + (f", {pt.ratio_text(r.best.time_over_limiter_floor)} its floor"
                        if r.best.time_over_limiter_floor is not None else "")
                     + f" ({r.best.limiter.source})"))
    own = list(later_runs)
    skipped = [(w, why) for w, why in sorted((preflight.get("recipes_skipped") or {}).items()) if why]
    lines = [
        "# GPU kernel-optimization cookbook: results",
        "",
        "Each recipe goes from a baseline to its floor in steps; each step is timed (CUDA events, or a host "
        "timer where the framework has none: JAX; warm-up, repeats), traced (Nsight Systems) and profiled "
        "(Nsight Compute) from a cold start.",
        "",
        table(("recipe", "steps", "largest size", "fastest step", "median ms", "verdict vs baseline",
               "time / minimum-work floor (resource)", "limited by (measured), time / its floor"), rows,
              MAX_CELL_CHARS),
        "",
    ]
    if skipped:
        lines += ["Skipped on this host:", ""] + [f"- `{w}`: {why}" for w, why in skipped] + [""]
    if (preflight.get("counters") or {}).get("readable") is False:
        lines += [f"**Without performance counters** ({preflight['counters']['reason']}): no step ran under Nsight "
                  "Compute; each report's limiter goes only as far as the trace and the declared work reach "
                  "(\"evidence-limited\"), and lists what needs counters.", ""]
    if see_also:
        lines += ["The same recipes on another GPU: " + ", ".join(f"[{gpu}]({link})" for gpu, link in see_also)
                  + ". Every number on a page comes from the GPU its provenance names.", ""]
    if extra_pages:
        lines += ["Also:", ""] + [f"- [{title}]({page})" for title, page in extra_pages] + [""]
    lines += coldstart_section(coldstart_rows)
    lines += [
        "## Ceilings measured in the same run",
        "",
        ceilings_table(ceilings),
        "",
    ]
    if own:
        lines += [
            "Captured in a later run, with the ceilings measured there (in their reports): "
            + ", ".join(f"`{w}`" for w in sorted(own)) + ".",
            "",
        ]
    lines += [
        "## Provenance",
        "",
        provenance_table(preflight["provenance"], preflight.get("tools")),
        "",
    ]
    return "\n".join(lines)


def with_run_label(md: str, label: str | None) -> str:
    """``md`` with, under its title, the line that says which run it comes from when that run is not
    the full suite (``run_label`` in the configuration: profiles/lab sets "lab")."""
    if not label:
        return md
    title, _, rest = md.partition("\n")
    note = (f"> **This page comes from the `{label}` run** (`run_label: {label}`, e.g. "
            f"`--workflow-profile profiles/{label}`): its sizes, samples and profiled kernels are that profile's, "
            "chosen to finish quickly, not the full suite's; `snakemake profile_all` with the default "
            "configuration gives the full findings.")
    return f"{title}\n\n{note}\n{rest}"
