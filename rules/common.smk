# Shared settings and functions: resolved executables, folders, the run matrix, and the input and
# flag functions the rules use. Rules live in profile.smk, analysis.smk and report.smk.
import glob
import importlib.util
import json
import os
import shlex
import sys

from analysis.common import layout
from analysis.readers import ncu as ncu_reader
from analysis.common.gzfiles import existing_capture
from workloads.frameworks import framework as FRAMEWORK, nsys_nvtx_flags
from workloads.registry import BY_NAME as RECIPES, facts_for_run


def _exe(key, env_var):
    # config wins, then the environment variable, then PATH
    return config.get(key) or os.environ.get(env_var) or key


def _checked_work_dir(path):
    """The work folder: relative inside the repository, or absolute and not the filesystem root;
    no ``~`` (the shell does not expand it here: a literal folder named ~ would appear) and no empty
    components (``//``). Its cache folder is the only place the suite deletes from."""
    problem = None
    if path.startswith("~"):
        problem = "starts with ~ (not expanded here): give the folder itself"
    elif os.path.isabs(path) and not path.strip("/"):
        problem = "is the filesystem root"
    elif "//" in path.rstrip("/") or not path.strip():
        problem = "has an empty component (//)"
    elif not os.path.isabs(path) and os.path.normpath(path).split(os.sep)[0] in ("..", "."):
        problem = "is not inside the repository (a relative work_dir must name a folder below it)"
    else:
        from workloads.work_dir import system_folder_problem

        problem = system_folder_problem(path)
    if problem:
        raise ValueError(f"work_dir={path!r} {problem}")
    return path.rstrip("/")


NSYS = _exe("nsys", "NSYS")
NCU = _exe("ncu", "NCU")
PYTHON = config.get("python") or sys.executable
WORK = _checked_work_dir(config["work_dir"])
CAPTURES = f"{WORK}/captures"
REF_DIR = config["reference"]["dir"].rstrip("/")
# GPU job records of a reference run, when the reference has them (rules/report.smk: gpu_jobs)
REF_GPU_JOBS = [d for d in [config["reference"].get("gpu_jobs")] if d and glob.glob(f"{d}/*.json")]
# Every profiled process starts with fresh, private cache folders (see workloads/harness/cold.py)
# (quoted here: rules paste it into their shell command as it is)
COLD = shlex.join([PYTHON, "-m", "workloads.harness.cold", "--work-dir", WORK, "--gpus", str(config["gpus"])])
# with --use-conda: the environment file of the CUDA major version the driver runs
CONDA_ENV = f"../{config['conda_env']}"


def _split_cores_for_one_gpu():
    """On a machine with one GPU that the runs share: the run holding the GPU gets half the cores to
    itself, and Snakemake with every other job it starts keeps to the other half
    (workloads.harness.gpu_turn.split_cores), so that no job's host work slows a measured run."""
    from workloads import settings
    from workloads.harness import gpu_turn
    from workloads.tools.gpu_jobs import physical_gpus

    if config["gpus"] != 1 or not physical_gpus():
        return None
    # a nested Snakemake (rebuild_reports' per-reference runs) inherits the split: said once
    made = not settings.text(gpu_turn.HOLDER_CORES_VARIABLE)
    split = gpu_turn.split_cores()
    if split and made:
        print(f"CPU cores: {gpu_turn.core_text(split[0])} for the run that holds the GPU, "
              f"{gpu_turn.core_text(split[1])} for everything else", file=sys.stderr)
    return split


CORE_SPLIT = _split_cores_for_one_gpu()

# Every recipe's facts (workloads/<recipe>/profile.yaml) under this run's preset, with the config's
# one-off overrides laid over them; a recipe without facts, or facts naming an unknown step, stop here.
WORKLOADS = facts_for_run(config["preset"], config.get("workloads"))


def _missing(recipe):
    return [m for m in recipe.requires if importlib.util.find_spec(m) is None]


def requested_targets():
    """The targets asked for on the command line (Snakemake's default target when none), for
    messages; empty in a job a cluster executor runs, which is given its job, not the targets.
    Known once Snakemake plans the jobs (in input and params functions), not while it parses."""
    dag = getattr(workflow, "dag_settings", None)
    if dag is None or getattr(dag, "target_jobs", None):
        return []
    return sorted(dag.targets) or ["profile_all"]


onstart:
    # what the user asked for, named in the preflight's message: its job inherits the environment. Not
    # a param of the rule, which Snakemake compares with the last run's: `snakemake capture_reference`
    # after `snakemake profile_all` re-ran the preflight and, as every GPU job reads its record, the
    # whole pipeline
    from workloads.harness.preflight import TARGETS_VARIABLE
    from analysis.common.leftovers import clean_up

    os.environ[TARGETS_VARIABLE] = " ".join(requested_targets())
    # what a killed run left: expanded captures in TMPDIR, half-written outputs (said on stderr)
    clean_up(WORK)


# Recipes whose packages are importable here; the others are skipped (the preflight records why).
ONLY = config.get("only_workloads")
for _name in ONLY or []:
    if _name not in WORKLOADS:
        raise ValueError(f"only_workloads: no workload {_name!r} in the config (have: {', '.join(WORKLOADS)})")
RUNNABLE_WORKLOADS = [
    w for w in WORKLOADS if not _missing(RECIPES[w]) and (ONLY is None or w in ONLY)
]
# the multi-process example (rules/multiprocess.smk) needs CuPy; a run of some workloads skips it
MULTIPROCESS_RUNNABLE = (config.get("multiprocess", True) and importlib.util.find_spec("cupy") is not None
                         and ONLY is None)
# the cold/warm start-ups and the recipes' experiments (off in profiles/lab)
COLDWARM_ON = bool(config.get("coldwarm", True))
EXPERIMENTS_ON = bool(config.get("experiments", True))


_SKIPS_SAID = []


def say_what_profile_all_skips(wc):
    """An input function of profile_all that adds no input: while Snakemake plans profile_all (a
    dry run too, before any job), it says once which recipes are left out here and why."""
    if _SKIPS_SAID:
        return []
    _SKIPS_SAID.append(True)
    from workloads.harness.preflight import recipe_availability

    skipped = {w: why for w, why in recipe_availability().items()
               if why and w in WORKLOADS and (ONLY is None or w in ONLY)}
    if ONLY is None and importlib.util.find_spec("cupy") is None:
        skipped["nvtx_multiprocess"] = "not importable here: cupy"
    if skipped:
        lines = "\n".join(f"  - {w}: {why}" for w, why in skipped.items())
        print(f"profile_all skips {len(skipped)} recipe(s) here (install their packages to profile them):\n{lines}",
              file=sys.stderr)
    return []


def runs(workload):
    """(variant, size) pairs of one workload, in recipe order. ``variant_sizes`` narrows the sizes
    of a variant (an eager int32 baseline at a size that fills the GPU would take minutes)."""
    c = WORKLOADS[workload]
    only = c.get("variant_sizes", {})
    return [
        (v, s) for s in c["sizes"] for v in RECIPES[workload].variants if s in only.get(v, [s])
    ]


def experiment_dirs(root, workload):
    """The recipe's extra GPU runs (Recipe.experiments), one folder each; none for this run's
    captures when experiments are off."""
    if root == CAPTURES and not EXPERIMENTS_ON:
        return []
    return [f"{root}/{workload}/experiments/{e}" for e in RECIPES[workload].experiments]


def profiled_by_ncu(workload, variant, size):
    c = WORKLOADS[workload]["ncu"]
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
    return layout.run_dir(root, w, v, s)


# one live run folder, as a pattern of the rules' wildcards (analysis/common/layout.py names its files)
LIVE_RUN = run_dir(CAPTURES, "{workload}", "{variant}", "{size}")


# --- profiling flags ---------------------------------------------------------------------------


def extra_args(key):
    """The config's ``<key>.extra_args``: split into arguments as a shell would, and each one quoted,
    so that no shell syntax in it (;, |, $(...)) ever runs."""
    try:
        return shlex.split(config[key]["extra_args"] or "")
    except ValueError as e:
        raise ValueError(f"{key}.extra_args={config[key]['extra_args']!r}: {e}") from None


# split once when the config is read: an unbalanced quote is refused under its key before any rule runs
for _key in ("nsys_profile", "ncu_profile"):
    extra_args(_key)


def nsys_flags(wc=None):
    """nsys flags of the suite; with a rule's wildcards, the workload's own additions. Quoted:
    rules paste them into their shell command as they are."""
    o = config["nsys_profile"]
    flags = ["-t", o["trace"], "--cuda-memory-usage", "true" if o["cuda_memory_usage"] else "false",
             *extra_args("nsys_profile")]
    if wc is not None and uses_capture_range(wc.workload):
        # the HPC-center guide's method: record only between cuProfilerStart and cuProfilerStop,
        # which the runner calls around the compute calls when COOKBOOK_CAPTURE_RANGE=1
        flags += ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]
    if wc is not None:
        # the framework's own NVTX domains that nsys could not always process (JAX: XLA's)
        flags += nsys_nvtx_flags(FRAMEWORK(RECIPES[wc.workload].framework))
    return shlex.join(flags)


def uses_capture_range(workload):
    """Whether the workload's nsys runs trace only inside its capture range: it declares one
    (Recipe.capture_range) and the run asks for it (nsys_profile.capture_range)."""
    return RECIPES[workload].capture_range and config["nsys_profile"]["capture_range"]


def capture_range_env(wc):
    return "COOKBOOK_CAPTURE_RANGE=1" if uses_capture_range(wc.workload) else ""


def nvtx_include(workload, variant):
    # ncu reads a slash in --nvtx-include as its push/pop nesting separator, so the slashes
    # inside the suite's range names are escaped
    name = "\\/".join((workload, variant, "compute"))
    return f"cookbook@{name}/"


def ncu_flags(wc):
    o, w = config["ncu_profile"], WORKLOADS[wc.workload]["ncu"]
    # sections, when given (for all recipes, or one recipe's own), replace the set: ncu collects
    # exactly those (e.g. every section but the instrumented ones, which only the kernel pages read)
    sections = w.get("sections") or o.get("sections")
    if wc.variant not in w.get("full_variants", [wc.variant]):
        # the metrics the page reads and no more: ~2.5x fewer passes per launch, no ncu rules
        chosen = ncu_reader.metrics_only_args(tensor_ops=w.get("tensor_ops", True))
    elif sections:
        chosen = [a for s in sections for a in ("--section", s)]
    else:
        chosen = ["--set", o["set"]]
    flags = [
        *chosen,
        "--import-source", "yes" if o["import_source"] else "no",
        "--clock-control", o["clock_control"],
        # only kernels launched inside this variant's compute ranges, not its setup kernels
        "--nvtx", "--nvtx-include", nvtx_include(wc.workload, wc.variant),
        "--launch-skip", str(w["launch_skip"]),
        "--launch-count", str(w["launch_count"]),
        *extra_args("ncu_profile"),
    ]
    if w.get("kernel_regex"):
        # which form of the name the regex sees: C++ template kernels share one bare function name
        flags += ["--kernel-name-base", w.get("kernel_name_base", "function")]
        flags += ["-k", f"regex:{w['kernel_regex']}"]
    return shlex.join(flags)  # quoted: rules paste them into their shell command as they are


def timing_setting(key):
    """A timing setting for the rule's workload: its own override, else the global one."""
    return lambda wc: {**config["timing"], **WORKLOADS[wc.workload].get("timing", {})}[key]


#: the timed run's priority among the jobs ready to start (experiments 20, ceilings 50)
TIMED_PRIORITY = 10
#: that of a recipe's timed_first steps: before the experiments, right after the ceilings
TIMED_FIRST_PRIORITY = 30


def timed_priority(wc):
    """A timed run's priority: TIMED_FIRST_PRIORITY for the recipe's ``timed_first`` variants, whose
    setups compile on every core for long and go fastest while the other jobs' host work has barely
    begun; TIMED_PRIORITY otherwise."""
    first = WORKLOADS[wc.workload].get("timed_first") or []
    return TIMED_FIRST_PRIORITY if wc.variant in first else TIMED_PRIORITY


def coldwarm_size(wc):
    c = WORKLOADS[wc.workload]
    return c.get("coldwarm_size", min(c["sizes"]))


def l2_records(capture_set, workload):
    """The warm and cold-L2 timed records of a workload (``l2_modes``): this run's from the
    configuration, the reference's as its files are."""
    if capture_set != "live":
        return sorted(glob.glob(f"{REF_DIR}/{workload}/{layout.L2_DIR}/*/n*/timing-*.json")
                      + glob.glob(f"{REF_DIR}/{workload}/{layout.L2_DIR}/*/n*/timing-*.json{layout.GZIP_SUFFIX}"))
    c = WORKLOADS[workload].get("l2_modes") or {"sizes": [], "variants": []}
    return [f"{CAPTURES}/{workload}/{layout.L2_DIR}/{v}/n{s}/timing-{m}.json"
            for s in c["sizes"] for v in RECIPES[workload].variants if v in c["variants"] for m in ("warm", "cold-l2")]


def coldwarm_variants(workload):
    """The variants whose start-up the cold/warm runs measure: ``coldwarm_variants`` (in recipe
    order), else all; none when the run leaves the cold/warm starts out (``coldwarm: false``)."""
    if not COLDWARM_ON:
        return []
    chosen = WORKLOADS[workload].get("coldwarm_variants")
    return [v for v in RECIPES[workload].variants if chosen is None or v in chosen]


def coldwarm_driver_cache_args(wc):
    """``--driver-cache-measured-on STEP`` for every cold/warm step but the one that measures the
    driver cache's share for its recipe (``coldwarm_driver_cache_variant``, else its first step)."""
    steps = coldwarm_variants(wc.workload)
    measured = WORKLOADS[wc.workload].get("coldwarm_driver_cache_variant") or (steps[0] if steps else None)
    if measured is not None and measured not in steps:
        raise ValueError(f"workloads/{wc.workload}/profile.yaml: coldwarm_driver_cache_variant {measured!r} "
                         f"is not among its cold/warm steps {steps}")
    return "" if wc.variant == measured else shlex.join(["--driver-cache-measured-on", measured])


def coldstart_records(workload):
    return [f"{CAPTURES}/{layout.COLDSTART}/{workload}_{v}.json" for v in coldwarm_variants(workload)]


def profiled_calls(wc):
    return WORKLOADS[wc.workload]["profiled_calls"]


def ncu_calls(wc):
    """Calls in a step's ncu run: one by default, whose launches ncu's skip and count then pick from
    (a second call would launch the same kernels again, each one more profile of the same code)."""
    return WORKLOADS[wc.workload]["ncu"].get("calls", 1)


# --- analysis inputs ---------------------------------------------------------------------------


def capture_root(capture_set):
    return CAPTURES if capture_set == "live" else REF_DIR


def run_inputs(wc):
    if wc.set != "live":
        return {"summaries": reference_summaries(wc.workload)}
    d = run_dir(CAPTURES, wc.workload, wc.variant, wc.size)
    files = {
        "timing": f"{d}/{layout.TIMING}",
        "sqlite": f"{d}/{layout.NSYS_EXPORT}",
        "nsys_run": f"{d}/{layout.NSYS_RUN}",
    }
    if profiled_by_ncu(wc.workload, wc.variant, int(wc.size)) and counters_readable():
        files["ncu"] = f"{d}/{layout.NCU_REPORT}"
        # not read by the summary (it reads the report); made beside it for capture_reference
        files["ncu_raw_page"] = f"{d}/{layout.NCU_RAW}"
    return files


def reference_run_inputs(workload, variant, size):
    """The files the summary of one reference run reads: they keep the SQLite export and the ncu
    report gzipped, and the timed record too (analysis.common.gzfiles.kept_gzipped; older ones plain)."""
    d = run_dir(REF_DIR, workload, variant, size)
    files = {
        "timing": existing_capture(d, layout.TIMING) or f"{d}/{layout.TIMING}",
        "sqlite": f"{d}/{layout.NSYS_EXPORT}{layout.GZIP_SUFFIX}",
        "nsys_run": f"{d}/{layout.NSYS_RUN}",
    }
    if os.path.exists(f"{d}/{layout.NCU_REPORT}{layout.GZIP_SUFFIX}"):
        files["ncu"] = f"{d}/{layout.NCU_REPORT}{layout.GZIP_SUFFIX}"
    elif existing_capture(d, layout.NCU_RAW):
        # the report file was not kept (size): the summary reads ncu's raw page instead
        files["ncu_raw"] = existing_capture(d, layout.NCU_RAW)
    return files


def reference_summaries(workload):
    """The folder where summarize_reference writes a reference workload's summaries, <variant>/n<size>.json."""
    return f"{WORK}/analysis/reference-runs/{workload}"


def summarize_run_command(wc, input, output):
    """summarize_run's command, quoted: the live run summarized; a reference run's summary copied."""
    if wc.set != "live":
        return shlex.join(["cp", f"{input.summaries}/{wc.variant}/n{wc.size}.json", output[0]])
    return shlex.join([PYTHON, "-m", "analysis", "summarize-run", "--run-dir",
                       run_dir(CAPTURES, wc.workload, wc.variant, wc.size), "--output", output[0]])


# Runs held in the reference folder, discovered from its files (config may have moved on).
REFERENCE_RUNS = {}
for _name in (layout.TIMING, layout.TIMING + layout.GZIP_SUFFIX):
    _ref = glob_wildcards(f"{layout.run_dir(REF_DIR, '{workload}', '{variant}', '{size}')}/{_name}")
    for _w, _v, _s in zip(_ref.workload, _ref.variant, _ref.size):
        if "/" not in _w + _v + _s and (_v, int(_s)) not in REFERENCE_RUNS.get(_w, []):
            REFERENCE_RUNS.setdefault(_w, []).append((_v, int(_s)))
REFERENCE_WORKLOADS = [w for w in RECIPES if w in REFERENCE_RUNS]
REFERENCE_HAS_COLDSTART = bool(glob.glob(f"{REF_DIR}/{layout.COLDSTART}/*.json"))
REFERENCE_HAS_MULTIPROCESS = os.path.exists(f"{REF_DIR}/nvtx_multiprocess/{layout.NSYS_EXPORT}{layout.GZIP_SUFFIX}")


def analyses(capture_set, workload):
    pairs = runs(workload) if capture_set == "live" else REFERENCE_RUNS[workload]
    return [f"{WORK}/analysis/{capture_set}/{workload}/{v}/n{s}.json" for v, s in pairs]


def coldstart_inputs(wc):
    """The cold/warm records of a capture set, and the nsys exports whose first calls they explain."""
    if wc.set == "live":
        records = [r for w in RUNNABLE_WORKLOADS for r in coldstart_records(w)]
        exports = [f"{run_dir(CAPTURES, w, v, s)}/{layout.NSYS_EXPORT}" for w in RUNNABLE_WORKLOADS for v, s in runs(w)]
    else:
        records = sorted(glob.glob(f"{REF_DIR}/{layout.COLDSTART}/*.json"))
        exports = [f"{run_dir(REF_DIR, w, v, s)}/{layout.NSYS_EXPORT}{layout.GZIP_SUFFIX}" for w, pairs in REFERENCE_RUNS.items()
                   for v, s in pairs]
    return {"records": records, "exports": exports}


def live_ground_truth(wc):
    # nsys' own summaries, kept beside the captures as ground truth for the readers' tests
    return [f"{run_dir(CAPTURES, wc.workload, v, s)}/{layout.NSYS_STATS}" for v, s in runs(wc.workload)]


wildcard_constraints:
    # only real workloads, so that reports/{workload}.md never matches reports/index.md
    workload="|".join(RECIPES),
    variant="[a-z0-9_]+",
    size="[0-9]+",
    experiment="[a-z0-9_]+",


def reference_ceilings(workload):
    """The ceilings a reference workload's floors use: those of its own run when it was merged in
    from a partial run (analysis.readers.captures.merge_reference), else the reference's."""
    own = f"{REF_DIR}/{workload}/{layout.CEILINGS}"
    return own if os.path.exists(own) else f"{REF_DIR}/{layout.CEILINGS}"


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
    # frameworks without two line views (workloads/frameworks.py) have one page name whatever the key says
    ld = config["kernel_line_directives"] or not FRAMEWORK(RECIPES[w].framework).line_directives
    page = kernel_page_name(w, v, config["kernel_name"], ld)
    return [f"reports/kernels/{page}.md", f"{CAPTURES}/kernels/{page}/kernel.ncu-rep"]


def kernel_profile_args(wc):
    w, v, kernel, line_directives = parse_kernel_page(wc.page)
    size = config.get("kernel_size") or RECIPES[w].default_size
    ld = "--line-directives" if line_directives else "--no-line-directives"
    return shlex.join(["--workload", w, "--variant", v, "--kernel", kernel, "--size", str(size), ld,
                       "--launch-skip", str(config.get("kernel_launch_skip") or 0)])


# Pages whose captures are committed, found from the files (config may have moved on): in every
# reference folder (a kernel page is captured on one GPU and kept in that GPU's reference).
def _reference_kernel_pages():
    found = {}
    for run in sorted(glob.glob("reports/reference/*/kernels/*/kernel-run.json")):
        page_dir = os.path.dirname(run)
        page = os.path.basename(page_dir)
        if page in found:
            raise ValueError(f"kernel page {page}: captures in both {found[page]} and {page_dir}; keep one")
        found[page] = page_dir
    return found


REFERENCE_KERNEL_DIRS = _reference_kernel_pages()
REFERENCE_KERNEL_PAGES = sorted(REFERENCE_KERNEL_DIRS)


def step_cold(wc, profiler=None):
    """The cold wrapper (COLD) for one of a step's measurement runs (timed, timed_l2, nsys, ncu):
    with ``--turns`` (on one GPU the run takes the GPU only from its setup until its memory is freed or its exit,
    workloads/harness/gpu_turn.py: other runs' imports and profiler start-up and shutdown go on beside it),
    and ``--shared-cache <recipe>`` when the recipe's framework compiles outside what its runs
    measure (Framework.shared_compile_cache: JAX, up to 25 s per process otherwise; Warp; PyCUDA's
    nvcc), so that a program is compiled once per pipeline run, not once per process. The
    experiments a recipe lists in experiments_in_turns take turns too (experiment_cold). The other
    experiments and the suite's own runs use COLD as it is: they hold the GPU throughout. Cold/warm
    starts (workloads.tools.coldwarm) take each process's turn before its launch, so that its
    imports and setup run holding the GPU on the holder's cores, since start-ups that took their turn
    after their imports measured longer (docs/measurement.md).

    ``profiler="nsys"``: the shared cache only for a step whose setup compiles every program its
    calls run (Recipe.compiles_in_setup): the nsys run's first call is the cold-start page's "first
    call of a cold process", the same whether setup compiled or loaded. Warp's baseline builds its
    module in its first call, so its nsys run compiles for itself."""
    if not shares_compile_cache(wc, profiler):
        return f"{COLD} --turns"
    return f"{COLD} --turns --shared-cache {shlex.quote(wc.workload)}"


def shares_compile_cache(wc, profiler=None):
    """Whether this run of the step loads the recipe's shared compile cache (see step_cold)."""
    recipe = RECIPES[wc.workload]
    if not FRAMEWORK(recipe.framework).shared_compile_cache:
        return False
    return profiler != "nsys" or wc.variant in recipe.compiles_in_setup


def compiled_first(wc, profiler=None):
    """For a run that loads the recipe's shared compile cache (JAX, Warp, PyCUDA; see step_cold):
    the step's timed run, so that the cache is filled before the ncu or nsys run starts, which then
    loads the programs instead of compiling them under the profiler, where JAX's ncu runs that
    compiled crashed (docs/measurement.md). Ordering the runs also means two runs never compile the
    same program into the folder at once."""
    if not shares_compile_cache(wc, profiler):
        return []
    return timed_record_of(wc.workload, wc.variant, int(wc.size))


def timed_record_of(workload, variant, size):
    """[the step's timed record] when this run times that step at that size, else []: the run that
    fills a recipe's shared compile cache, which others wait for."""
    if (variant, size) not in runs(workload):
        return []
    return [f"{run_dir(CAPTURES, workload, variant, size)}/{layout.TIMING}"]


def _experiment_cache_step(wc):
    """(variant, size) of the step whose compiled programs the experiment loads
    (Recipe.experiments_from_cache), or None: it compiles for itself."""
    recipe = RECIPES[wc.workload]
    if not FRAMEWORK(recipe.framework).shared_compile_cache:
        return None
    return next(((v, s) for e, v, s in recipe.experiments_from_cache if e == wc.experiment), None)


def experiment_cold(wc):
    """The cold wrapper of an experiment: it holds the GPU throughout, unless its processes take
    turns (Recipe.experiments_in_turns), with fresh caches, except the recipe's shared compile
    cache where the experiment loads its programs from there."""
    cold = f"{COLD} --turns" if wc.experiment in RECIPES[wc.workload].experiments_in_turns else COLD
    if _experiment_cache_step(wc) is None:
        return cold
    return f"{cold} --shared-cache {shlex.quote(wc.workload)}"


def experiment_compiled_first(wc):
    """The timed run that fills the cache an experiment loads (see experiment_cold), when this run
    has it; without it, the experiment's first process compiles the programs for the others."""
    step = _experiment_cache_step(wc)
    return [] if step is None else timed_record_of(wc.workload, *step)


def measurement_env(wc):
    """``K=V ...`` a step's timed, nsys and ncu runs add for the workload's framework (Framework.measurement_env)."""
    added = FRAMEWORK(RECIPES[wc.workload].framework).measurement_env
    return " ".join(f"{k}={shlex.quote(str(v))}" for k, v in sorted(added.items()))


# --- reports (rules/report.smk): one rule per product, {set} = live | reference -----------------

from analysis.report.report_sections import declared_figures, declared_inputs

#: figure file name -> the workload whose report's sections write it (Recipe.sections' FIGURES)
SECTION_FIGURES = {f: w for w in RECIPES for f in declared_figures(RECIPES[w])}


def set_workloads(capture_set):
    return RUNNABLE_WORKLOADS if capture_set == "live" else REFERENCE_WORKLOADS


def set_has_multiprocess(capture_set):
    return MULTIPROCESS_RUNNABLE if capture_set == "live" else REFERENCE_HAS_MULTIPROCESS


def report_inputs(wc):
    w, live = wc.workload, wc.set == "live"
    root = f"{capture_root(wc.set)}/{w}"
    files = {
        "analyses": analyses(wc.set, w),
        "ceilings": f"{CAPTURES}/ceilings.json" if live else reference_ceilings(w),
        # what the recipe's sections read (analysis/report/sections/<recipe>_<section>.py: INPUTS)
        "sections": [f"{root}/{p}" for p in declared_inputs(RECIPES[w], with_experiments=has_experiments(wc.set, w))],
        # the tool versions the report's provenance shows
        "preflight": f"{CAPTURES if live else REF_DIR}/preflight.json",
        # the steps timed warm and with L2 scrubbed (l2_modes)
        "l2": l2_records(wc.set, w),
    }
    if not live:
        # the GPU job records of the reference run, when it has them: the exact commands it ran
        files["gpu_jobs"] = REF_GPU_JOBS
    if live:
        files["ground_truth"] = live_ground_truth(wc)
        files["experiments"] = experiment_dirs(CAPTURES, w)
    return files


def has_experiments(capture_set, workload) -> bool:
    """Whether the capture set holds the recipe's experiments: this run's as configured; a
    reference's when it kept them (a reference captured with experiments off has none)."""
    if capture_set == "live":
        return EXPERIMENTS_ON
    return os.path.isdir(f"{REF_DIR}/{workload}/{layout.EXPERIMENTS}")


def run_options(wc, sections=True) -> str:
    """What a live page says of its run (``run_label``) and whether it has the experiments'
    sections; a reference page says only the latter, when its reference has no experiments."""
    if wc.set != "live":
        return "--without-experiments" if sections and not has_experiments(wc.set, wc.workload) else ""
    opts = ["--run-label", config["run_label"]] if config.get("run_label") else []
    if sections and not EXPERIMENTS_ON:
        opts.append("--without-experiments")
    return shlex.join(opts)


def gpu_jobs_option(wc, input) -> str:
    """``--gpu-jobs DIR`` for ``analysis report``: this run's records (live) or the reference's."""
    folder = f"{WORK}/gpu-jobs" if wc.set == "live" else (input.gpu_jobs[0] if input.gpu_jobs else None)
    return f"--gpu-jobs {shlex.quote(folder)}" if folder else ""


def index_inputs(wc):
    s, live = wc.set, wc.set == "live"
    ws = set_workloads(s)
    has_coldstart = COLDWARM_ON if live else REFERENCE_HAS_COLDSTART
    return {
        "reports": [f"{WORK}/reports/{s}/{w}.md" for w in ws],
        "analyses": [a for w in ws for a in analyses(s, w)],
        "ceilings": f"{CAPTURES if live else REF_DIR}/ceilings.json",
        "preflight": f"{CAPTURES if live else REF_DIR}/preflight.json",
        "coldstart": [f"{WORK}/analysis/{s}/coldstart.json"] if has_coldstart else [],
        "multiprocess": [f"{WORK}/reports/{s}/nvtx_multiprocess.md"] if set_has_multiprocess(s) else [],
    }


def gpu_jobs_inputs(wc):
    if wc.set == "reference":
        return {"records": REF_GPU_JOBS}
    # after every GPU job of the run: the records are complete
    return {
        "analyses": [a for w in RUNNABLE_WORKLOADS for a in analyses("live", w)],
        "experiments": [d for w in RUNNABLE_WORKLOADS for d in experiment_dirs(CAPTURES, w)],
        "coldstart": [f"{WORK}/analysis/live/coldstart.json"] if COLDWARM_ON else [],
        "ceilings": f"{CAPTURES}/ceilings.json",
        "multiprocess": [f"{WORK}/reports/live/nvtx_multiprocess.md"] if MULTIPROCESS_RUNNABLE else [],
    }


def published_source(wc):
    """The live file `publish` copies to reports/<product>; a section's figure has no rule of its
    own, so its source's producer, the workload's page, is the input."""
    name = wc.product.removeprefix("figures/")
    if wc.product.startswith("figures/") and name in SECTION_FIGURES:
        return f"{WORK}/reports/live/{SECTION_FIGURES[name]}.md"
    return f"{WORK}/reports/live/{wc.product}"


def published_reports():
    """Every product profile_all publishes into reports/."""
    out = ["reports/index.md", "reports/gpu_jobs.md", "reports/figures/gpu_jobs.png"]
    for w in RUNNABLE_WORKLOADS:
        out.append(f"reports/{w}.md")
        out += [f"reports/figures/{w}_{f}.png" for f in REPORT_FIGURES]
        out += [f"reports/figures/{f}" for f in declared_figures(RECIPES[w])]
    if MULTIPROCESS_RUNNABLE:
        out += ["reports/nvtx_multiprocess.md", "reports/figures/nvtx_multiprocess_timeline.png"]
    return out


def kernel_page_inputs(wc):
    if wc.set == "live":
        return {"rep": f"{CAPTURES}/kernels/{wc.page}/kernel.ncu-rep", "run": f"{CAPTURES}/kernels/{wc.page}/kernel-run.json"}
    page_dir = REFERENCE_KERNEL_DIRS[wc.page]
    return {"rep": f"{page_dir}/kernel.ncu-rep.gz", "run": f"{page_dir}/kernel-run.json"}


# --- comparing two runs (rules/compare.smk) -----------------------------------------------------


def compare_side(key):
    """An input function: the timed captures under the folder ``--config <key>=DIR`` names."""
    def inputs(wc):
        folder = config.get(key)
        if not folder:
            raise ValueError(f"snakemake compare needs --config {key}=<folder of timed captures>")
        return sorted(glob.glob(f"{folder.rstrip('/')}/**/timing.json", recursive=True)
                      + glob.glob(f"{folder.rstrip('/')}/**/timing.json.gz", recursive=True))

    return inputs


def optional_figures_published(product):
    """Shell commands publishing a workload page's OPTIONAL_FIGURES with it: each copied where the
    report drew it, else an earlier copy removed."""
    workload = product[: -len(".md")] if product.endswith(".md") else None
    if workload not in RECIPES:
        return ""
    out = ""
    for f in OPTIONAL_FIGURES:
        src = shlex.quote(f"{REPORTS}/live/figures/{workload}_{f}.png")
        dst = shlex.quote(f"reports/figures/{workload}_{f}.png")
        out += f"; if [ -e {src} ]; then cp {src} {dst}; else rm -f {dst}; fi"
    return out
