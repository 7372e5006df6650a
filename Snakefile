# GPU kernel-optimization cookbook: profile every recipe cold under nsys and ncu, then report.
#
#   snakemake profile_all        # on a GPU host: time, trace, profile, analyse, write reports/
#   snakemake rebuild_reports    # anywhere: rebuild the reports from the committed captures
#
# Rules live in rules/*.smk; configuration in rules/config.yaml (validated by its schema).
from snakemake.utils import min_version, validate

min_version("9.0")

configfile: "rules/config.yaml"
# `--config coldwarm=false` arrives as the string "false" (Snakemake reads only True/False as
# booleans): for the keys the schema declares boolean, take the lower-case spellings too
from workloads.registry import load_yaml

with open("rules/schemas/config.schema.yaml") as _f:
    _boolean_keys = {k for k, v in load_yaml(_f.read())["properties"].items() if v.get("type") == "boolean"}
for _key in _boolean_keys & set(config):
    if isinstance(config[_key], str) and config[_key].lower() in ("true", "false"):
        config[_key] = config[_key].lower() == "true"
validate(config, "rules/schemas/config.schema.yaml")

include: "rules/common.smk"
include: "rules/cluster.smk"
include: "rules/profile.smk"
include: "rules/analysis.smk"
include: "rules/report.smk"
include: "rules/multiprocess.smk"
include: "rules/kernel.smk"
include: "rules/compare.smk"


rule profile_all:
    """Every recipe, every variant and size: timed, under nsys, under ncu; then the reports."""
    default_target: True
    input:
        # the captures and their analyses are named too: committed reports alone would look up to
        # date to Snakemake in a fresh checkout, and nothing would be profiled
        f"{CAPTURES}/preflight.json",
        say_what_profile_all_skips,
        # named as well as the analyses: those wait on the preflight's counter check (a checkpoint,
        # rules/profile.smk), these do not, so that a dry run lists every timed run and nsys capture
        [f"{run_dir(CAPTURES, w, v, s)}/{f}" for w in RUNNABLE_WORKLOADS for v, s in runs(w)
         for f in ("timing.json", "nsys-run.json")],
        [f"{WORK}/analysis/live/{w}/{v}/n{s}.json" for w in RUNNABLE_WORKLOADS for v, s in runs(w)],
        [f"{WORK}/analysis/live/coldstart.json"] if COLDWARM_ON else [],
        # every page and figure, published from <work_dir>/reports/live/ (rules/report.smk)
        published_reports(),


rule rebuild_reports:
    """Rebuild the reports from the committed reference captures (no GPU needed) and check
    that they equal the committed reports/*.md; then the same for every reference in
    more_references: this workflow run again under that reference's config file, whose work folder
    and pages are its own. (A rule without output runs every time it is asked for, so the other
    references are checked every time too.)"""
    input:
        f"{REPORTS}/reference/CHECKED",
        rules.rebuild_kernel_pages.input,
    params:
        python=PYTHON,
        config_files=list((config.get("more_references") or {}).values()),
        logs=[f"{WORK}/logs/rebuild_reference_{name}.log" for name in config.get("more_references") or {}],
    log:
        f"{WORK}/logs/rebuild_reports.log",
    threads: workflow.cores
    conda:
        config["conda_env"]
    shell:
        # --nolock: this run holds the working directory's lock; the runs write disjoint files
        "set -- {params.logs:q}; for file in {params.config_files:q}; do log=$1; shift; mkdir -p \"$(dirname \"$log\")\";"
        " echo \"rebuild_reports: the reference of $file (log: $log)\";"
        " {params.python:q} -m snakemake rebuild_reports --configfile \"$file\" --cores {threads} --nolock > \"$log\" 2>&1"
        " || {{ tail -20 \"$log\"; exit 1; }}; done 2>&1 | tee {log:q}"


rule capture_reference:
    """After profile_all on a GPU host: copy the small raw captures into the reference folder."""
    input:
        rules.profile_all.input,
    output:
        touch(f"{WORK}/reference-copied"),
    log:
        f"{WORK}/logs/capture_reference.log",
    params:
        python=PYTHON,
        captures=lambda wc, input: os.path.dirname(input[0]),
        reference=REF_DIR,
        # a run of some workloads (only_workloads) is merged in; a run of all replaces the reference,
        # with its GPU job records (reports/gpu_jobs.md, the pages' exact commands)
        merge=shlex.join(["--merge", *RUNNABLE_WORKLOADS]) if ONLY else shlex.join(["--gpu-jobs", f"{WORK}/gpu-jobs"]),
    conda:
        config["conda_env"]
    shell:
        "{params.python:q} -m analysis copy-captures --from {params.captures:q} --to {params.reference:q}"
        " {params.merge} > {log:q} 2>&1"
