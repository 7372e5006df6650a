# Analysis of one run's captures -> one JSON of numbers. Pure functions of the files, so the same
# rule serves the live captures (set "live") and the committed reference captures ("reference").


rule summarize_run:
    """One run's summary: a live run's captures summarized in a process of its own (it is ready
    once its GPU jobs are); a reference run's copied from its workload's summaries, which one process
    makes (summarize_reference: Python's start-up and imports once per workload, not once per run)."""
    input:
        unpack(run_inputs),
    output:
        f"{WORK}/analysis/{{set}}/{{workload}}/{{variant}}/n{{size}}.json",
    log:
        f"{WORK}/logs/analysis/{{set}}/{{workload}}_{{variant}}_n{{size}}.log",
    wildcard_constraints:
        set="live|reference",
    params:
        command=summarize_run_command,
    conda:
        CONDA_ENV
    shell:
        "{params.command} > {log:q} 2>&1"


rule summarize_reference:
    """The summaries of one reference workload's runs, in one process, under
    analysis/reference-runs/<workload>/ (summarize_run copies each where the reports read it)."""
    input:
        lambda wc: [f for v, s in REFERENCE_RUNS[wc.workload] for f in reference_run_inputs(wc.workload, v, s).values()],
    output:
        directory(f"{WORK}/analysis/reference-runs/{{workload}}"),
    log:
        f"{WORK}/logs/analysis/reference-runs/{{workload}}.log",
    params:
        python=PYTHON,
        runs=lambda wc, output: shlex.join(
            [a for v, s in REFERENCE_RUNS[wc.workload]
             for a in ("--run-dir", run_dir(REF_DIR, wc.workload, v, s), "--output", f"{output[0]}/{v}/n{s}.json")]),
    conda:
        CONDA_ENV
    shell:
        "{params.python:q} -m analysis summarize-run {params.runs} > {log:q} 2>&1"


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
