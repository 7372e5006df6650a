"""Markdown for the reports, from run summaries. Deterministic: the same inputs give the same bytes."""
from __future__ import annotations

from typing import Sequence

from analysis import limiter, no_counters, roofline, verdicts
from analysis.figures import steady_breakdown_ms
from analysis.floors import at_rate, floor, time_vs_floor

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


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    def cell(x: object) -> str:
        return str(x).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


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
    rows += [(f"package {k}", v) for k, v in sorted((prov.get("packages") or {}).items())]
    rows += [("git commit", prov.get("git_commit")), ("captured (UTC)", prov.get("date_utc"))]
    rows += list((extra or {}).items())
    return table(("", "value"), rows)


def ceilings_table(ceilings: dict) -> str:
    rows = []
    for name, c in sorted(ceilings.items()):
        rate = f"{c['gb_per_s']:.1f} GB/s" if "gb_per_s" in c else f"{c['tflop_per_s']:.1f} TFLOP/s"
        rows.append((name, rate, f"{c['median_ms']:.3f}"))
    return table(("measurement", "rate", "median ms"), rows)


def _verdict_cell(v: verdicts.Verdict) -> str:
    return f"**{v.label}** {v.speedup:.2f}×"


def _steady(calls: list[dict]) -> list[dict]:
    return calls[1:] if len(calls) > 1 else calls


def variant_table(runs: Sequence[dict], ceilings: dict, counters: bool = True) -> tuple[str, list[str]]:
    """The per-size table and the verdicts' reasons, as footnotes."""
    base = runs[0]
    rows, notes = [], []
    pool = limiter.pool_of(runs)
    for i, r in enumerate(runs):
        t = r["timing"]
        calls = r["nsys"]["calls"]
        k_per_call = sorted({c["kernels"] for c in _steady(calls)})
        if i == 0:
            vs_base = vs_prev = "—"
        else:
            vb = verdicts.compare(base["times_ms"], r["times_ms"])
            vp = verdicts.compare(runs[i - 1]["times_ms"], r["times_ms"])
            vs_base, vs_prev = _verdict_cell(vb), _verdict_cell(vp)
            notes.append(f"- `{r['variant']}` vs `{base['variant']}`: {vb.label} — {vb.reason}")
            if i > 1:
                notes.append(f"- `{r['variant']}` vs `{runs[i - 1]['variant']}`: {vp.label} — {vp.reason}")
        fl = floor(r["work"], ceilings)
        b = fl.binding
        rows.append((
            f"`{r['variant']}`",
            f"{t['median_ms']:.4f} ({t['iqr_ms']:.4f})",
            vs_base, vs_prev,
            f"{fl.ms:.4f} ({b.resource})",
            time_vs_floor(t["median_ms"], fl),
            f"{fl.achieved(t['median_ms']):.0f} {b.unit} ({fl.ms / t['median_ms']:.0%})",
            (limiter.step_limiter(r, pool) if counters else no_counters.step_limiter(r, ceilings)).label(),
            "/".join(str(k) for k in k_per_call),
            f"{calls[0]['allocation_calls']} / {sum(c['allocation_calls'] for c in _steady(calls))}",
            f"{_ms(r.get('host_call_ms'))} / {_ms(r.get('host_synced_ms'))}",
            f"{r['relative_error']:.1e}",
        ))
    header = ("variant", "median ms (IQR)", "vs baseline", "vs previous step", "floor ms (resource)",
              "time / floor", "effective rate on the minimum work (of the measured rate)",
              "limited by (measured)" if counters else "limited by (evidence without counters)",
              "kernels per call",
              "alloc calls: first / later", "host timer ms: returns / synced", "rel. error")
    return table(header, rows), notes


def breakdown_table(runs: Sequence[dict]) -> str:
    rows = []
    for r in runs:
        b = steady_breakdown_ms(r)
        steady = _steady(r["nsys"]["calls"])
        n = len(steady)
        h2d = sum(c.get("gpu_memcpy_h2d_ns", 0) for c in steady) / n / 1e6
        d2h = sum(c.get("gpu_memcpy_d2h_ns", 0) for c in steady) / n / 1e6
        first = r["nsys"]["calls"][0]
        rows.append((f"`{r['variant']}`", f"{b['kernel']:.4f}", f"{h2d:.4f}", f"{d2h:.4f}",
                     f"{max(b['memcpy'] - h2d - d2h, 0.0):.4f}", f"{b['memset']:.4f}", f"{b['idle']:.4f}",
                     f"{first['wall_ns'] / 1e6:.1f}", f"{(first['wall_ns'] - first['gpu_busy_ns']) / 1e6:.1f}"))
    return table(("variant", "kernels ms", "H2D copies ms", "D2H copies ms", "other copies ms", "memset ms",
                  "GPU idle ms", "first call ms (cold)", "first call: GPU idle ms"), rows)


def seed_split_table(run: dict, seed_split: Sequence[tuple[str, float]], seed_device: str, gpu: str) -> str:
    """The baseline's time split (share of GPU busy time, steady calls) beside the seed's."""
    steady = _steady(run["nsys"]["calls"])
    parts = {
        "H2D": sum(c.get("gpu_memcpy_h2d_ns", 0) for c in steady),
        "kernel": sum(c["gpu_kernel_ns"] for c in steady),
        "D2H": sum(c.get("gpu_memcpy_d2h_ns", 0) for c in steady),
    }
    total = sum(parts.values()) or 1
    names = [name for name, _ in seed_split]
    return table(["measured on"] + [f"{n} %" for n in names], [
        [seed_device] + [f"{pct:.1f}" for _, pct in seed_split],
        [f"{gpu}, `{run['variant']}`"] + [f"{100 * parts[n] / total:.1f}" for n in names],
    ])


def copy_throughput_table(runs: Sequence[dict], ceilings: dict) -> str | None:
    """Every memcpy of each run by direction and host memory kind (nsys), against the pinned
    copy ceilings measured in the same run."""
    pinned = {"Host-to-Device": ceilings.get("h2d_pinned"), "Device-to-Host": ceilings.get("d2h_pinned")}
    rows = []
    for r in runs:
        for c in r["nsys"].get("copy_throughput") or []:
            ceiling = pinned.get(c["direction"])
            rate = c["gb_per_s"]
            rows.append((f"`{r['variant']}`", c["direction"], c["host_memory"] or "—", c["count"],
                         f"{c['bytes'] / 1e6:,.1f}", f"{c['total_ns'] / 1e6:.3f}",
                         f"{rate:.1f}" if rate is not None else "n/a", f"{c['best_copy_gb_per_s']:.1f}",
                         f"{rate / ceiling['gb_per_s']:.0%}" if ceiling and rate is not None else "—"))
    if not rows:
        return None
    return table(("variant", "direction", "host memory", "copies", "MB", "ms", "GB/s", "best copy GB/s",
                  "of the measured pinned rate"), rows)


def findings_list(runs: Sequence[dict]) -> list[str]:
    """Each variant's findings (analysis.findings): what is flagged, the evidence, the fix."""
    lines = []
    for r in runs:
        found = r.get("findings") or []
        if not found:
            lines.append(f"- `{r['variant']}`: no rule flagged it.")
            continue
        for f in found:
            lines.append(f"- `{r['variant']}` — **{f['title']}** ({f['severity']}, `{f['id']}`): {f['message']} "
                         f"*Fix:* {f['fix']}")
    return lines


def kernel_list(runs: Sequence[dict]) -> str:
    rows = []
    for r in runs:
        n_calls = len(r["nsys"]["calls"])
        for k in r["nsys"]["compute_kernels"]:
            rows.append((f"`{r['variant']}`", f"`{k['name']}`", k["count"], f"{k['count'] / n_calls:g}",
                         f"{k['avg_ns'] / 1e3:.1f}"))
    return table(("variant", "kernel", "launches", "per call", "avg µs"), rows)


def ncu_section(runs: Sequence[dict]) -> list[str]:
    rows = []
    for r in runs:
        for launch in r["ncu"] or []:
            m = launch["metrics"]
            cells = [f"`{r['variant']}`", launch["id"], f"`{launch['kernel_name']}`"]
            for key, _, fmt in NCU_COLUMNS:
                cells.append(fmt(m[key]) if m.get(key) is not None else "n/a")
            cells.append(f"{launch['dram_gb_per_s']:.0f}" if launch.get("dram_gb_per_s") else "n/a")
            lim = limiter.classify(m)
            cells.append(lim.label() if lim else "n/a")
            rows.append(cells)
    if not rows:
        return []
    out = [table(["variant", "ID", "kernel"] + [c[1] for c in NCU_COLUMNS] + ["DRAM GB/s", "limited by (measured)"],
                 rows), ""]
    raw = [f"`{r['variant']}`" for r in runs if r.get("ncu") and r.get("ncu_source") == "ncu-raw.csv"]
    if raw:
        out += [f"{', '.join(raw)}: read from ncu's raw page (`ncu-raw.csv`, kept where the report file was not): "
                "the same metrics, without ncu's rule results.", ""]
    return out + findings_section(runs)


def limiter_lines(runs: Sequence[dict]) -> list[str]:
    """What limits each step, measured (analysis.limiter), with the next move it points to: one
    bullet per step, ending with one sentence."""
    pool = limiter.pool_of(runs)
    lines = []
    for r in runs:
        step = limiter.step_limiter(r, pool)
        borrowed = [v for v in step.ncu_variants if v != r["variant"]]
        source = f" (ncu profile of {', '.join(f'`{v}`' for v in borrowed)}, the same kernel)" if borrowed else ""
        lines.append(f"- `{r['variant']}` — **{step.label()}**{source}: {step.detail}. *Next:* {step.next_move()}")
    return lines


def _mb(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1e6:,.1f}"


def work_check_table(runs: Sequence[dict]) -> str | None:
    """Declared work (Work: the minimum bytes and FLOPs) beside what ncu measured per steady call,
    and the effective rate (declared bytes over the median) beside the DRAM throughput the kernels
    achieved (ncu bytes over ncu kernel time)."""
    pool = limiter.pool_of(runs)
    rows = []
    for r in runs:
        check = limiter.work_check(r, pool)
        if check is None:
            continue
        ge = "" if check.complete() else "≥ "
        flops = ", ".join(f"{prec} {v:.3g}" for prec, v in sorted(check.measured_flops.items())) or "none counted"
        br, fr = check.bytes_ratio(), check.flops_ratio()
        dram = check.dram_gb_per_s()
        rows.append((f"`{r['variant']}`", f"{check.covered_share:.0%}", _mb(check.declared_bytes),
                     ge + _mb(check.measured_dram_bytes), f"{br:.2f}×" if br is not None else "n/a",
                     f"{check.declared_bytes / r['timing']['median_ms'] / 1e6:.0f}",
                     f"{dram:.0f}" if dram is not None else "n/a",
                     f"{check.declared_flops:.3g} {check.declared_kind}", ge + flops,
                     f"{fr:.2f}×" if fr is not None else "n/a", "; ".join(check.mismatches()) or "—"))
    if not rows:
        return None
    return table(("variant", "kernel time profiled", "declared MB", "DRAM MB (ncu)", "measured / declared",
                  "effective GB/s (declared bytes / median)", "DRAM GB/s achieved (ncu bytes / kernel time)",
                  "declared FLOPs", "executed FLOPs (ncu)", "measured / declared",
                  f"flag (> {limiter.MISMATCH_FACTOR}× apart)"), rows)


def ncu_coverage_line(by_size: dict[int, list[dict]]) -> str:
    """Which variants ran under Nsight Compute, at which sizes, and what stands for the others."""
    parts = []
    for size in sorted(by_size):
        runs = by_size[size]
        profiled = [r for r in runs if r.get("ncu")]
        if not profiled:
            continue
        names = ", ".join(f"`{r['variant']}`" + (" (raw page only)" if r.get("ncu_source") == "ncu-raw.csv" else "")
                          for r in profiled)
        by_kernel = limiter.launches_by_kernel(limiter.pool_of(runs))
        others = []
        for r in runs:
            if r.get("ncu"):
                continue
            src = list(dict.fromkeys(v for k in limiter.step_kernels(r, by_kernel) for v, _ in k["launches"][:1]))
            others.append(f"`{r['variant']}`" + (f" (runs the kernels of {', '.join(f'`{v}`' for v in src)})"
                                                 if src else " (its kernels not profiled)"))
        parts.append(f"at size {size}: {names}" + (f"; not profiled: {', '.join(others)}" if others else ""))
    unprofiled = [str(size) for size in sorted(by_size) if not any(r.get("ncu") for r in by_size[size])]
    if unprofiled:
        parts.append(f"no variant at size {', '.join(unprofiled)} (the configuration profiles the sizes named above)")
    if not any(r.get("ncu") for runs in by_size.values() for r in runs):
        return "No variant ran under Nsight Compute."
    return ("Nsight Compute (`--set full`) profiled " + "; ".join(parts) + ". Each profiled variant's launches are "
            "limited to those the pipeline's configuration names (`rules/config.yaml`): a variant that runs the same "
            "kernels as a profiled one is not profiled again, and its limiter comes from that profile (matched by "
            "kernel name and launch shape).")


def findings_section(runs: Sequence[dict]) -> list[str]:
    """ncu's rule findings for each variant's first profiled launch: a rule x variant table of
    ncu's own estimated speedups, then each rule's message once (from the variant it flags most)."""
    variants = [r for r in runs if r["ncu"] and r["ncu"][0]["findings"]]
    by_rule: dict[str, dict[str, dict]] = {}
    for r in variants:
        lim = limiter.classify(r["ncu"][0]["metrics"])
        for f in r["ncu"][0]["findings"]:
            if limiter.rule_consistent(f["rule"], lim):
                by_rule.setdefault(f["rule"], {})[r["variant"]] = f
    if not by_rule:
        return []

    def est(f: dict | None) -> str:
        if f is None:
            return "—"
        return f"{f['estimated_speedup_pct']:.0f}%" if f.get("estimated_speedup_pct") is not None else "flagged"

    rows = [[rule] + [est(fs.get(r["variant"])) for r in variants] for rule, fs in by_rule.items()]
    lines = ["ncu's rule findings on each variant's first profiled launch, with ncu's estimated speedup "
             "(\"—\": not flagged or not consistent with the launch's measured limiter; which rules speak to which "
             "limiter: `analysis/limiter.py`):", "",
             table(["rule"] + [f"`{r['variant']}`" for r in variants], rows), "",
             "What each rule says (quoted from the variant it flags most):", ""]
    for rule, fs in by_rule.items():
        worst_variant, worst = max(fs.items(), key=lambda kv: kv[1].get("estimated_speedup_pct") or 0.0)
        lines.append(f"- **{rule}** (`{worst_variant}`): {worst['message']}")
    return lines


#: how a framework's variants are timed, where not with CUDA events (workloads/<framework>_backend.py)
_TIMER = {"jax": "a host timer around `block_until_ready()` (JAX has no CUDA-event API)"}


def _other_runs_note(by_size: dict[int, list[dict]], shown: dict) -> list[str]:
    """The runs whose captures come from another run of the pipeline than the one shown above
    (another commit or day): named, so that no number passes for what it is not."""
    key = (shown.get("git_commit"), (shown.get("date_utc") or "")[:10])
    other = [r for runs in by_size.values() for r in runs
             if (r["provenance"].get("git_commit"), (r["provenance"].get("date_utc") or "")[:10]) != key]
    if not other:
        return []
    rows = [(f"`{r['variant']}` size {r['size']}", r["provenance"].get("git_commit"), r["provenance"].get("date_utc"))
            for r in other]
    return ["Captured in another run of the pipeline than the one above (same GPU), listed with its commit and "
            "time:", "", table(("run", "commit", "captured (UTC)"), rows), ""]


def workload_report(recipe, by_size: dict[int, list[dict]], ceilings_record: dict,
                    figure_names: dict[str, str]) -> str:
    """``recipe``: the workload's Recipe (title, seed, variants, the seed's own split)."""
    ceilings = ceilings_record["ceilings"]
    first_runs = next(iter(by_size.values()))
    any_run = first_runs[0]
    gpu = _gpu_name(any_run["provenance"])
    # no run under Nsight Compute: the evidence without counters stands in (analysis.no_counters)
    counters = no_counters.recipe_has_counters(by_size)
    lines = [
        f"# {recipe.title} (`{recipe.name}`)",
        "",
        f"Recipe from seed document {recipe.seed_document}. Every variant was run cold (fresh JIT and "
        f"driver caches), timed with {_TIMER.get(recipe.framework, 'CUDA events')} after warm-up and traced under "
        "Nsight Systems. Every result was checked against a float64 reference.",
        "",
        ncu_coverage_line(by_size) if counters else no_counters.coverage_line(),
        "",
        "## Provenance",
        "",
        provenance_table(any_run["provenance"]),
        "",
    ]
    lines += _other_runs_note(by_size, any_run["provenance"])
    lines += [
        "## Reference rates measured in the same run",
        "",
        ceilings_table(ceilings),
        "",
        "The floor of a variant is the time its declared (minimum) work takes at these measured reference rates: "
        "bytes through device memory over the device-to-device copy rate, bytes across the host link over the "
        "pinned copy rate of that direction, FLOPs over the rate of the arithmetic they run on (FP64 or FP32 FMA, "
        "16-bit tensor-core matmul; integer work has no arithmetic rate). The largest sets the floor; the table "
        "names it. The rates are measurements, not hardware ceilings: a step within 5% of its floor, or a little "
        "under it, runs at that rate. The effective rate is the declared minimum work over the median time; what "
        "the kernels really moved and executed, and what limits each step, come from Nsight Compute and Nsight "
        "Systems (\"limited by (measured)\", `analysis/limiter.py`). \"Host timer\" is what `time.perf_counter()` "
        "around the call saw: when the call returned (launches are asynchronous) and after a synchronize.",
        "",
        "## Variants",
        "",
        table(("variant", "what this step changes"), [(f"`{r['variant']}`", r["summary"]) for r in first_runs]),
        "",
    ]
    for size in sorted(by_size):
        runs = by_size[size]
        tbl, notes = variant_table(runs, ceilings, counters)
        lines += [f"## size {size}", "", tbl, "", "Verdicts (from the timed repeats):", "", *notes, ""]
        if counters:
            lines += ["What limits each step, measured (nsys: copy and idle shares of a steady call; else its kernels' "
                      "ncu limiters weighted by their nsys time), and the next move it points to:", "",
                      *limiter_lines(runs), ""]
        else:
            lines += ["What limits each step, as far as the evidence without counters reaches (nsys: copy and idle "
                      "shares of a steady call; else the declared work's effective rate against the measured "
                      "reference rates), and the next move it points to:", "",
                      *no_counters.limiter_lines(runs, ceilings), ""]
        checks = work_check_table(runs)
        if checks:
            lines += ["Declared work beside measured, per steady call (ncu: DRAM bytes and executed FLOPs of the "
                      "profiled kernels times their launches per call; \"≥\": not every kernel was profiled):", "",
                      checks, ""]
        lines += ["Where each call's time went on the GPU (nsys; steady = mean of calls after the first; the "
                  "first call of a cold process includes JIT compilation and module loading):", "",
                  breakdown_table(runs), ""]
        if recipe.seed_split:
            lines += [f"The baseline's split of GPU busy time beside the seed's ({recipe.seed_split_device}):",
                      "", seed_split_table(runs[0], recipe.seed_split, recipe.seed_split_device, gpu), ""]
        copies = copy_throughput_table(runs, ceilings)
        if copies:
            lines += ["Copy throughput, every memcpy of the run by direction and host memory (nsys; GB/s = bytes "
                      "over the copies' summed duration), against the pinned copy rate of that direction measured in the same run:", "",
                      copies, ""]
        lines += ["Kernels launched inside the compute ranges (nsys):", "", kernel_list(runs), ""]
        if not counters:
            lines += no_counters.size_section(runs, ceilings, size)
        ncu_lines = ncu_section(runs)
        if ncu_lines:
            lines += [f"### Nsight Compute, size {size}", "", *ncu_lines, ""]
        lines += [f"### Findings, size {size}", "",
                  "What the captures show is worth fixing, rule by rule (thresholds and their reasons in "
                  "`analysis/findings.py`), with the numbers they rest on:", "", *findings_list(runs), ""]
    lines += ["## Figures", ""]
    lines += roofline.markdown_lines(by_size, ceilings)
    for caption, name in figure_names.items():
        lines += [f"![{caption}](figures/{name})", "", f"*{caption}*", ""]
    last = first_runs[-1]
    w, v, s = recipe.name, last["variant"], last["size"]
    nvtx = f"cookbook@{w}\\/{v}\\/compute/"
    lines += [
        "## Reproduce",
        "",
        "```sh",
        f"python -m workloads.{w} --variant {v} --size {s} --mode timed",
        f"nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw none -o {w} python -m workloads.{w} --variant {v} --size {s}",
        f"ncu --set full --nvtx --nvtx-include '{nvtx}' -c 1 -o {w} python -m workloads.{w} --variant {v} --size {s}",
        "```",
        "",
    ]
    return "\n".join(lines)


def coldstart_section(rows: Sequence[dict]) -> list[str]:
    """The cross-recipe cold-start table, and where the first call of a cold process went."""
    if not rows:
        return []
    table_rows, split_rows = [], []
    for r in rows:
        runs = r["runs"]
        cold, warm, off = (runs[k]["phases"] for k in ("cold", "warm", "warm_driver_cache_off"))
        table_rows.append((
            f"`{r['workload']}`", f"`{r['variant']}`", r["size"],
            f"{cold['time_to_first_result_s']:.2f}", f"{warm['time_to_first_result_s']:.2f}",
            f"{cold['time_to_first_result_s'] - warm['time_to_first_result_s']:+.2f}",
            f"{off['time_to_first_result_s']:.2f}",
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
        "(`CUDA_CACHE_DISABLE=1`). Each is split into interpreter start and suite import / setup (GPU "
        "library import, context, inputs) / first call (JIT compilation, module load, launch, run).",
        "",
        table(("recipe", "variant", "size", "cold s", "warm s", "cold − warm s", "driver cache off s",
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


def index_report(workload_runs: dict[str, dict[int, list[dict]]], titles: dict[str, str], ceilings_record: dict,
                 preflight: dict, coldstart_rows: Sequence[dict] = (), extra_pages: Sequence[tuple[str, str]] = (),
                 workload_ceilings: dict[str, dict] | None = None) -> str:
    """``workload_ceilings``: for workloads captured in a later run than the rest, that run's ceilings."""
    ceilings = ceilings_record["ceilings"]
    own = workload_ceilings or {}
    rows = []
    for w, by_size in workload_runs.items():
        size = max(by_size)
        runs = by_size[size]
        best = min(runs, key=lambda r: r["timing"]["median_ms"])
        v = verdicts.compare(runs[0]["times_ms"], best["times_ms"]) if best is not runs[0] else None
        fl = floor(best["work"], own[w]["ceilings"] if w in own else ceilings)
        step = (limiter.step_limiter(best, limiter.pool_of(runs)) if no_counters.recipe_has_counters(by_size)
                else no_counters.step_limiter(best, own[w]["ceilings"] if w in own else ceilings))
        rows.append((f"[{titles[w]}]({w}.md)", len(runs), size, f"`{best['variant']}`",
                     f"{best['timing']['median_ms']:.4f}",
                     f"{v.label} {v.speedup:.2f}×" if v else "baseline is best",
                     f"{best['timing']['median_ms'] / fl.ms:.2f}× ({fl.binding.resource})"
                     + (f"; {note}" if (note := at_rate(best["timing"]["median_ms"], fl)) else ""),
                     step.label()))
    skipped = [(w, why) for w, why in sorted((preflight.get("recipes_skipped") or {}).items()) if why]
    lines = [
        "# GPU kernel-optimization cookbook: results",
        "",
        "Each recipe goes from a baseline to its floor in steps; each step is timed (CUDA events, warm-up, "
        "repeats) and traced (Nsight Systems) from a cold start, and the steps that run distinct kernels are "
        "profiled (Nsight Compute; each recipe's report says which).",
        "",
        table(("recipe", "variants", "largest size", "fastest variant", "median ms", "verdict vs baseline",
               "time / floor (resource)", "limited by (measured)"), rows),
        "",
        "\"limited by (measured)\" is what limits the fastest variant's steady call, from its captures "
        "(`analysis/limiter.py`): the host link or the host when copies or GPU idle time fill most of the call, "
        "else the memory level or SM pipe its kernels run at, or latency/occupancy with its cause. The floor is "
        "the declared minimum work at the rates measured in the same run.",
        "",
    ]
    if skipped:
        lines += ["Skipped on this host:", ""] + [f"- `{w}`: {why}" for w, why in skipped] + [""]
    if (preflight.get("counters") or {}).get("readable") is False:
        lines += [f"**Without performance counters** ({preflight['counters']['reason']}): no step ran under Nsight "
                  "Compute; each report's limiter goes only as far as the trace and the declared work reach "
                  "(\"evidence-limited\"), and lists what needs counters.", ""]
    if extra_pages:
        lines += ["Also:", ""] + [f"- [{title}]({page})" for title, page in extra_pages] + [""]
    lines += coldstart_section(coldstart_rows)
    lines += [
        "## Reference rates measured in the same run",
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
