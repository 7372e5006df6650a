# Shared settings and functions: resolved executables, folders, the run matrix, and the input and
# flag functions the rules use. Rules live in profile.smk, analysis.smk and report.smk.
import glob
import importlib.util
import json
import os
import sys

from workloads.registry import BY_NAME as RECIPES


def _exe(key, env_var):
    # config wins, then the environment variable, then PATH
    return config.get(key) or os.environ.get(env_var) or key


NSYS = _exe("nsys", "NSYS")
NCU = _exe("ncu", "NCU")
PYTHON = config.get("python") or sys.executable
WORK = config["work_dir"].rstrip("/")
CAPTURES = f"{WORK}/captures"
REF_DIR = config["reference"]["dir"].rstrip("/")
# GPU job records of a reference run, when the reference has them (rules/report.smk: gpu_jobs)
REF_GPU_JOBS = [d for d in [config["reference"].get("gpu_jobs")] if d and glob.glob(f"{d}/*.json")]
# Every profiled process starts with fresh, private cache folders (see workloads/tools/cold.py)
COLD = f"{PYTHON} -m workloads.tools.cold --work-dir {WORK} --gpus {config['gpus']}"
CONDA_ENV = "../environment.yml"

for _name, _c in config["workloads"].items():
    if _name not in RECIPES:
        raise ValueError(
            f"rules/config.yaml: workloads.{_name}: no such workload (have: {', '.join(RECIPES)})"
        )
    for _v in list(_c["ncu"].get("variants", [])) + list(_c.get("variant_sizes", {})):
        if _v not in RECIPES[_name].variants:
            raise ValueError(
                f"rules/config.yaml: workloads.{_name}.ncu.variants: no variant {_v!r} "
                f"(have: {', '.join(RECIPES[_name].variants)})"
            )


def _missing(recipe):
    return [m for m in recipe.requires if importlib.util.find_spec(m) is None]


# Recipes whose packages are importable here; the others are skipped (the preflight records why).
ONLY = config.get("only_workloads")
for _name in ONLY or []:
    if _name not in config["workloads"]:
        raise ValueError(f"only_workloads: no workload {_name!r} in the config (have: {', '.join(config['workloads'])})")
RUNNABLE_WORKLOADS = [
    w for w in config["workloads"] if not _missing(RECIPES[w]) and (ONLY is None or w in ONLY)
]
# the multi-process example (rules/multiprocess.smk) needs CuPy; a run of some workloads skips it
MULTIPROCESS_RUNNABLE = importlib.util.find_spec("cupy") is not None and ONLY is None


def runs(workload):
    """(variant, size) pairs of one workload, in recipe order. ``variant_sizes`` narrows the sizes
    of a variant (an eager int32 baseline at a size that fills the GPU would take minutes)."""
    c = config["workloads"][workload]
    only = c.get("variant_sizes", {})
    return [
        (v, s) for s in c["sizes"] for v in RECIPES[workload].variants if s in only.get(v, [s])
    ]


def experiment_dirs(root, workload):
    """The recipe's extra GPU runs (Recipe.experiments), one folder each."""
    return [f"{root}/{workload}/experiments/{e}" for e in RECIPES[workload].experiments]


def profiled_by_ncu(workload, variant, size):
    c = config["workloads"][workload]["ncu"]
    return size in c["sizes"] and variant in c.get("variants", RECIPES[workload].variants)


# --config ncu=none: no Nsight Compute at all (the preflight records it; no ncu rule is scheduled)
NCU_SWITCHED_OFF = NCU == "none"


def counters_readable():
    """Whether this run captures with ncu: not with --config ncu=none, nor where the preflight
    found the counters refused (ERR_NVGPUCTRPERM); read once the preflight checkpoint has run."""
    if NCU_SWITCHED_OFF:
        return False
    with open(checkpoints.preflight.get().output[0]) as f:
        return json.load(f).get("counters", {}).get("readable", True) is not False


def run_dir(root, w, v, s):
    return f"{root}/{w}/{v}/n{s}"


# --- profiling flags ---------------------------------------------------------------------------


def nsys_flags(wc=None):
    """nsys flags of the suite; with a rule's wildcards, the workload's own additions."""
    o = config["nsys_profile"]
    flags = (
        f"-t {o['trace']} --cuda-memory-usage {'true' if o['cuda_memory_usage'] else 'false'}"
        f" {o['extra_args']}"
    )
    if wc is not None and RECIPES[wc.workload].capture_range:
        # seed 001's method: record only between cuProfilerStart and cuProfilerStop, which the
        # runner calls around the compute calls when COOKBOOK_CAPTURE_RANGE=1
        flags += " --capture-range=cudaProfilerApi --capture-range-end=stop"
    return flags


def capture_range_env(wc):
    return "COOKBOOK_CAPTURE_RANGE=1" if RECIPES[wc.workload].capture_range else ""


def nvtx_include(workload, variant):
    # ncu reads a slash in --nvtx-include as its push/pop nesting separator, so the slashes
    # inside the suite's range names are escaped
    name = "\\/".join((workload, variant, "compute"))
    return f"cookbook@{name}/"


def ncu_flags(wc):
    o, w = config["ncu_profile"], config["workloads"][wc.workload]["ncu"]
    flags = [
        f"--set {o['set']}",
        f"--import-source {'yes' if o['import_source'] else 'no'}",
        f"--clock-control {o['clock_control']}",
        # only kernels launched inside this variant's compute ranges, not its setup kernels
        f"--nvtx --nvtx-include '{nvtx_include(wc.workload, wc.variant)}'",
        f"--launch-skip {w['launch_skip']}",
        f"--launch-count {w['launch_count']}",
        o["extra_args"],
    ]
    if w.get("kernel_regex"):
        # which form of the name the regex sees: C++ template kernels share one bare function name
        flags.append(f"--kernel-name-base {w.get('kernel_name_base', 'function')}")
        flags.append(f"-k 'regex:{w['kernel_regex']}'")
    return " ".join(f for f in flags if f)


def timing_setting(key):
    """A timing setting for the rule's workload: its own override, else the global one."""
    return lambda wc: config["workloads"][wc.workload].get("timing", config["timing"])[key]


def coldwarm_size(wc):
    c = config["workloads"][wc.workload]
    return c.get("coldwarm_size", min(c["sizes"]))


def coldstart_records(workload):
    return [f"{CAPTURES}/coldstart/{workload}_{v}.json" for v in RECIPES[workload].variants]


def profiled_calls(wc):
    return config["workloads"][wc.workload]["profiled_calls"]


# --- analysis inputs ---------------------------------------------------------------------------


def capture_root(capture_set):
    return CAPTURES if capture_set == "live" else REF_DIR


def run_inputs(wc):
    d = run_dir(capture_root(wc.set), wc.workload, wc.variant, wc.size)
    # reference captures keep the SQLite export and the ncu report gzipped
    gz = "" if wc.set == "live" else ".gz"
    files = {
        "timing": f"{d}/timing.json",
        "sqlite": f"{d}/nsys.sqlite{gz}",
        "nsys_run": f"{d}/nsys-run.json",
    }
    if wc.set == "live":
        if profiled_by_ncu(wc.workload, wc.variant, int(wc.size)) and counters_readable():
            files["ncu"] = f"{d}/ncu.ncu-rep"
    elif os.path.exists(f"{d}/ncu.ncu-rep.gz"):
        files["ncu"] = f"{d}/ncu.ncu-rep.gz"
    elif os.path.exists(f"{d}/ncu-raw.csv"):
        # the report file was not kept (size): the summary reads ncu's raw page instead
        files["ncu_raw"] = f"{d}/ncu-raw.csv"
    return files


# Runs held in the reference folder, discovered from its files (config may have moved on).
_ref = glob_wildcards(f"{REF_DIR}/{{workload}}/{{variant}}/n{{size}}/timing.json")
REFERENCE_RUNS = {}
for _w, _v, _s in zip(_ref.workload, _ref.variant, _ref.size):
    REFERENCE_RUNS.setdefault(_w, []).append((_v, int(_s)))
REFERENCE_WORKLOADS = [w for w in RECIPES if w in REFERENCE_RUNS]
REFERENCE_HAS_COLDSTART = bool(glob.glob(f"{REF_DIR}/coldstart/*.json"))
REFERENCE_HAS_MULTIPROCESS = os.path.exists(f"{REF_DIR}/nvtx_multiprocess/nsys.sqlite.gz")


def analyses(capture_set, workload):
    pairs = runs(workload) if capture_set == "live" else REFERENCE_RUNS[workload]
    return [f"{WORK}/analysis/{capture_set}/{workload}/{v}/n{s}.json" for v, s in pairs]


def coldstart_inputs(wc):
    """The cold/warm records of a capture set, and the nsys exports whose first calls they explain."""
    if wc.set == "live":
        records = [r for w in RUNNABLE_WORKLOADS for r in coldstart_records(w)]
        exports = [f"{run_dir(CAPTURES, w, v, s)}/nsys.sqlite" for w in RUNNABLE_WORKLOADS for v, s in runs(w)]
    else:
        records = sorted(glob.glob(f"{REF_DIR}/coldstart/*.json"))
        exports = [f"{run_dir(REF_DIR, w, v, s)}/nsys.sqlite.gz" for w, pairs in REFERENCE_RUNS.items()
                   for v, s in pairs]
    return {"records": records, "exports": exports}


def live_ground_truth(wc):
    # nsys' own summaries, kept beside the captures as ground truth for the readers' tests
    return [f"{run_dir(CAPTURES, wc.workload, v, s)}/nsys-stats" for v, s in runs(wc.workload)]


wildcard_constraints:
    # only real workloads, so that reports/{workload}.md never matches reports/index.md
    workload="|".join(RECIPES),
    variant="[a-z0-9_]+",
    size="[0-9]+",
    experiment="[a-z0-9_]+",


def reference_ceilings(workload):
    """The ceilings a reference workload's floors use: those of its own run when it was merged in
    from a partial run (analysis.captures.merge_reference), else the reference's."""
    own = f"{REF_DIR}/{workload}/ceilings.json"
    return own if os.path.exists(own) else f"{REF_DIR}/ceilings.json"


# --- single-kernel pages (rules/kernel.smk) -----------------------------------------------------


def parse_kernel_page(page):
    """(workload, variant, kernel, line_directives) of a page name; the longest workload and
    variant names that fit win, so that variants sharing a prefix (fused, fused_pool) resolve."""
    for w in sorted(RECIPES, key=len, reverse=True):
        if not page.startswith(f"{w}_"):
            continue
        rest = page[len(w) + 1 :]
        for v in sorted(RECIPES[w].variants, key=len, reverse=True):
            if rest.startswith(f"{v}_"):
                kernel = rest[len(v) + 1 :]
                line_directives = not kernel.endswith("_cuda_c")
                kernel = kernel if line_directives else kernel[: -len("_cuda_c")]
                if kernel:
                    return w, v, kernel, line_directives
    raise ValueError(
        f"kernel page {page!r}: not <workload>_<variant>_<kernel>[_cuda_c] with a known workload and variant"
        f" (workloads: {', '.join(RECIPES)})"
    )


def kernel_page_name(workload, variant, kernel, line_directives=True):
    return f"{workload}_{variant}_{kernel}" + ("" if line_directives else "_cuda_c")


def requested_kernel_page(wc):
    """The page the --config kernel_* keys ask for, and the capture it is made from: named too,
    because in a fresh checkout the committed page alone would look up to date to Snakemake and
    nothing would be profiled."""
    if NCU_SWITCHED_OFF:
        raise ValueError("kernel_page profiles one kernel under Nsight Compute: not with --config ncu=none")
    keys = ("kernel_workload", "kernel_variant", "kernel_name")
    missing = [k for k in keys if not config.get(k)]
    if missing:
        raise ValueError(
            "kernel_page needs --config kernel_workload=W kernel_variant=V kernel_name=NAME"
            f" (missing: {', '.join(missing)})"
        )
    w, v = config["kernel_workload"], config["kernel_variant"]
    if w not in RECIPES:
        raise ValueError(f"kernel_workload={w}: no such workload (have: {', '.join(RECIPES)})")
    if v not in RECIPES[w].variants:
        raise ValueError(f"kernel_variant={v}: {w} has {', '.join(RECIPES[w].variants)}")
    # line directives are Warp's; other frameworks' pages have one name whatever the key says
    ld = config["kernel_line_directives"] or RECIPES[w].framework != "warp"
    page = kernel_page_name(w, v, config["kernel_name"], ld)
    return [f"reports/kernels/{page}.md", f"{CAPTURES}/kernels/{page}/kernel.ncu-rep"]


def kernel_profile_args(wc):
    w, v, kernel, line_directives = parse_kernel_page(wc.page)
    size = config.get("kernel_size") or RECIPES[w].default_size
    ld = "--line-directives" if line_directives else "--no-line-directives"
    return f"--workload {w} --variant {v} --kernel {kernel} --size {size} {ld}"


# Pages whose captures are committed, found from the files (config may have moved on).
REFERENCE_KERNEL_PAGES = glob_wildcards(f"{REF_DIR}/kernels/{{page}}/kernel-run.json").page
