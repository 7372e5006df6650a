# Markdown reports and figures. Live: reports/ from this run's captures. Rebuilt: the same
# reports from the committed reference captures, checked against the committed reports/*.md.


def _analyses(capture_set, workload):
    if capture_set == "live":
        pairs = runs(workload)
    else:
        pairs = REFERENCE_RUNS[workload]
    return [f"{WORK}/analysis/{capture_set}/{workload}/{v}/n{s}.json" for v, s in pairs]


# Runs held in the reference folder, discovered from its files (config may have moved on).
_ref = glob_wildcards(f"{REF_DIR}/{{workload}}/{{variant}}/n{{size}}/timing.json")
REFERENCE_RUNS = {}
for _w, _v, _s in zip(_ref.workload, _ref.variant, _ref.size):
    REFERENCE_RUNS.setdefault(_w, []).append((_v, int(_s)))
REFERENCE_WORKLOADS = [w for w in RECIPES if w in REFERENCE_RUNS]

FIGURES = ["gpu_time", "timing"]


def _live_extras(wc):
    # nsys' and ncu's own summaries are ground truth kept beside the captures: produce them too
    stats = [f"{run_dir(CAPTURES, wc.workload, v, s)}/nsys-stats" for v, s in runs(wc.workload)]
    return stats


rule report:
    input:
        analyses=lambda wc: _analyses("live", wc.workload),
        ceilings=f"{CAPTURES}/ceilings.json",
        extras=_live_extras,
    output:
        md="reports/{workload}.md",
        figures=expand("reports/figures/{{workload}}_{figure}.png", figure=FIGURES),
    log:
        f"{WORK}/logs/report/{{workload}}.log",
    shell:
        "{PYTHON} -m analysis report --workload {wildcards.workload} --ceilings {input.ceilings}"
        " --out-dir reports {input.analyses} > {log} 2>&1"


rule report_rebuilt:
    input:
        analyses=lambda wc: _analyses("reference", wc.workload),
        ceilings=f"{REF_DIR}/ceilings.json",
    output:
        md=f"{WORK}/rebuilt/{{workload}}.md",
        figures=expand(f"{WORK}/rebuilt/figures/{{{{workload}}}}_{{figure}}.png", figure=FIGURES),
    log:
        f"{WORK}/logs/report_rebuilt/{{workload}}.log",
    shell:
        "{PYTHON} -m analysis report --workload {wildcards.workload} --ceilings {input.ceilings}"
        " --out-dir {WORK}/rebuilt {input.analyses} > {log} 2>&1"


rule index:
    input:
        reports=expand("reports/{workload}.md", workload=RUNNABLE_WORKLOADS),
        analyses=[a for w in RUNNABLE_WORKLOADS for a in _analyses("live", w)],
        ceilings=f"{CAPTURES}/ceilings.json",
        preflight=f"{CAPTURES}/preflight.json",
    output:
        "reports/index.md",
    log:
        f"{WORK}/logs/report/index.log",
    shell:
        "{PYTHON} -m analysis index --ceilings {input.ceilings} --preflight {input.preflight}"
        " --output {output} {input.analyses} > {log} 2>&1"


rule index_rebuilt:
    input:
        reports=expand(f"{WORK}/rebuilt/{{workload}}.md", workload=REFERENCE_WORKLOADS),
        analyses=[a for w in REFERENCE_WORKLOADS for a in _analyses("reference", w)],
        ceilings=f"{REF_DIR}/ceilings.json",
        preflight=f"{REF_DIR}/preflight.json",
    output:
        f"{WORK}/rebuilt/index.md",
    log:
        f"{WORK}/logs/report_rebuilt/index.log",
    shell:
        "{PYTHON} -m analysis index --ceilings {input.ceilings} --preflight {input.preflight}"
        " --output {output} {input.analyses} > {log} 2>&1"


rule check_rebuild:
    input:
        rules.index_rebuilt.output,
        expand(f"{WORK}/rebuilt/{{workload}}.md", workload=REFERENCE_WORKLOADS),
    output:
        touch(f"{WORK}/rebuilt/CHECKED"),
    log:
        f"{WORK}/logs/report_rebuilt/check.log",
    shell:
        "{PYTHON} -m analysis check-rebuild --rebuilt {WORK}/rebuilt --committed reports 2>&1 | tee {log}"
