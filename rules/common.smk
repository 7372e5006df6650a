# Shared settings: resolved executables, folders, and the run matrix.
import importlib.util
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

for _name in config["workloads"]:
    if _name not in RECIPES:
        raise ValueError(
            f"rules/config.yaml: workloads.{_name}: no such workload (have: {', '.join(RECIPES)})"
        )


def _missing(recipe):
    return [m for m in recipe.requires if importlib.util.find_spec(m) is None]


# Recipes whose packages are importable here; the others are skipped and the index says why.
RUNNABLE_WORKLOADS = [w for w in config["workloads"] if not _missing(RECIPES[w])]
SKIPPED_WORKLOADS = {
    w: "not importable: " + ", ".join(_missing(RECIPES[w]))
    for w in config["workloads"]
    if _missing(RECIPES[w])
}


def runs(workload):
    """(variant, size) pairs of one workload, in recipe order."""
    return [
        (v, s) for s in config["workloads"][workload]["sizes"] for v in RECIPES[workload].variants
    ]


def ncu_runs(workload):
    return [(v, s) for s in config["workloads"][workload]["ncu"]["sizes"] for v in RECIPES[workload].variants]


def run_dir(root, w, v, s):
    return f"{root}/{w}/{v}/n{s}"


wildcard_constraints:
    workload="[a-z0-9_]+",
    variant="[a-z0-9_]+",
    size="[0-9]+",
