"""Per-row work of a bulk start, shared by the function form and the data source writer.

Everything here runs on Spark's Python workers: the settings are pickled there, and the
job-type registry is imported (``"module:attr"``) or unpickled by reference.

Exactly-once: each row has a deterministic key (a named column, or a hash of its validated
input). The chain id is a UUIDv5 of (type, key), and the start carries
``Deduplication(key, scope="any", window)``. A partition starts its rows in one
transaction, so after any failure either all of its rows committed or none did; a retried
task or a re-run finds the committed ones through deduplication and starts nothing twice.
Two attempts racing on the same rows (speculative execution) cannot both insert: the later
one waits for the earlier one's transaction (deduplication holds between concurrent
transactions), then answers its rows as deduplicated, or starts them if the earlier one
rolled back. The deterministic chain id is a second guard: a backend that did not wait would
have the later attempt's insert refused by the primary key, failing that task.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, Literal

import pyarrow as pa

from jobchain.errors import JobchainError
from jobchain.job_types import JobType, JobTypes
from jobchain_spark.errors import SparkOptionError
from jobchain_spark.faults import Faults

CHAIN_ID_NAMESPACE: Final = uuid.UUID("6f0d5a8e-3c1b-5e2a-9f47-1b2c3d4e5f60")
DEFAULT_WINDOW: Final = timedelta(days=36500)
"""Deduplication looks back this far: in practice every chain still in the hot tables."""
DEFAULT_BATCH_SIZE: Final = 1000
"""Rows per ``start_chains`` call. One deduplicating ``jobs_create`` of 1,000 rows is fast even on
a never-analyzed PostgreSQL table (its lookups are planned without statistics)."""
MAX_BATCH_SIZE: Final = 5000
HASH_PREFIX: Final = "sha256:"

OnInvalid = Literal["fail", "reject"]


def load_job_types(ref: JobTypes | str) -> JobTypes:
    """A registry, or ``"module:attr"`` naming one (imported on each Python worker)."""
    if isinstance(ref, JobTypes):
        return ref
    module_name, sep, attr = str(ref).partition(":")
    if not sep or not module_name or not attr:
        raise SparkOptionError(
            "job_types", f"expected 'module:attribute' naming a JobTypes registry, got {ref!r}"
        )
    try:
        value = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise SparkOptionError("job_types", f"cannot import {ref!r}: {exc}") from None
    if not isinstance(value, JobTypes):
        raise SparkOptionError("job_types", f"{ref!r} is a {type(value).__name__}, not a JobTypes registry")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class BulkSettings:
    """What every task needs to start its partition (validated on the driver)."""

    url: str
    notify: str
    type_name: str
    job_types: JobTypes | str
    key: str | None
    input_column: str | None
    input_columns: tuple[str, ...]
    optional_columns: frozenset[str]
    window: timedelta = DEFAULT_WINDOW
    batch_size: int = DEFAULT_BATCH_SIZE
    on_invalid: OnInvalid = "fail"
    faults: Faults | None = None

    def job_type(self) -> JobType[Any, Any]:
        return load_job_types(self.job_types).get(self.type_name)

    def __repr__(self) -> str:
        from jobchain.url import mask_url

        return f"BulkSettings(url={mask_url(self.url)!r}, type_name={self.type_name!r}, key={self.key!r})"


@dataclass(frozen=True, slots=True)
class Checked:
    """One row after validation: its key, its encoded input (or the reason it is invalid)."""

    key: str | None
    input: Any
    error: str | None
    row: Mapping[str, Any]


def chain_id_for(type_name: str, key: str) -> str:
    """The deterministic chain id of the row with ``key`` for ``type_name``."""
    return str(uuid.uuid5(CHAIN_ID_NAMESPACE, f"{type_name}\x1f{key}"))


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _raw_input(row: Mapping[str, Any], s: BulkSettings) -> Any:
    if s.input_column is not None:
        value = row[s.input_column]
        if isinstance(value, str):
            return json.loads(value)
        if isinstance(value, list):  # a MapType column arrives as (key, value) pairs
            return dict(value)
        return value
    # A null in a column whose field has a default means "use the default".
    return {c: row[c] for c in s.input_columns if not (row[c] is None and c in s.optional_columns)}


def check_row(row: Mapping[str, Any], s: BulkSettings, job_type: JobType[Any, Any]) -> Checked:
    """Validate one row against the job type's input and compute its key."""
    key: str | None = None
    if s.key is not None:
        raw_key = row[s.key]
        key = None if raw_key is None else str(raw_key)
    try:
        encoded = job_type.encode_input(_raw_input(row, s))
    except (JobchainError, ValueError, TypeError) as exc:
        reason = str(exc)
        if isinstance(exc, json.JSONDecodeError):
            reason = f"column {s.input_column!r} is not JSON: {exc}"
        if key is None and s.key is None:
            key = HASH_PREFIX + hashlib.sha256(_canonical(dict(row)).encode()).hexdigest()
        return Checked(key, None, reason, row)
    if s.key is None:
        key = HASH_PREFIX + hashlib.sha256(_canonical(encoded).encode()).hexdigest()
    return Checked(key, encoded, None, row)


def rows_of(batches: Iterable[pa.RecordBatch]) -> Iterator[dict[str, Any]]:
    """Rows of Arrow batches as dicts (timestamps come out as aware datetimes)."""
    for batch in batches:
        yield from batch.to_pylist()


def row_json(row: Mapping[str, Any]) -> str:
    """The row as JSON text, for rejects and error messages."""
    return _canonical(dict(row))


__all__ = [
    "CHAIN_ID_NAMESPACE",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_WINDOW",
    "HASH_PREFIX",
    "MAX_BATCH_SIZE",
    "BulkSettings",
    "Checked",
    "OnInvalid",
    "chain_id_for",
    "check_row",
    "load_job_types",
    "row_json",
    "rows_of",
]
