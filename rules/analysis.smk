# Analysis of one run's captures -> one JSON of numbers. Pure functions of the files, so the same
# rule serves the live captures (set "live") and the committed reference captures ("reference").


rule summarize_run:
    input:
        unpack(run_inputs),
    output:
        f"{WORK}/analysis/{{set}}/{{workload}}/{{variant}}/n{{size}}.json",
    log:
        f"{WORK}/logs/analysis/{{set}}/{{workload}}_{{variant}}_n{{size}}.log",
    wildcard_constraints:
        set="live|reference",
    params:
        python=PYTHON,
        run_dir=lambda wc: run_dir(capture_root(wc.set), wc.workload, wc.variant, wc.size),
    conda:
        CONDA_ENV
    shell:
        "{params.python:q} -m analysis summarize-run --run-dir {params.run_dir:q} --output {output:q}"
        " > {log:q} 2>&1"


rule summarize_coldstart:
    input:
        unpack(coldstart_inputs),
    output:
        f"{WORK}/analysis/{{set}}/coldstart.json",
    log:
        f"{WORK}/logs/analysis/{{set}}/coldstart.log",
    wildcard_constraints:
        set="live|reference",
    params:
        python=PYTHON,
        captures=lambda wc: capture_root(wc.set),
    conda:
        CONDA_ENV
    shell:
        "{params.python:q} -m analysis coldstart --captures {params.captures:q} --output {output:q}"
        " {input.records:q} > {log:q} 2>&1"
