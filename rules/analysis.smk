# Analysis of one run's captures -> one JSON of numbers. Pure functions of the files, so the same
# rule serves the live captures (set "live") and the committed reference captures ("reference").


def capture_root(capture_set):
    return CAPTURES if capture_set == "live" else REF_DIR


def _run_inputs(wc):
    d = run_dir(capture_root(wc.set), wc.workload, wc.variant, wc.size)
    # reference captures keep the SQLite export gzipped
    sqlite = f"{d}/nsys.sqlite" if wc.set == "live" else f"{d}/nsys.sqlite.gz"
    files = {"timing": f"{d}/timing.json", "sqlite": sqlite, "nsys_run": f"{d}/nsys-run.json"}
    has_ncu = (
        int(wc.size) in config["workloads"][wc.workload]["ncu"]["sizes"]
        if wc.set == "live"
        else os.path.exists(f"{d}/ncu.ncu-rep")
    )
    if has_ncu:
        files["ncu"] = f"{d}/ncu.ncu-rep"
    return files


rule summarize_run:
    input:
        unpack(_run_inputs),
    output:
        f"{WORK}/analysis/{{set}}/{{workload}}/{{variant}}/n{{size}}.json",
    log:
        f"{WORK}/logs/analysis/{{set}}/{{workload}}_{{variant}}_n{{size}}.log",
    wildcard_constraints:
        set="live|reference",
    params:
        run_dir=lambda wc: run_dir(capture_root(wc.set), wc.workload, wc.variant, wc.size),
    shell:
        "{PYTHON} -m analysis summarize-run --run-dir {params.run_dir} --output {output} > {log} 2>&1"
