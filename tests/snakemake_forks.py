"""``python -m snakemake ARGS`` for the tests, from a fork of a process that has imported Snakemake
already (tests/python_forks.py): a start of Snakemake imports some 1,300 modules (its plugins',
pandas, SQLAlchemy) before it reads the Snakefile, and the tests start it about a hundred times."""
from __future__ import annotations

import subprocess
import sys

import python_forks

SNAKEMAKE = python_forks.Server(
    preamble="""
import snakemake.cli  # noqa: F401 - what every start of Snakemake imports
import snakemake.workflow
from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry
from snakemake_interface_logger_plugins.registry import LoggerPluginRegistry
from snakemake_interface_report_plugins.registry import ReportPluginRegistry
from snakemake_interface_scheduler_plugins.registry import SchedulerPluginRegistry
from snakemake_interface_storage_plugins.registry import StoragePluginRegistry

# each registry is a singleton that imports its installed plugins when first made (the SLURM executor's
# imports pandas): made here, every fork has them
for registry in (ExecutorPluginRegistry, LoggerPluginRegistry, ReportPluginRegistry, SchedulerPluginRegistry,
                 StoragePluginRegistry):
    registry()
# what a run imports while it reads the Snakefile and its configuration: the file opener (which
# imports requests), the schema checker and the profile's template engine
import jsonschema, smart_open, yte  # noqa: E401,F401
""",
    # the one value Snakemake keeps from where it was imported (the run directory it logs)
    child_setup="import snakemake.workflow; snakemake.workflow.Workflow._rundir = os.getcwd()",
)


def run(args, cwd, env: dict | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
    """``subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, env=env, capture_output=True,
    text=True, timeout=timeout)``, from a fork of a process that imported Snakemake."""
    return python_forks.run(SNAKEMAKE, [sys.executable, "-m", "snakemake", *map(str, args)], cwd, env, timeout)
