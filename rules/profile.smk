# GPU rules: preflight, ceilings, and per (workload, variant, size) the timed run, the nsys capture
# and the ncu capture. Each run starts cold (workloads.harness.cold: fresh cache folders).


# a checkpoint: whether ncu may read counters (its JSON's "counters") decides, once it has run,
# whether the ncu captures are scheduled (common.smk: counters_readable, run_inputs)
checkpoint preflight:
    output:
        f"{CAPTURES}/preflight.json",
    log:
        f"{WORK}/logs/preflight.log",
    params:
        python=PYTHON,
        nsys=NSYS,
        ncu=NCU,
        # the message names what the user asked for (kernel_page is not profile_all), read from the
        # environment (onstart, rules/common.smk): as a param, another target (capture_reference
        # after profile_all) re-ran the preflight and with it every GPU job
    envmodules:
        *ENVMODULES,
    conda:
        CONDA_ENV
    # the message goes to the log only: Snakemake shows a failed job's log once (show-failed-logs in
    # the profiles), also when the job ran on a cluster node
    shell:
        "{params.python:q} -m workloads.harness.preflight --nsys {params.nsys:q} --ncu {params.ncu:q}"
        " --output {output:q} > {log:q} 2>&1"


rule ceilings:
    input:
        rules.preflight.output,
    # first among the GPU jobs: every timed run waits for it
    priority: 50
    output:
        f"{CAPTURES}/ceilings.json",
    log:
        f"{WORK}/logs/ceilings.log",
    params:
        cold=COLD,
        python=PYTHON,
    resources:
        gpu=1,
    envmodules:
        *ENVMODULES,
    conda:
        CONDA_ENV
    shell:
        "{params.cold} --tag ceilings -- {params.python:q} -m workloads.harness.ceilings --output {output:q}"
        " > {log:q} 2>&1"


# the timed run of a step (rules timed and timed_l2): warm-up, then samples until the median is known
TIMED_SHELL = (
    "{params.env} {params.cold} --tag timed -- {params.python:q} -m workloads.{wildcards.workload}"
    " --variant {wildcards.variant} --size {wildcards.size} --mode timed --l2 {params.l2}"
    " --warmup {params.warmup:q} --min-samples {params.repeats:q} --budget-s {params.budget:q}"
    " --energy-burst-s {params.burst:q} --output {output:q} > {log:q} 2>&1"
)


rule timed:
    input:
        rules.preflight.output,
        # the ceilings run first so that they and the timed runs never share the GPU
        rules.ceilings.output,
    # before the nsys and ncu runs among the jobs ready to start: a step's timed run fills the
    # compile cache its nsys and ncu runs and an experiment wait for (JAX's allocator experiment, 77 s
    # long, waited for float32 at 8192 and ended last in one full run, alone on the GPU for 15 s);
    # a recipe's timed_first steps before every other GPU job but the ceilings (timed_priority)
    priority: timed_priority
    output:
        f"{LIVE_RUN}/{layout.TIMING}",
    log:
        f"{WORK}/logs/timed/{{workload}}_{{variant}}_n{{size}}.log",
    params:
        # a step's measurement runs: see step_cold (rules/common.smk)
        cold=step_cold,
        python=PYTHON,
        warmup=timing_setting("warmup"),
        repeats=timing_setting("repeats"),
        budget=timing_setting("budget_s"),
        burst=timing_setting("energy_burst_s"),
        l2="warm",
        # the framework's settings for measured runs (JAX: no preallocation)
        env=measurement_env,
    resources:
        gpu=1,
    envmodules:
        *ENVMODULES,
    conda:
        CONDA_ENV
    shell:
        TIMED_SHELL


rule timed_l2:
    """A step timed at a size whose working set fits in L2: samples back to back (warm), or with L2
    scrubbed before each (cold-l2, workloads/harness/l2.py). No profiler; the report compares the two."""
    input:
        rules.preflight.output,
        rules.ceilings.output,
    output:
        f"{CAPTURES}/{{workload}}/{layout.L2_DIR}/{{variant}}/n{{size}}/timing-{{l2mode}}.json",
    log:
        f"{WORK}/logs/timed_l2/{{workload}}_{{variant}}_n{{size}}_{{l2mode}}.log",
    wildcard_constraints:
        l2mode="warm|cold-l2",
    params:
        # a step's measurement runs: see step_cold (rules/common.smk)
        cold=step_cold,
        python=PYTHON,
        warmup=timing_setting("warmup"),
        repeats=timing_setting("repeats"),
        budget=timing_setting("budget_s"),
        burst=timing_setting("energy_burst_s"),
        l2=lambda wc: wc.l2mode,
        env=measurement_env,
    resources:
        gpu=1,
    envmodules:
        *ENVMODULES,
    conda:
        CONDA_ENV
    shell:
        TIMED_SHELL


rule nsys:
    input:
        rules.preflight.output,
        compiled_first=lambda wc: compiled_first(wc, "nsys"),
    output:
        rep=f"{LIVE_RUN}/{layout.NSYS_REPORT}",
        run=f"{LIVE_RUN}/{layout.NSYS_RUN}",
    log:
        f"{WORK}/logs/nsys/{{workload}}_{{variant}}_n{{size}}.log",
    params:
        # takes turns; the shared compile cache only where setup compiles: see step_cold (rules/common.smk)
        cold=lambda wc: step_cold(wc, "nsys"),
        python=PYTHON,
        nsys=NSYS,
        flags=nsys_flags,
        env=lambda wc: " ".join(filter(None, (capture_range_env(wc), measurement_env(wc)))),
        calls=profiled_calls,
        # nsys adds the extension itself
        prefix=lambda wc, output: output.rep.removesuffix(".nsys-rep"),
    resources:
        gpu=1,
    envmodules:
        *ENVMODULES,
    conda:
        CONDA_ENV
    # nsys exits 0 when it could not turn the raw events into a report ("Cannot find string for an
    # exterior index": a report with no CUDA tables; JAX's, until XLA's NVTX domains were left out,
    # see nsys_flags): fail the job on nsys' own message so that the capture is taken again, once
    retries: 1
    # a seeded sample of the result is checked here; the timed run checks every element
    shell:
        "{params.env} {params.cold} --tag nsys -- {params.nsys:q} profile {params.flags} --force-overwrite true"
        " -o {params.prefix:q} {params.python:q} -m workloads.{wildcards.workload}"
        " --variant {wildcards.variant} --size {wildcards.size} --calls {params.calls:q} --check sample"
        " --output {output.run:q} > {log:q} 2>&1;"
        " if grep -q 'Errors occurred while processing the raw events' {log:q}; then"
        " echo 'nsys: the capture could not be processed (see above); Snakemake takes it again once' >> {log:q};"
        " exit 1; fi"


rule nsys_export:
    """The capture as SQLite, which the analysis reads: no GPU needed, so it runs beside the next GPU job."""
    input:
        f"{LIVE_RUN}/{layout.NSYS_REPORT}",
    output:
        f"{LIVE_RUN}/{layout.NSYS_EXPORT}",
    log:
        f"{WORK}/logs/nsys_export/{{workload}}_{{variant}}_n{{size}}.log",
    params:
        nsys=NSYS,
    envmodules:
        *ENVMODULES,
    conda:
        CONDA_ENV
    shell:
        "{params.nsys:q} export --type sqlite --force-overwrite true -o {output:q} {input:q} > {log:q} 2>&1"


rule nsys_stats:
    input:
        f"{LIVE_RUN}/{layout.NSYS_EXPORT}",
    output:
        directory(f"{LIVE_RUN}/{layout.NSYS_STATS}"),
    log:
        f"{WORK}/logs/nsys_stats/{{workload}}_{{variant}}_n{{size}}.log",
    params:
        nsys=NSYS,
        reports=",".join(
            [
                "cuda_gpu_kern_sum",
                "cuda_gpu_mem_time_sum",
                "cuda_gpu_mem_size_sum",
                "cuda_api_sum",
                "nvtx_sum",
                "nvtx_gpu_proj_sum",
                "cuda_gpu_trace",
            ]
        ),
    envmodules:
        *ENVMODULES,
    conda:
        CONDA_ENV
    shell:
        "(mkdir -p {output:q} && {params.nsys:q} stats --report {params.reports:q} --format csv"
        " --output {output:q}/stats {input:q}) > {log:q} 2>&1"


rule ncu:
    input:
        rules.preflight.output,
        compiled_first=compiled_first,
    output:
        rep=f"{LIVE_RUN}/{layout.NCU_REPORT}",
        run=f"{LIVE_RUN}/{layout.NCU_RUN}",
    log:
        f"{WORK}/logs/ncu/{{workload}}_{{variant}}_n{{size}}.log",
    params:
        # a step's measurement runs: see step_cold (rules/common.smk)
        cold=step_cold,
        python=PYTHON,
        ncu=NCU,
        flags=ncu_flags,
        env=measurement_env,
        calls=ncu_calls,
        prefix=lambda wc, output: output.rep.removesuffix(".ncu-rep"),
    resources:
        gpu=1,
    envmodules:
        *ENVMODULES,
    conda:
        CONDA_ENV
    shell:
        # the framework's own settings for measured runs (JAX: no preallocation, else ncu's kernel
        # replay saves and restores ~105 GB per pass)
        "{params.env} {params.cold} --tag ncu -- {params.ncu:q} {params.flags} --force-overwrite"
        " --export {params.prefix:q} {params.python:q} -m workloads.{wildcards.workload}"
        " --variant {wildcards.variant} --size {wildcards.size} --calls {params.calls:q} --check sample"
        " --output {output.run:q} > {log:q} 2>&1"


rule ncu_raw:
    """ncu's own raw page of the capture (ground truth for the ncu reader's tests): no GPU needed."""
    input:
        f"{LIVE_RUN}/{layout.NCU_REPORT}",
    output:
        f"{LIVE_RUN}/{layout.NCU_RAW}",
    log:
        f"{WORK}/logs/ncu_raw/{{workload}}_{{variant}}_n{{size}}.log",
    params:
        ncu=NCU,
    envmodules:
        *ENVMODULES,
    conda:
        CONDA_ENV
    shell:
        "{params.ncu:q} --import {input:q} --csv --page raw > {output:q} 2> {log:q}"


rule coldwarm:
    """Time to first result in new processes: caches empty, filled, and filled with the CUDA
    driver's cache disabled where the cold run JIT-compiled PTX, on one step a recipe
    (workloads.tools.coldwarm)."""
    input:
        rules.preflight.output,
        # after the ceilings, like every GPU rule, so that no two runs share the GPU
        rules.ceilings.output,
    output:
        f"{CAPTURES}/coldstart/{{workload}}_{{variant}}.json",
    log:
        f"{WORK}/logs/coldwarm/{{workload}}_{{variant}}.log",
    params:
        python=PYTHON,
        coldwarm=shlex.join([PYTHON, "-m", "workloads.tools.coldwarm", "--work-dir", WORK, "--gpus", str(config["gpus"])]),
        size=coldwarm_size,
        driver_cache=coldwarm_driver_cache_args,
    resources:
        gpu=1,
    envmodules:
        *ENVMODULES,
    conda:
        CONDA_ENV
    shell:
        "{params.coldwarm} {params.driver_cache} --output {output:q} --"
        " {params.python:q} -m workloads.{wildcards.workload} --variant {wildcards.variant}"
        " --size {params.size:q} > {log:q} 2>&1"


rule experiment:
    """A recipe's extra GPU run (Recipe.experiments): workloads/<workload>/exp_<experiment>.py writes
    its JSON and captures into the folder."""
    input:
        rules.preflight.output,
        rules.ceilings.output,
        # an experiment that loads the recipe's shared compile cache waits for the timed run that fills it
        compiled_first=experiment_compiled_first,
    # the longest GPU jobs: started as soon as they can, so that their start-up and profiler output
    # go on beside other jobs' turns rather than at the end of the run
    priority: 20
    output:
        directory(f"{CAPTURES}/{{workload}}/experiments/{{experiment}}"),
    log:
        f"{WORK}/logs/experiment/{{workload}}_{{experiment}}.log",
    params:
        cold=experiment_cold,
        python=PYTHON,
        nsys=NSYS,
        ncu=NCU,
    resources:
        gpu=1,
    envmodules:
        *ENVMODULES,
    conda:
        CONDA_ENV
    shell:
        "{params.cold} --tag experiment -- {params.python:q} -m workloads.{wildcards.workload}"
        ".exp_{wildcards.experiment} --out-dir {output:q} --nsys {params.nsys:q} --ncu {params.ncu:q}"
        " --python {params.python:q} > {log:q} 2>&1"
