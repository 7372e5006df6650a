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
        "(COOKBOOK_NVTX_FUNCTIONS={params.functions:q} {params.cold} --tag nsys -- {params.nsys:q} profile"
        " {params.flags} --force-overwrite true -o {params.prefix:q}"
        " {params.python:q} -m workloads.nvtx_multiprocess --output {output.run:q}"
        " && {params.nsys:q} export --type sqlite --force-overwrite true -o {output.sqlite:q} {output.rep:q})"
        " > {log:q} 2>&1"


rule multiprocess_report:
    input:
        export=lambda wc: f"{CAPTURES}/nvtx_multiprocess/nsys.sqlite" if wc.set == "live"
        else f"{REF_DIR}/nvtx_multiprocess/nsys.sqlite.gz",
        run=lambda wc: f"{CAPTURES if wc.set == 'live' else REF_DIR}/nvtx_multiprocess/run.json",
    output:
        md=f"{REPORTS}/{{set}}/nvtx_multiprocess.md",
        figure=f"{REPORTS}/{{set}}/figures/nvtx_multiprocess_timeline.png",
    log:
        f"{WORK}/logs/report/{{set}}/nvtx_multiprocess.log",
    params:
        python=PYTHON,
    conda:
        CONDA_ENV
    shell:
        "{params.python:q} -m analysis multiprocess-report {input.export:q} --run {input.run:q}"
        " --output {output.md:q} --figure {output.figure:q} > {log:q} 2>&1"
