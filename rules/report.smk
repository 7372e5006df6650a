# Markdown reports and figures. Live: reports/ from this run's captures. Rebuilt: the same reports
# from the committed reference captures, checked against the committed reports/*.md.

# the figures `python -m analysis report` draws for each workload: reports/figures/<workload>_<name>.png
REPORT_FIGURES = ["gpu_time", "timing", "timeline", "roofline"]


rule report:
    input:
        analyses=lambda wc: analyses("live", wc.workload),
        ceilings=f"{CAPTURES}/ceilings.json",
        ground_truth=live_ground_truth,
        experiments=lambda wc: experiment_dirs(CAPTURES, wc.workload),
    output:
        md="reports/{workload}.md",
        figures=expand("reports/figures/{{workload}}_{figure}.png", figure=REPORT_FIGURES),
    log:
        f"{WORK}/logs/report/{{workload}}.log",
    params:
        python=PYTHON,
        captures=lambda wc: f"{CAPTURES}/{wc.workload}",
    conda:
        CONDA_ENV
    shell:
        "{params.python:q} -m analysis report --workload {wildcards.workload}"
        " --ceilings {input.ceilings:q} --captures {params.captures:q} --out-dir reports {input.analyses:q}"
        " > {log:q} 2>&1"


rule report_rebuilt:
    input:
        analyses=lambda wc: analyses("reference", wc.workload),
        ceilings=lambda wc: reference_ceilings(wc.workload),
    output:
        md=f"{WORK}/rebuilt/{{workload}}.md",
        figures=expand(
            f"{WORK}/rebuilt/figures/{{{{workload}}}}_{{figure}}.png", figure=REPORT_FIGURES
        ),
    log:
        f"{WORK}/logs/report_rebuilt/{{workload}}.log",
    params:
        python=PYTHON,
        out_dir=lambda wc, output: os.path.dirname(output.md),
        captures=lambda wc: f"{REF_DIR}/{wc.workload}",
    conda:
        CONDA_ENV
    shell:
        "{params.python:q} -m analysis report --workload {wildcards.workload}"
        " --ceilings {input.ceilings:q} --captures {params.captures:q} --out-dir {params.out_dir:q}"
        " {input.analyses:q} > {log:q} 2>&1"


rule index:
    input:
        reports=expand("reports/{workload}.md", workload=RUNNABLE_WORKLOADS),
        analyses=[a for w in RUNNABLE_WORKLOADS for a in analyses("live", w)],
        ceilings=f"{CAPTURES}/ceilings.json",
        preflight=f"{CAPTURES}/preflight.json",
        coldstart=f"{WORK}/analysis/live/coldstart.json",
        multiprocess=["reports/nvtx_multiprocess.md"] if MULTIPROCESS_RUNNABLE else [],
    output:
        "reports/index.md",
    log:
        f"{WORK}/logs/report/index.log",
    params:
        python=PYTHON,
        multiprocess="--multiprocess" if MULTIPROCESS_RUNNABLE else "",
    conda:
        CONDA_ENV
    shell:
        "{params.python:q} -m analysis index --ceilings {input.ceilings:q} --preflight {input.preflight:q}"
        " --coldstart {input.coldstart:q} {params.multiprocess} --output {output:q} {input.analyses:q} > {log:q} 2>&1"


rule index_rebuilt:
    input:
        reports=expand(f"{WORK}/rebuilt/{{workload}}.md", workload=REFERENCE_WORKLOADS),
        analyses=[a for w in REFERENCE_WORKLOADS for a in analyses("reference", w)],
        ceilings=f"{REF_DIR}/ceilings.json",
        preflight=f"{REF_DIR}/preflight.json",
        coldstart=[f"{WORK}/analysis/reference/coldstart.json"] if REFERENCE_HAS_COLDSTART else [],
        multiprocess=[f"{WORK}/rebuilt/nvtx_multiprocess.md"] if REFERENCE_HAS_MULTIPROCESS else [],
    output:
        f"{WORK}/rebuilt/index.md",
    log:
        f"{WORK}/logs/report_rebuilt/index.log",
    params:
        python=PYTHON,
        coldstart=lambda wc, input: shlex.join(["--coldstart", *input.coldstart]) if input.coldstart else "",
        own_ceilings=shlex.join(
            arg
            for w in REFERENCE_WORKLOADS
            if reference_ceilings(w) != f"{REF_DIR}/ceilings.json"
            for arg in ("--workload-ceilings", f"{w}={reference_ceilings(w)}")
        ),
        multiprocess="--multiprocess" if REFERENCE_HAS_MULTIPROCESS else "",
    conda:
        CONDA_ENV
    shell:
        "{params.python:q} -m analysis index --ceilings {input.ceilings:q} --preflight {input.preflight:q}"
        " {params.own_ceilings} {params.coldstart} {params.multiprocess} --output {output:q} {input.analyses:q}"
        " > {log:q} 2>&1"


rule gpu_jobs:
    """Which GPU job ran on which GPU, and when: after every GPU job of the run."""
    input:
        analyses=[a for w in RUNNABLE_WORKLOADS for a in analyses("live", w)],
        experiments=[d for w in RUNNABLE_WORKLOADS for d in experiment_dirs(CAPTURES, w)],
        coldstart=f"{WORK}/analysis/live/coldstart.json",
        ceilings=f"{CAPTURES}/ceilings.json",
        multiprocess=["reports/nvtx_multiprocess.md"] if MULTIPROCESS_RUNNABLE else [],
    output:
        md="reports/gpu_jobs.md",
        figure="reports/figures/gpu_jobs.png",
    log:
        f"{WORK}/logs/report/gpu_jobs.log",
    params:
        python=PYTHON,
        records=f"{WORK}/gpu-jobs",
    conda:
        CONDA_ENV
    shell:
        "{params.python:q} -m analysis gpu-jobs --records {params.records:q} --output {output.md:q}"
        " --figure {output.figure:q} > {log:q} 2>&1"


rule gpu_jobs_rebuilt:
    input:
        records=REF_GPU_JOBS,
    output:
        md=f"{WORK}/rebuilt/gpu_jobs.md",
        figure=f"{WORK}/rebuilt/figures/gpu_jobs.png",
    log:
        f"{WORK}/logs/report_rebuilt/gpu_jobs.log",
    params:
        python=PYTHON,
    conda:
        CONDA_ENV
    shell:
        "{params.python:q} -m analysis gpu-jobs --records {input.records:q} --output {output.md:q}"
        " --figure {output.figure:q} > {log:q} 2>&1"


rule check_rebuild:
    input:
        index=rules.index_rebuilt.output,
        gpu_jobs=[rules.gpu_jobs_rebuilt.output.md] if REF_GPU_JOBS else [],
        reports=expand(f"{WORK}/rebuilt/{{workload}}.md", workload=REFERENCE_WORKLOADS),
    output:
        touch(f"{WORK}/rebuilt/CHECKED"),
    log:
        f"{WORK}/logs/report_rebuilt/check.log",
    params:
        python=PYTHON,
        rebuilt=lambda wc, output: os.path.dirname(output[0]),
    conda:
        CONDA_ENV
    shell:
        "{params.python:q} -m analysis check-rebuild --rebuilt {params.rebuilt:q} --committed reports"
        " 2>&1 | tee {log:q}"
