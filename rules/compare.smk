# Compare two runs step by step (a CI gate): snakemake compare --config compare_base=DIR compare_cand=DIR
# Each folder holds timed captures (<workload>/<variant>/n<size>/timing.json): a run's captures
# folder or a reference. The rule fails (exit 1 of `python -m analysis compare`) when any step is
# slower with confidence; Snakemake then deletes the outputs of the failed job unless it runs with
# --keep-incomplete (the slower steps are named on stderr either way).


def _compare_side(key):
    def inputs(wc):
        folder = config.get(key)
        if not folder:
            raise ValueError(f"snakemake compare needs --config {key}=<folder of timed captures>")
        return sorted(glob.glob(f"{folder.rstrip('/')}/**/timing.json", recursive=True)
                      + glob.glob(f"{folder.rstrip('/')}/**/timing.json.gz", recursive=True))

    return inputs


rule compare:
    """The speedup base/candidate per recipe, variant and size, with its interval and verdict."""
    input:
        base=_compare_side("compare_base"),
        cand=_compare_side("compare_cand"),
    output:
        md=f"{WORK}/compare/compare.md",
        json=f"{WORK}/compare/compare.json",
    params:
        python=PYTHON,
        base=lambda wc: config["compare_base"],
        cand=lambda wc: config["compare_cand"],
    shell:
        "{params.python:q} -m analysis compare {params.base:q} {params.cand:q}"
        " --output-md {output.md:q} --output-json {output.json:q}"
