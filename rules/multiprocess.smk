# The NVTX blog's multi-process example (workloads/nvtx_multiprocess): two processes on one GPU,
# traced together by nsys; the page shows both processes' ranges and GPU work on one timeline.

rule nsys_multiprocess:
    input:
        rules.preflight.output,
    output:
        rep=f"{CAPTURES}/nvtx_multiprocess/nsys.nsys-rep",
        sqlite=f"{CAPTURES}/nvtx_multiprocess/nsys.sqlite",
        run=f"{CAPTURES}/nvtx_multiprocess/run.json",
    log:
        f"{WORK}/logs/nsys/nvtx_multiprocess.log",
    params:
        cold=COLD,
        python=PYTHON,
        nsys=NSYS,
        flags=nsys_flags(),
        prefix=lambda wc, output: output.rep.removesuffix(".nsys-rep"),
        # a third-party call annotated without editing CuPy (workloads.annotate.annotate_functions)
        functions="cupy.random.Generator.random,cupy.mean",
    resources:
        gpu=1,
    envmodules:
        *ENVMODULES,
    conda:
        CONDA_ENV
    shell:
        "(COOKBOOK_NVTX_FUNCTIONS={params.functions} {params.cold} --tag nsys -- {params.nsys} profile"
        " {params.flags} --force-overwrite true -o {params.prefix}"
        " {params.python} -m workloads.nvtx_multiprocess --output {output.run}"
        " && {params.nsys} export --type sqlite --force-overwrite true -o {output.sqlite} {output.rep})"
        " > {log} 2>&1"


rule multiprocess_report:
    input:
        export=f"{CAPTURES}/nvtx_multiprocess/nsys.sqlite",
        run=f"{CAPTURES}/nvtx_multiprocess/run.json",
    output:
        md="reports/nvtx_multiprocess.md",
        figure="reports/figures/nvtx_multiprocess_timeline.png",
    log:
        f"{WORK}/logs/report/nvtx_multiprocess.log",
    params:
        python=PYTHON,
    conda:
        CONDA_ENV
    shell:
        "{params.python} -m analysis multiprocess-report {input.export} --run {input.run} --output {output.md}"
        " --figure {output.figure} > {log} 2>&1"


rule multiprocess_report_rebuilt:
    input:
        export=f"{REF_DIR}/nvtx_multiprocess/nsys.sqlite.gz",
        run=f"{REF_DIR}/nvtx_multiprocess/run.json",
    output:
        md=f"{WORK}/rebuilt/nvtx_multiprocess.md",
        figure=f"{WORK}/rebuilt/figures/nvtx_multiprocess_timeline.png",
    log:
        f"{WORK}/logs/report_rebuilt/nvtx_multiprocess.log",
    params:
        python=PYTHON,
    conda:
        CONDA_ENV
    shell:
        "{params.python} -m analysis multiprocess-report {input.export} --run {input.run} --output {output.md}"
        " --figure {output.figure} > {log} 2>&1"
