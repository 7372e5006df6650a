# GPU rules: preflight, ceilings, and per (workload, variant, size) the timed run, the nsys
# capture and the ncu capture. Each run starts cold (workloads.tools.cold: fresh cache folders).

COLD = f"{PYTHON} -m workloads.tools.cold --work-dir {WORK}"


rule preflight:
    output:
        f"{CAPTURES}/preflight.json",
    log:
        f"{WORK}/logs/preflight.log",
    # the message goes to the console as well as the log: it is what the user must read
    shell:
        "{PYTHON} -m workloads.tools.preflight --nsys {NSYS} --ncu {NCU} --output {output} 2>&1 | tee {log}"


rule ceilings:
    input:
        rules.preflight.output,
    output:
        f"{CAPTURES}/ceilings.json",
    log:
        f"{WORK}/logs/ceilings.log",
    shell:
        "{COLD} --tag ceilings -- {PYTHON} -m workloads.tools.ceilings --output {output} > {log} 2>&1"


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
        warmup=config["timing"]["warmup"],
        repeats=config["timing"]["repeats"],
    resources:
        gpu=1,
    shell:
        "{COLD} --tag timed -- {PYTHON} -m workloads.{wildcards.workload} --variant {wildcards.variant}"
        " --size {wildcards.size} --mode timed --warmup {params.warmup} --repeats {params.repeats}"
        " --output {output} > {log} 2>&1"


def _nsys_flags():
    o = config["nsys_profile"]
    return (f"-t {o['trace']} --cuda-memory-usage {'true' if o['cuda_memory_usage'] else 'false'}"
            f" {o['extra_args']}")


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
        flags=_nsys_flags(),
        calls=lambda wc: config["workloads"][wc.workload]["profiled_calls"],
        # nsys adds the extension itself
        prefix=lambda wc, output: output.rep.removesuffix(".nsys-rep"),
    resources:
        gpu=1,
    shell:
        "({COLD} --tag nsys -- {NSYS} profile {params.flags} --force-overwrite true"
        " -o {params.prefix} {PYTHON} -m workloads.{wildcards.workload} --variant {wildcards.variant}"
        " --size {wildcards.size} --calls {params.calls} --output {output.run}"
        " && {NSYS} export --type sqlite --force-overwrite true -o {output.sqlite} {output.rep}) > {log} 2>&1"


# nsys' own summaries of each capture: the ground truth analysis/ is tested against
NSYS_STATS_REPORTS = ["cuda_gpu_kern_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum",
                      "cuda_api_sum", "nvtx_sum", "nvtx_gpu_proj_sum", "cuda_gpu_trace"]


rule nsys_stats:
    input:
        f"{CAPTURES}/{{workload}}/{{variant}}/n{{size}}/nsys.sqlite",
    output:
        directory(f"{CAPTURES}/{{workload}}/{{variant}}/n{{size}}/nsys-stats"),
    log:
        f"{WORK}/logs/nsys_stats/{{workload}}_{{variant}}_n{{size}}.log",
    params:
        reports=",".join(NSYS_STATS_REPORTS),
    shell:
        "(mkdir -p {output} && {NSYS} stats --report {params.reports} --format csv"
        " --output {output}/stats {input}) > {log} 2>&1"


def nvtx_include(workload, variant):
    """ncu's --nvtx-include for the variant's compute ranges. ncu reads "/" as its push/pop
    nesting separator, so the "/" inside the suite's range names is escaped."""
    name = f"{workload}/{variant}/compute".replace("/", "\\/")
    return f"cookbook@{name}/"


def _ncu_flags(wc):
    o, w = config["ncu_profile"], config["workloads"][wc.workload]["ncu"]
    flags = [f"--set {o['set']}", f"--import-source {'yes' if o['import_source'] else 'no'}",
             f"--clock-control {o['clock_control']}",
             # only kernels launched inside this variant's compute ranges, not its setup kernels
             f"--nvtx --nvtx-include '{nvtx_include(wc.workload, wc.variant)}'",
             f"--launch-skip {w['launch_skip']}", f"--launch-count {w['launch_count']}", o["extra_args"]]
    if w.get("kernel_regex"):
        flags.append(f"-k 'regex:{w['kernel_regex']}'")
    return " ".join(f for f in flags if f)


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
        flags=_ncu_flags,
        calls=lambda wc: config["workloads"][wc.workload]["profiled_calls"],
        prefix=lambda wc, output: output.rep.removesuffix(".ncu-rep"),
    resources:
        gpu=1,
    shell:
        "({COLD} --tag ncu -- {NCU} {params.flags} --force-overwrite --export {params.prefix}"
        " {PYTHON} -m workloads.{wildcards.workload} --variant {wildcards.variant}"
        " --size {wildcards.size} --calls {params.calls} --output {output.run}"
        # ncu's own raw page, ground truth for analysis' ncu reader
        " && {NCU} --import {output.rep} --csv --page raw > {output.raw}) > {log} 2>&1"
