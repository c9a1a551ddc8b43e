"""The write side of the ``jobchain`` data source: ``df.write.format("jobchain")...save()``.

Options: ``url``, ``type``, ``job_types`` (``module:attribute``), ``key``, ``input_column``,
``notify``, ``window`` (``30d``), ``batch_size``. Each task validates its whole partition
before its transaction, so an invalid row fails that task with the row's key and reason.
Checks that need the whole DataFrame (duplicate keys across partitions) and rejects need
the function form, :func:`jobchain_spark.start_chains`, which runs them before writing.

``abort()`` cannot undo partitions that already committed; it need not: they were valid,
and a re-run deduplicates them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from jobchain_spark.bulk import _task, build_settings
from jobchain_spark.bulk_partition import PartitionResult, start_partition
from jobchain_spark.bulk_rows import DEFAULT_BATCH_SIZE, DEFAULT_WINDOW, BulkSettings
from jobchain_spark.durations import parse_duration
from jobchain_spark.errors import SparkOptionError
from jobchain_spark.faults import Faults


@dataclass
class BulkCommitMessage(WriterCommitMessage):
    result: PartitionResult


class JobchainWriter(DataSourceArrowWriter):
    """Starts one chain per row, one transaction per partition (see module doc)."""

    def __init__(self, settings: BulkSettings) -> None:
        self.settings = settings

    @classmethod
    def create(cls, options: Mapping[str, str], schema: StructType, overwrite: bool) -> JobchainWriter:
        if overwrite:
            raise SparkOptionError("mode", "jobchain only appends (starts chains); use .mode('append')")
        if options.get("on_invalid", "fail") != "fail" or "rejects_path" in options:
            raise SparkOptionError(
                "on_invalid", "rejects need the whole DataFrame; use jobchain_spark.start_chains(...)"
            )
        raw_batch = options.get("batch_size", str(DEFAULT_BATCH_SIZE))
        try:
            batch_size = int(raw_batch)
        except ValueError:
            raise SparkOptionError("batch_size", f"must be an integer, got {raw_batch!r}") from None
        window = options.get("window")
        faults = options.get("_faults")
        settings = build_settings(
            schema,
            url=options.get("url"),
            job_type=options.get("type"),
            job_types=options.get("job_types"),
            key=options.get("key"),
            input_column=options.get("input_column"),
            notify=options.get("notify"),
            window=DEFAULT_WINDOW if window is None else parse_duration("window", window),
            batch_size=batch_size,
            faults=None if faults is None else Faults.from_json(faults),
        )
        return cls(settings)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BulkCommitMessage:
        partition, attempt = _task()
        return BulkCommitMessage(
            start_partition(iterator, self.settings, partition=partition, attempt=attempt)
        )


__all__ = ["BulkCommitMessage", "JobchainWriter"]
