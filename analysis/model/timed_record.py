"""A timed step's record (``timing.json``, written by workloads/harness/runner.py), read and checked before any
verdict rests on it.

The runner writes ``schema_version`` (:data:`SCHEMA_VERSION`); records written before the field existed
(the committed references among them) are version 1 and read the same way. A record of a version this
code does not know, of the wrong shape (a list, a string, ``times_ms`` as text, ``size: "big"``,
``telemetry`` as a list) or holding times no timer can give (NaN, infinite, zero or negative) is refused
with an AnalysisInputError naming the file and the field.
"""
from __future__ import annotations

import math

from analysis.common.errors import AnalysisInputError, UnknownSchemaVersion
from analysis.model.records import TIMED_RUN
from analysis.model.run_summary import check_json, load_json

#: the version workloads/harness/runner.py writes; 1: records without the field
SCHEMA_VERSION = 2
KNOWN_VERSIONS = (1, 2)

_NUMBER = {"type": "number"}
_MS = {"type": "number", "exclusiveMinimum": 0}

#: what compare reads from a timed record: the run summary's schema of it (analysis.model.records.
#: TIMED_RUN) for the step and its work, with fewer fields required (a reference's record of an earlier
#: version may lack them), times strictly positive, and the provenance fields that tell machines apart
TIMED_RECORD_SCHEMA = {
    "type": "object",
    "required": ["workload", "variant", "size", "times_ms", "work"],
    "properties": {
        **{k: TIMED_RUN["properties"][k] for k in ("workload", "variant", "size", "telemetry", "host_load")},
        "schema_version": {"type": "integer"},
        "times_ms": {"type": "array", "minItems": 1, "items": _MS},
        "host_call_ms": {"type": "array", "items": _NUMBER},
        "work": {"type": "object", "additionalProperties": {"type": ["number", "string", "null"]}},
        "timing": {"type": "object", "properties": {"median_ms": _MS}},
        "provenance": {
            "type": ["object", "null"],
            "properties": {
                "gpus": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                "packages": {"type": "object", "additionalProperties": {"type": ["string", "null"]}},
                "cpu_model": {"type": ["string", "null"]},
                "cpu_count": {"type": ["integer", "null"]},
                "driver_version": {"type": ["string", "null"]},
            },
        },
    },
}

def schema_version(path: str, record) -> int:
    """The record's schema version: 1 where it has none; an unknown one is refused."""
    if not isinstance(record, dict):
        raise AnalysisInputError(path, f"not a timed record: a JSON {type(record).__name__}, not an object")
    version = record.get("schema_version", 1)
    if version not in KNOWN_VERSIONS or isinstance(version, bool):
        raise UnknownSchemaVersion(path, f"field schema_version: {version!r}, this code reads "
                                         f"{', '.join(map(str, KNOWN_VERSIONS))}")
    return version


def _non_finite(value, where: str) -> str | None:
    """The first field below ``value`` holding NaN or an infinity (JSON's non-standard literals)."""
    if isinstance(value, float) and not math.isfinite(value):
        return where
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, v in items:
        found = _non_finite(v, f"{where}/{key}" if where else str(key))
        if found:
            return found
    return None


def check_timed(path: str, record) -> dict:
    """``record`` if it is a timed record this code can trust, else a typed error naming the field."""
    schema_version(path, record)
    check_json(path, record, TIMED_RECORD_SCHEMA, "a timed record")
    # the schema's number bounds let NaN pass (NaN <= 0 is false) and infinity exceed any bound
    for field in ("times_ms", "timing", "work", "size"):
        bad = _non_finite(record.get(field), field)
        if bad:
            raise AnalysisInputError(path, f"not a timed record: field {bad}: not a finite number")
    return record


def load_timed(path: str) -> dict:
    """The timed record at ``path`` (plain or gzipped), checked."""
    return check_timed(path, load_json(path))
