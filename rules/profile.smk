# GPU rules: preflight, ceilings, and per (workload, variant, size) the timed run, the nsys capture
# and the ncu capture. Each run starts cold (workloads.tools.cold: fresh cache folders).


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
    envmodules:
        *ENVMODULES,
    conda:
        CONDA_ENV
    # the message goes to the console as well as the log: it is what the user must read
    shell:
        "{params.python} -m workloads.tools.preflight --nsys {params.nsys} --ncu {params.ncu}"
        " --output {output} 2>&1 | tee {log}"


rule ceilings:
    input:
        rules.preflight.output,
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
        "{params.cold} --tag ceilings -- {params.python} -m workloads.tools.ceilings --output {output}"
        " > {log} 2>&1"


rule timed:
    input:
        rules.preflight.output,
        # the ceilings run first so that they and the timed runs never share the GPU
        rules.ceilings.output,
    output:
        f"{CAPTURES}/{{workload}}/{{variant}}/n{{size}}/timing.json",
    log:
        f"{WORK}/logs/timed/{{workload}}_{{variant}}_n{{size}}.log",
    params:
        cold=COLD,
        python=PYTHON,
        warmup=timing_setting("warmup"),
        repeats=timing_setting("repeats"),
    resources:
        gpu=1,
    envmodules:
        *ENVMODULES,
    conda:
        CONDA_ENV
    shell:
        "{params.cold} --tag timed -- {params.python} -m workloads.{wildcards.workload}"
        " --variant {wildcards.variant} --size {wildcards.size} --mode timed"
        " --warmup {params.warmup} --repeats {params.repeats} --output {output} > {log} 2>&1"


rule nsys:
    input:
        rules.preflight.output,
    output:
        rep=f"{CAPTURES}/{{workload}}/{{variant}}/n{{size}}/nsys.nsys-rep",
        sqlite=f"{CAPTURES}/{{workload}}/{{variant}}/n{{size}}/nsys.sqlite",
        run=f"{CAPTURES}/{{workload}}/{{variant}}/n{{size}}/nsys-run.json",
    log:
        f"{WORK}/logs/nsys/{{workload}}_{{variant}}_n{{size}}.log",
    params:
        cold=COLD,
        python=PYTHON,
        nsys=NSYS,
        flags=nsys_flags,
        env=capture_range_env,
        calls=profiled_calls,
        # nsys adds the extension itself
        prefix=lambda wc, output: output.rep.removesuffix(".nsys-rep"),
    resources:
        gpu=1,
    envmodules:
        *ENVMODULES,
    conda:
        CONDA_ENV
    shell:
        "({params.env} {params.cold} --tag nsys -- {params.nsys} profile {params.flags} --force-overwrite true"
        " -o {params.prefix} {params.python} -m workloads.{wildcards.workload}"
        " --variant {wildcards.variant} --size {wildcards.size} --calls {params.calls}"
        " --output {output.run}"
        " && {params.nsys} export --type sqlite --force-overwrite true -o {output.sqlite}"
        " {output.rep}) > {log} 2>&1"


rule nsys_stats:
    input:
        f"{CAPTURES}/{{workload}}/{{variant}}/n{{size}}/nsys.sqlite",
    output:
        directory(f"{CAPTURES}/{{workload}}/{{variant}}/n{{size}}/nsys-stats"),
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
        "(mkdir -p {output} && {params.nsys} stats --report {params.reports} --format csv"
        " --output {output}/stats {input}) > {log} 2>&1"


rule ncu:
    input:
        rules.preflight.output,
    output:
        rep=f"{CAPTURES}/{{workload}}/{{variant}}/n{{size}}/ncu.ncu-rep",
        raw=f"{CAPTURES}/{{workload}}/{{variant}}/n{{size}}/ncu-raw.csv",
        run=f"{CAPTURES}/{{workload}}/{{variant}}/n{{size}}/ncu-run.json",
    log:
        f"{WORK}/logs/ncu/{{workload}}_{{variant}}_n{{size}}.log",
    params:
        cold=COLD,
        python=PYTHON,
        ncu=NCU,
        flags=ncu_flags,
        calls=profiled_calls,
        prefix=lambda wc, output: output.rep.removesuffix(".ncu-rep"),
    resources:
        gpu=1,
    envmodules:
        *ENVMODULES,
    conda:
        CONDA_ENV
    shell:
        # JAX preallocates 75% of the GPU by default: ncu's kernel replay then saves and restores
        # ~105 GB per pass and makes no progress; other frameworks ignore the variable
        "(XLA_PYTHON_CLIENT_PREALLOCATE=false {params.cold} --tag ncu -- {params.ncu} {params.flags} --force-overwrite"
        " --export {params.prefix} {params.python} -m workloads.{wildcards.workload}"
        " --variant {wildcards.variant} --size {wildcards.size} --calls {params.calls}"
        " --output {output.run}"
        # ncu's own raw page: ground truth for the ncu reader's tests
        " && {params.ncu} --import {output.rep} --csv --page raw > {output.raw}) > {log} 2>&1"


rule coldwarm:
    """Time to first result in new processes: caches empty, filled, and filled with the CUDA
    driver's cache disabled (workloads.tools.coldwarm)."""
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
        coldwarm=f"{PYTHON} -m workloads.tools.coldwarm --work-dir {WORK} --gpus {config['gpus']}",
        size=coldwarm_size,
    resources:
        gpu=1,
    envmodules:
        *ENVMODULES,
    conda:
        CONDA_ENV
    shell:
        "{params.coldwarm} --output {output} --"
        " {params.python} -m workloads.{wildcards.workload} --variant {wildcards.variant}"
        " --size {params.size} > {log} 2>&1"


rule experiment:
    """A recipe's extra GPU run (Recipe.experiments): workloads/<workload>/exp_<experiment>.py writes
    its JSON and captures into the folder."""
    input:
        rules.preflight.output,
        rules.ceilings.output,
    output:
        directory(f"{CAPTURES}/{{workload}}/experiments/{{experiment}}"),
    log:
        f"{WORK}/logs/experiment/{{workload}}_{{experiment}}.log",
    params:
        cold=COLD,
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
        "{params.cold} --tag experiment -- {params.python} -m workloads.{wildcards.workload}"
        ".exp_{wildcards.experiment} --out-dir {output} --nsys {params.nsys} --ncu {params.ncu}"
        " --python {params.python} > {log} 2>&1"
