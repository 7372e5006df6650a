# Compare two runs step by step (a CI gate): snakemake compare --config compare_base=DIR compare_cand=DIR
# Each folder holds timed captures (<workload>/<variant>/n<size>/timing.json): a run's captures
# folder or a reference. The rule fails (exit 1 of `python -m analysis compare`) when any step is
# slower with confidence; Snakemake then deletes the outputs of the failed job unless it runs with
# --keep-incomplete (the slower steps are named on stderr either way).


rule compare:
    """The speedup base/candidate per recipe, variant and size, with its interval and verdict."""
    input:
        base=compare_side("compare_base"),
        cand=compare_side("compare_cand"),
    output:
        md=f"{WORK}/compare/compare.md",
        json=f"{WORK}/compare/compare.json",
    log:
        f"{WORK}/logs/compare.log",
    params:
        python=PYTHON,
        base=lambda wc: config["compare_base"],
        cand=lambda wc: config["compare_cand"],
    conda:
        CONDA_ENV
    shell:
        "{params.python:q} -m analysis compare {params.base:q} {params.cand:q}"
        " --output-md {output.md:q} --output-json {output.json:q} 2>&1 | tee {log:q}"
