# GPU kernel-optimization cookbook: profile every recipe cold under nsys and ncu, then report.
#
#   snakemake profile_all        # on a GPU host: time, trace, profile, analyse, write reports/
#   snakemake rebuild_reports    # anywhere: rebuild the reports from the committed captures
#
# Rules live in rules/*.smk; configuration in rules/config.yaml (validated by its schema).
from snakemake.utils import min_version, validate

min_version("9.0")

configfile: "rules/config.yaml"
validate(config, "rules/schemas/config.schema.yaml")

include: "rules/common.smk"
include: "rules/profile.smk"
include: "rules/analysis.smk"
include: "rules/report.smk"


rule profile_all:
    """Every recipe, every variant and size: timed, under nsys, under ncu; then the reports."""
    default_target: True
    input:
        "reports/index.md",
        expand("reports/{workload}.md", workload=RUNNABLE_WORKLOADS),


rule rebuild_reports:
    """Rebuild the reports from the committed reference captures (no GPU needed) and check
    that they equal the committed reports/*.md."""
    input:
        f"{WORK}/rebuilt/CHECKED",


rule capture_reference:
    """After profile_all on a GPU host: copy the small raw captures into the reference folder."""
    input:
        rules.profile_all.input,
    output:
        touch(f"{WORK}/reference-copied"),
    log:
        f"{WORK}/logs/capture_reference.log",
    shell:
        "{PYTHON} -m analysis copy-captures --from {CAPTURES} --to {REF_DIR} > {log} 2>&1"
