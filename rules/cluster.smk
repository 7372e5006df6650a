# Settings that matter only when a cluster executor submits the jobs (profiles/slurm): which rules
# Snakemake runs itself on the submit host, and which environment modules the GPU rules load.
# Both come from the `cluster` block of rules/config.yaml. Run locally, neither changes anything.

# Rules run by Snakemake on the submit host, not submitted: they read captures and write JSON,
# markdown and figures in seconds, less than a wait in the queue; the GPU rules are submitted.
# (The call the `localrules:` directive makes; the directive itself takes rule names, not a list.)
workflow.localrules(*config["cluster"]["local_rules"])

# Modules loaded (after `module purge`) before each rule that uses a GPU or a profiler, with
# `snakemake --use-envmodules`; empty: none, the rules use what is on PATH.
ENVMODULES = config["cluster"]["envmodules"]
