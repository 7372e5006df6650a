"""The JSON records the analysis commands read, one JSON schema per kind, checked when read: a
record of the wrong shape (a number where a text belongs, a list where a mapping does) is an
AnalysisInputError naming the file and the field, before any reader indexes into it.

Each schema states what the readers take from a record, not everything its writer puts there:
fields a reader reads with a default may be absent, and unknown fields are left alone (records
of older and newer suites differ in what else they carry)."""
from __future__ import annotations

from analysis.model.run_summary import check_json, load_json

_TEXT = {"type": "string"}
_TEXT_OR_NULL = {"type": ["string", "null"]}
_INT = {"type": "integer"}
_COUNT = {"type": "integer", "minimum": 0}
_POSITIVE = {"type": "integer", "minimum": 1}
_SECONDS = {"type": "number", "minimum": 0}
_NUMBER_OR_NULL = {"type": ["number", "null"]}
_TEXTS = {"type": "array", "items": _TEXT}
_TEXT_MAP = {"type": "object", "additionalProperties": _TEXT}

#: workloads/harness/provenance.py's record of where a capture was made: every field may be missing (an
#: older suite, a host without a GPU), none may be of another type
PROVENANCE = {
    "type": "object",
    "properties": {
        "gpus": {"type": ["array", "null"], "items": {
            "type": "object", "properties": {"name": _TEXT, "memory_total": _TEXT_OR_NULL, "uuid": _TEXT_OR_NULL}}},
        "driver_version": _TEXT_OR_NULL, "cuda_runtime": {"type": ["string", "integer", "null"]},
        "cuda_driver_api": {"type": ["string", "integer", "null"]}, "python": _TEXT_OR_NULL,
        "git_commit": _TEXT_OR_NULL, "date_utc": _TEXT_OR_NULL, "host": _TEXT_OR_NULL,
        "packages": {"type": ["object", "null"], "additionalProperties": _TEXT_OR_NULL},
        "compile_cache": {"type": ["object", "null"], "additionalProperties": _TEXT_OR_NULL},
    },
}

#: workloads/tools/kernel_profile.py's kernel-run.json: what a kernel page's provenance shows
KERNEL_RUN = {
    "type": "object",
    "required": ["workload", "variant", "size", "kernel", "framework", "kernel_regex", "command", "provenance"],
    "properties": {
        "workload": _TEXT, "variant": _TEXT, "size": _POSITIVE, "kernel": _TEXT, "framework": _TEXT,
        "kernel_regex": _TEXT, "profiled_kernel": _TEXT, "command": {**_TEXTS, "minItems": 1},
        "provenance": PROVENANCE, "environment": _TEXT_MAP, "launch_skip": _COUNT,
        "line_directives": {"type": ["boolean", "null"]}, "ncu_version": _TEXT_OR_NULL,
        "source_folders": _TEXTS, "cache_dir": _TEXT_OR_NULL, "report": _TEXT_OR_NULL,
    },
}

#: workloads/nvtx_multiprocess's run.json: the multi-process page's provenance
MULTIPROCESS_RUN = {
    "type": "object",
    "properties": {"provenance": PROVENANCE, "workload": _TEXT, "sizes": {"type": "array", "items": _POSITIVE},
                   "children": {"type": "array", "items": {"type": "object"}}, "host_wall_s": _SECONDS},
}

_PHASES = {"type": "object",
           "required": ["time_to_first_result_s", "interpreter_and_suite_import_s", "setup_s", "first_call_s"],
           "additionalProperties": {"type": "number", "minimum": 0}}
#: one start: measured (its phases), or skipped with the reason
_COLD_RUN = {"type": "object",
             "if": {"required": ["skipped"]},
             "then": {"properties": {"skipped": _TEXT, "short": _TEXT, "measured_on": _TEXT}},
             "else": {"required": ["phases", "steady_call_ms"],
                      "properties": {"phases": _PHASES, "steady_call_ms": {"type": "number", "minimum": 0},
                                     "relative_error": _NUMBER_OR_NULL}}}

#: workloads/tools/coldwarm.py's record of one step's cold and warm starts
COLDSTART_RECORD = {
    "type": "object",
    "required": ["workload", "variant", "runs"],
    "properties": {
        # names of folders the summary opens: one path component
        "workload": {"type": "string", "pattern": "^[A-Za-z0-9_.-]+$"},
        "variant": {"type": "string", "pattern": "^[A-Za-z0-9_.-]+$"},
        "size": _POSITIVE, "provenance": PROVENANCE,
        "runs": {"type": "object", "required": ["cold", "warm", "warm_driver_cache_off"],
                 "properties": {"cold": {**_COLD_RUN["else"], "type": "object"},
                                "warm": {**_COLD_RUN["else"], "type": "object"}},
                 "additionalProperties": _COLD_RUN},
        "driver_cache_after_cold": {"type": ["object", "null"], "properties": {"bytes": _COUNT, "files": _COUNT}},
    },
}

#: ``python -m analysis coldstart``'s output, which the index reads
COLDSTART_SUMMARY = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["workload", "variant", "runs"],
        "properties": {**COLDSTART_RECORD["properties"],
                       "nsys_first_call": {"type": ["object", "null"]}},
    },
}

_RATE = {
    "type": "object",
    "required": ["median_ms"],
    "properties": {"median_ms": {"type": "number", "exclusiveMinimum": 0}, "iqr_ms": _SECONDS,
                   "gb_per_s": {"type": "number", "exclusiveMinimum": 0},
                   "tflop_per_s": {"type": "number", "exclusiveMinimum": 0},
                   "bytes": _POSITIVE, "flops": _POSITIVE},
    # a ceiling is a bandwidth or a compute rate
    "anyOf": [{"required": ["gb_per_s"]}, {"required": ["tflop_per_s"]}],
}

#: workloads/harness/ceilings.py's device ceilings
CEILINGS = {
    "type": "object",
    "required": ["ceilings"],
    "properties": {"ceilings": {"type": "object", "minProperties": 1, "additionalProperties": _RATE},
                   "provenance": PROVENANCE, "buffer_bytes": _POSITIVE},
}

_TOOL = {"type": "object", "properties": {"version": _TEXT_OR_NULL, "executable": _TEXT_OR_NULL}}

#: workloads/harness/preflight.py's record: tool versions, counters, recipes skipped
PREFLIGHT = {
    "type": "object",
    "required": ["provenance"],
    "properties": {
        "provenance": PROVENANCE,
        "tools": {"type": ["object", "null"], "properties": {"nsys": _TOOL, "ncu": _TOOL}},
        "counters": {"type": ["object", "null"], "properties": {"readable": {"type": ["boolean", "null"]},
                                                                 "reason": _TEXT_OR_NULL}},
        "recipes_skipped": {"type": ["object", "null"], "additionalProperties": _TEXT_OR_NULL},
    },
}

_CHECK = {"type": "object"}
_STEP = {
    "workload": _TEXT, "variant": _TEXT, "size": _POSITIVE, "provenance": PROVENANCE, "check": _CHECK,
    "work": {"type": "object", "properties": {"bytes_read": {"type": "number", "minimum": 0},
                                              "bytes_written": {"type": "number", "minimum": 0},
                                              "flops": {"type": "number", "minimum": 0}}},
    "annotated_functions": {"type": "array"}, "host_wall_s": {"type": ["object", "number", "null"]},
    "timer": _TEXT_OR_NULL, "summary": _TEXT_OR_NULL, "relative_error": _NUMBER_OR_NULL,
    "tolerance": _NUMBER_OR_NULL, "gpu_turn_waited_s": _NUMBER_OR_NULL,
}

#: a profiled run's record (nsys-run.json, ncu-run.json): the step it ran and how many calls
PROFILED_RUN = {
    "type": "object",
    "required": ["workload", "variant", "size"],
    "properties": {**_STEP, "calls": _POSITIVE, "capture_range": {"type": ["boolean", "null"]}},
}

_MS = {"type": "number", "minimum": 0}
#: the timed run's record (timing.json): what a run summary takes from it. The comparison of two
#: runs (analysis/model/compare.py) checks its own further conditions (finite, positive times)
TIMED_RUN = {
    "type": "object",
    "required": ["workload", "variant", "size", "timing", "times_ms", "work", "provenance", "relative_error"],
    "properties": {
        **_STEP,
        "timing": {"type": "object", "required": ["median_ms"], "additionalProperties": _NUMBER_OR_NULL,
                   "properties": {"median_ms": {"type": "number", "exclusiveMinimum": 0}}},
        "work": {**_STEP["work"], "required": ["bytes_read", "bytes_written", "flops"]},
        "times_ms": {"type": "array", "minItems": 1, "items": _MS},
        "host_call_ms": {"type": ["array", "null"], "items": _MS},
        "host_synced_ms": {"type": ["array", "null"], "items": _MS},
        "telemetry": {"type": ["object", "null"]},
        "sampling": {"type": ["object", "null"]}, "host_load": {"type": ["object", "null"]},
        "warmup_calls": {"type": ["integer", "null"], "minimum": 0}, "l2_mode": _TEXT_OR_NULL,
        "relative_error": _NUMBER_OR_NULL,
    },
}

KINDS = {
    "a timed run's record": TIMED_RUN,
    "kernel-run.json": KERNEL_RUN,
    "a multi-process run record": MULTIPROCESS_RUN,
    "a cold-start record": COLDSTART_RECORD,
    "a cold-start summary": COLDSTART_SUMMARY,
    "a ceilings record": CEILINGS,
    "a preflight record": PREFLIGHT,
    "a profiled run's record": PROFILED_RUN,
}


def load_record(path: str, kind: str):
    """The JSON record at ``path`` (or its ``.gz``), checked against the schema of ``kind`` (a key
    of KINDS): AnalysisInputError naming the file and the first wrong field otherwise."""
    return check_json(path, load_json(path), KINDS[kind], kind)
