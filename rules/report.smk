# Markdown reports and figures. Live: reports/ from this run's captures. Rebuilt: the same reports
# from the committed reference captures, checked against the committed reports/*.md.

# the figures `python -m analysis report` draws for each workload: reports/figures/<workload>_<name>.png
REPORT_FIGURES = ["ladder", "busy", "timeline", "roofline"]


rule report:
    input:
        analyses=lambda wc: analyses("live", wc.workload),
        ceilings=f"{CAPTURES}/ceilings.json",
        ground_truth=live_ground_truth,
        experiments=lambda wc: experiment_dirs(CAPTURES, wc.workload),
        preflight=f"{CAPTURES}/preflight.json",
    output:
        md="reports/{workload}.md",
        figures=expand("reports/figures/{{workload}}_{figure}.png", figure=REPORT_FIGURES),
    log:
        f"{WORK}/logs/report/{{workload}}.log",
    params:
        python=PYTHON,
        captures=lambda wc: f"{CAPTURES}/{wc.workload}",
        gpu_jobs=f"{WORK}/gpu-jobs",
    conda:
        CONDA_ENV
    shell:
        "{params.python} -m analysis report --workload {wildcards.workload}"
        " --ceilings {input.ceilings} --captures {params.captures} --preflight {input.preflight}"
        " --gpu-jobs {params.gpu_jobs} --out-dir reports {input.analyses}"
        " > {log} 2>&1"


rule report_rebuilt:
    input:
        analyses=lambda wc: analyses("reference", wc.workload),
        ceilings=lambda wc: reference_ceilings(wc.workload),
        preflight=f"{REF_DIR}/preflight.json",
        gpu_jobs=REF_GPU_JOBS,
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
        gpu_jobs=lambda wc, input: f"--gpu-jobs {input.gpu_jobs}" if input.gpu_jobs else "",
    conda:
        CONDA_ENV
    shell:
        "{params.python} -m analysis report --workload {wildcards.workload}"
        " --ceilings {input.ceilings} --captures {params.captures} --out-dir {params.out_dir}"
        " --preflight {input.preflight} {params.gpu_jobs} {input.analyses} > {log} 2>&1"


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
        "{params.python} -m analysis index --ceilings {input.ceilings} --preflight {input.preflight}"
        " --coldstart {input.coldstart} {params.multiprocess} --output {output} {input.analyses} > {log} 2>&1"


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
        coldstart=lambda wc, input: f"--coldstart {input.coldstart}" if input.coldstart else "",
        own_ceilings=" ".join(
            f"--workload-ceilings {w}={reference_ceilings(w)}"
            for w in REFERENCE_WORKLOADS
            if reference_ceilings(w) != f"{REF_DIR}/ceilings.json"
        ),
        multiprocess="--multiprocess" if REFERENCE_HAS_MULTIPROCESS else "",
    conda:
        CONDA_ENV
    shell:
        "{params.python} -m analysis index --ceilings {input.ceilings} --preflight {input.preflight}"
        " {params.own_ceilings} {params.coldstart} {params.multiprocess} --output {output} {input.analyses}"
        " > {log} 2>&1"


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
        "{params.python} -m analysis gpu-jobs --records {params.records} --output {output.md}"
        " --figure {output.figure} > {log} 2>&1"


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
        "{params.python} -m analysis gpu-jobs --records {input.records} --output {output.md}"
        " --figure {output.figure} > {log} 2>&1"


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
        "{params.python} -m analysis check-rebuild --rebuilt {params.rebuilt} --committed reports"
        " 2>&1 | tee {log}"
