"""Bulk start: one chain per DataFrame row, exactly once (the argument is in ``bulk_rows``).

The function form checks the whole DataFrame before writing anything: columns and types
against the job type's input, null and duplicate keys, and every row's input. With
``on_invalid="reject"`` invalid rows are set aside (returned, and written to
``rejects_path``) and the valid ones start. Then each partition starts its rows in one
transaction through the client's batched ``start_chains``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa
from pyspark.sql.types import IntegralType, StringType, StructType

from jobchain.connect_backends import NOTIFY_URL_ENV
from jobchain.job_types import JobType, JobTypes
from jobchain_spark.bulk_partition import PartitionResult, start_partition
from jobchain_spark.bulk_rows import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_WINDOW,
    MAX_BATCH_SIZE,
    BulkSettings,
    OnInvalid,
    check_row,
    load_job_types,
    row_json,
    rows_of,
)
from jobchain_spark.bulk_schema import check_input_columns, input_fields
from jobchain_spark.dialects import check_url
from jobchain_spark.errors import (
    ColumnTypeError,
    DuplicateKeyError,
    MissingColumnError,
    NullKeyError,
    RowValidationError,
    SparkOptionError,
)
from jobchain_spark.faults import Faults

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

CHECK_SCHEMA: Final = "key string, error string, row string"
RESULT_SCHEMA: Final = "partition int, attempt int, rows long, started long, deduplicated long, rejected long"


@dataclass(frozen=True, slots=True)
class BulkStartResult:
    """Totals of a bulk start; ``started + deduplicated + rejected == rows``."""

    rows: int
    started: int
    deduplicated: int
    rejected: int
    partitions: int
    rejects: DataFrame | None = None


def build_settings(
    schema: StructType,
    *,
    url: object,
    job_type: JobType[Any, Any] | str | None,
    job_types: JobTypes | str | None,
    key: str | None = None,
    input_column: str | None = None,
    notify: str | None = None,
    window: timedelta = DEFAULT_WINDOW,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_invalid: str = "fail",
    faults: Faults | None = None,
) -> BulkSettings:
    """Validate every option against the DataFrame's schema; typed errors name what is wrong."""
    parsed = check_url(url)
    if job_types is None:
        raise SparkOptionError(
            "job_types", "required: the JobTypes registry (or 'module:attribute' naming it)"
        )
    registry = load_job_types(job_types)
    if job_type is None or job_type == "":
        raise SparkOptionError("type", "required: the entry job type whose chains to start")
    resolved = registry.resolve(job_type)  # UnknownJobTypeError lists the registered names
    registry.check_entry(resolved)
    if on_invalid not in ("fail", "reject"):
        raise SparkOptionError("on_invalid", f"must be 'fail' or 'reject', got {on_invalid!r}")
    valid_batch = isinstance(batch_size, int) and not isinstance(batch_size, bool)
    if not valid_batch or not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise SparkOptionError(
            "batch_size", f"must be an integer from 1 to {MAX_BATCH_SIZE}, got {batch_size!r}"
        )
    if not isinstance(window, timedelta) or window <= timedelta(0):
        raise SparkOptionError("window", f"must be a positive timedelta, got {window!r}")
    columns = {f.name: f.dataType for f in schema.fields}
    if key is not None:
        if key not in columns:
            raise MissingColumnError(key, f"the key column is not in the DataFrame ({', '.join(columns)})")
        if not isinstance(columns[key], (StringType, IntegralType)):
            raise ColumnTypeError(
                key, f"a key must be a string or integer column, got {columns[key].simpleString()}"
            )
    input_columns = check_input_columns(resolved, schema, input_column)
    fields = input_fields(resolved) or ()
    notify_url = notify or os.environ.get(NOTIFY_URL_ENV, "").strip() or "none"
    return BulkSettings(
        url=parsed.render(hide_password=False),
        notify=notify_url,
        type_name=resolved.name,
        job_types=job_types,
        key=key,
        input_column=input_column,
        input_columns=input_columns,
        optional_columns=frozenset(f.name for f in fields if not f.required),
        window=window,
        batch_size=batch_size,
        on_invalid="reject" if on_invalid == "reject" else "fail",
        faults=faults,
    )


def _task() -> tuple[int, int]:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return 0, 0
    return context.partitionId(), context.attemptNumber()


def _check_fn(s: BulkSettings) -> Any:
    def check(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        job_type = s.job_type()
        keys: list[str | None] = []
        errors: list[str | None] = []
        rows: list[str | None] = []
        for row in rows_of(batches):
            checked = check_row(row, s, job_type)
            keys.append(checked.key)
            errors.append(checked.error)
            rows.append(None if checked.error is None else row_json(row))
        yield pa.RecordBatch.from_pydict({"key": keys, "error": errors, "row": rows})

    return check


def _start_fn(s: BulkSettings) -> Any:
    def start(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        partition, attempt = _task()
        result = start_partition(batches, s, partition=partition, attempt=attempt)
        yield _result_batch(result)

    return start


def _result_batch(r: PartitionResult) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "partition": pa.array([r.partition], pa.int32()),
            "attempt": pa.array([r.attempt], pa.int32()),
            "rows": pa.array([r.rows], pa.int64()),
            "started": pa.array([r.started], pa.int64()),
            "deduplicated": pa.array([r.deduplicated], pa.int64()),
            "rejected": pa.array([r.rejected], pa.int64()),
        }
    )


def _check_picklable(s: BulkSettings) -> None:
    from pyspark import cloudpickle

    try:
        cloudpickle.dumps(s)  # type: ignore[no-untyped-call]  # pyspark ships cloudpickle untyped
    except Exception as exc:
        raise SparkOptionError(
            "job_types",
            f"the registry cannot be sent to Spark's workers ({exc}); define the job types and their "
            "input classes in an importable module (not __main__) installed on the executors",
        ) from None


def start_chains(
    df: DataFrame,
    *,
    url: str,
    job_type: JobType[Any, Any] | str,
    job_types: JobTypes | str,
    key: str | None = None,
    input_column: str | None = None,
    notify: str | None = None,
    window: timedelta = DEFAULT_WINDOW,
    batch_size: int = DEFAULT_BATCH_SIZE,
    on_invalid: OnInvalid = "fail",
    rejects_path: str | None = None,
    faults: Faults | None = None,
) -> BulkStartResult:
    """Start one chain of ``job_type`` per row of ``df``, exactly once per row key.

    ``key`` names a unique, non-null string or integer column; without it a row's key is
    the SHA-256 of its validated input. Re-running with the same rows starts nothing new.
    Raises (before writing anything) MissingColumnError, ColumnTypeError, NullKeyError,
    DuplicateKeyError, RowValidationError (``on_invalid="fail"``), SparkOptionError.
    """
    from pyspark.sql import functions as sf

    s = build_settings(
        df.schema,
        url=url,
        job_type=job_type,
        job_types=job_types,
        key=key,
        input_column=input_column,
        notify=notify,
        window=window,
        batch_size=batch_size,
        on_invalid=on_invalid,
        faults=faults,
    )
    _check_picklable(s)
    key_name = key or "(hash of the input)"
    checked = df.mapInArrow(_check_fn(s), CHECK_SCHEMA)
    # One Spark job checks the whole frame: null keys, duplicate keys, invalid rows.
    per_key = checked.groupBy("key").agg(sf.count(sf.lit(1)).alias("n"), sf.count("error").alias("bad"))
    summary = per_key.agg(
        sf.sum(sf.when(sf.col("key").isNull(), sf.col("n")).otherwise(0)).alias("null_keys"),
        sf.sum("bad").alias("invalid"),
        sf.collect_list(sf.when(sf.col("key").isNotNull() & (sf.col("n") > 1), sf.col("key"))).alias("dups"),
    ).first()
    null_keys = int(summary["null_keys"] or 0) if summary is not None else 0
    invalid = int(summary["invalid"] or 0) if summary is not None else 0
    if null_keys:
        raise NullKeyError(key_name, null_keys)
    if summary is not None and summary["dups"]:
        raise DuplicateKeyError(key_name, sorted(str(k) for k in summary["dups"])[:5])
    if invalid and on_invalid == "fail":
        first = checked.where(sf.col("error").isNotNull()).limit(1).collect()[0]
        raise RowValidationError(str(first["key"]), str(first["error"]), invalid)
    rejects = checked.where(sf.col("error").isNotNull()) if invalid else None
    if rejects is not None and rejects_path is not None:
        rejects.write.mode("overwrite").json(rejects_path)
    results = df.mapInArrow(_start_fn(s), RESULT_SCHEMA).collect()
    return BulkStartResult(
        rows=sum(int(r["rows"]) for r in results),
        started=sum(int(r["started"]) for r in results),
        deduplicated=sum(int(r["deduplicated"]) for r in results),
        rejected=sum(int(r["rejected"]) for r in results),
        partitions=len(results),
        rejects=rejects,
    )


__all__ = ["BulkStartResult", "build_settings", "start_chains"]
