# Markdown reports and figures: one rule per product for both capture sets, {set} = "live" (this
# run's captures) or "reference" (the committed ones, reports/reference/). Both write under
# <work_dir>/reports/<set>/; `publish` copies live products into reports/, and check_rebuild compares
# the reference ones with the committed reports/*.md.

# the figures `python -m analysis report` draws for each workload: figures/<workload>_<name>.png
REPORT_FIGURES = ["ladder", "busy", "timeline"]
# drawn only where ncu profiled a floating-point kernel (analysis.report.roofline: an empty chart is not
# written), so no declared output: `publish` copies it with the page, or removes a stale copy
OPTIONAL_FIGURES = ["roofline"]
REPORTS = f"{WORK}/reports"


wildcard_constraints:
    set="live|reference",


rule report:
    """One workload's page; its recipe's sections read the inputs they declare (analysis/report/sections)."""
    input:
        unpack(report_inputs),
    output:
        md=f"{REPORTS}/{{set}}/{{workload}}.md",
        figures=expand(f"{REPORTS}/{{{{set}}}}/figures/{{{{workload}}}}_{{figure}}.png", figure=REPORT_FIGURES),
    log:
        f"{WORK}/logs/report/{{set}}/{{workload}}.log",
    params:
        python=PYTHON,
        out_dir=lambda wc, output: os.path.dirname(output.md),
        captures=lambda wc: f"{capture_root(wc.set)}/{wc.workload}",
        gpu_jobs=gpu_jobs_option,
        run=run_options,
        l2=lambda wc, input: " ".join(f"--l2-run {shlex.quote(f)}" for f in input.l2),
    conda:
        CONDA_ENV
    shell:
        "{params.python:q} -m analysis report --workload {wildcards.workload}"
        " --ceilings {input.ceilings:q} --captures {params.captures:q} --out-dir {params.out_dir:q}"
        " --preflight {input.preflight:q} {params.gpu_jobs} {params.run} {params.l2}"
        " {input.analyses:q} > {log:q} 2>&1"


rule index:
    input:
        unpack(index_inputs),
    output:
        f"{REPORTS}/{{set}}/index.md",
    log:
        f"{WORK}/logs/report/{{set}}/index.log",
    params:
        python=PYTHON,
        coldstart=lambda wc, input: f"--coldstart {shlex.quote(str(input.coldstart))}" if input.coldstart else "",
        # reference workloads merged in from a partial run keep the ceilings of their own run
        own_ceilings=lambda wc: "" if wc.set == "live" else " ".join(
            f"--workload-ceilings {w}={reference_ceilings(w)}"
            for w in REFERENCE_WORKLOADS
            if reference_ceilings(w) != f"{REF_DIR}/ceilings.json"
        ),
        multiprocess=lambda wc, input: "--multiprocess" if input.multiprocess else "",
        label=lambda wc: run_options(wc, sections=False),
        # the reference's index links the pages of the other GPUs' references
        see_also=lambda wc: "" if wc.set == "live" else " ".join(
            f"--see-also {shlex.quote('='.join((s['label'], s['link'])))}" for s in config["reference"].get("see_also") or []),
    conda:
        CONDA_ENV
    shell:
        "{params.python:q} -m analysis index --ceilings {input.ceilings:q} --preflight {input.preflight:q}"
        " {params.own_ceilings} {params.coldstart} {params.multiprocess} {params.label} {params.see_also}"
        " --output {output:q}"
        " {input.analyses:q}"
        " > {log:q} 2>&1"


rule gpu_jobs:
    """Which GPU job ran on which GPU, and when: live after every GPU job of the run; reference from
    the committed records of a two-GPU run."""
    input:
        unpack(gpu_jobs_inputs),
    output:
        md=f"{REPORTS}/{{set}}/gpu_jobs.md",
        figure=f"{REPORTS}/{{set}}/figures/gpu_jobs.png",
    log:
        f"{WORK}/logs/report/{{set}}/gpu_jobs.log",
    params:
        python=PYTHON,
        records=lambda wc: f"{WORK}/gpu-jobs" if wc.set == "live" else REF_GPU_JOBS[0],
    conda:
        CONDA_ENV
    shell:
        "{params.python:q} -m analysis gpu-jobs --records {params.records:q} --output {output.md:q}"
        " --figure {output.figure:q} > {log:q} 2>&1"


rule publish:
    """Copy one live product (page or figure) into reports/."""
    input:
        published_source,
    output:
        "reports/{product}",
    wildcard_constraints:
        product=r"[A-Za-z0-9_]+\.md|figures/[A-Za-z0-9_]+\.png|kernels/[A-Za-z0-9_]+\.md",
    log:
        f"{WORK}/logs/publish/{{product}}.log",
    params:
        source=lambda wc: f"{REPORTS}/live/{wc.product}",
        optional=lambda wc: optional_figures_published(wc.product),
    conda:
        CONDA_ENV
    shell:
        "{{ cp {params.source:q} {output:q}{params.optional}; }} > {log:q} 2>&1"


rule check_rebuild:
    input:
        index=f"{REPORTS}/reference/index.md",
        gpu_jobs=[f"{REPORTS}/reference/gpu_jobs.md"] if REF_GPU_JOBS else [],
        reports=expand(f"{REPORTS}/reference/{{workload}}.md", workload=REFERENCE_WORKLOADS),
    output:
        touch(f"{REPORTS}/reference/CHECKED"),
    log:
        f"{WORK}/logs/report/reference/check.log",
    params:
        python=PYTHON,
        rebuilt=lambda wc, output: os.path.dirname(output[0]),
        committed=config["reference"].get("pages", "reports"),
    conda:
        CONDA_ENV
    shell:
        "{params.python:q} -m analysis check-rebuild --rebuilt {params.rebuilt:q} --committed {params.committed:q}"
        " 2>&1 | tee {log:q}"
