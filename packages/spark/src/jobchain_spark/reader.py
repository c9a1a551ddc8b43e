"""The read side of the ``jobchain`` data source: options and balanced range partitions.

Each Spark partition is one index range scan on a split key: ``(created_at, id)`` by default,
or the id alone with ``partitioning=id``. The boundaries are quantiles of the key, computed
on the driver in ONE query when Spark plans the read (one ordered pass over the key's index),
so every partition holds about the same number of rows, whatever the ids or timestamps look
like: jobchain's ids are time-ordered (UUID version 7), and a burst of chains started after
one old row would otherwise land in one partition. The first range has no lower bound and the
last none above, so rows created after planning (or before) still land in exactly one
partition: no row is missed or read twice.

Spark's filters (``df.where(...)``) are not pushed into SQL. Spark 4.x keeps the plan of a
DataFrame's last filter pushdown on the data source object that every later query of that
DataFrame shares, and a later query that pushes no filter (``df.count()``) reuses it, so it
would read only the rows of the earlier filter. Spark applies every filter itself, after
reading, per query. To read a subset in SQL, the ``created_from``, ``created_until``,
``type_name`` and ``status`` options narrow the DataFrame itself (every query of it), and
the partition boundaries are quantiles of that subset.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema

from jobchain.entities import JobStatus
from jobchain_spark.dialects import Dialect, Predicate, dialect_for
from jobchain_spark.dialects.base import KeyRange
from jobchain_spark.errors import SparkOptionError
from jobchain_spark.tables import SPLIT_COLUMNS, spark_schema, table_columns

DEFAULT_PARTITIONS: Final = 4
MAX_PARTITIONS: Final = 10_000
DEFAULT_FETCH_SIZE: Final = 10_000
PARTITIONINGS: Final = ("created_at", "id")
SUBSET_OPTIONS: Final[dict[str, tuple[str, ...]]] = {
    "created_from": ("jobs", "chains", "blockers"),
    "created_until": ("jobs", "chains", "blockers"),
    "type_name": ("jobs", "chains"),
    "status": ("jobs",),
}
"""Options that narrow the rows read, in SQL, and the tables each applies to."""


def _int_option(options: Mapping[str, str], name: str, default: int, maximum: int) -> int:
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise SparkOptionError(name, f"must be a positive integer, got {raw!r}") from None
    if not 1 <= value <= maximum:
        raise SparkOptionError(name, f"must be between 1 and {maximum}, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Validated read options (all strings in Spark; checked here, on the driver)."""

    dialect: Dialect
    table: str
    partitioning: str = "created_at"
    partitions: int = DEFAULT_PARTITIONS
    fetch_size: int = DEFAULT_FETCH_SIZE
    predicates: tuple[Predicate, ...] = ()
    """The subset options as SQL predicates: part of the DataFrame, so of every query of it."""

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        table = options.get("table", "jobs")
        table_columns(table)  # UnknownTableError for a table that does not exist
        partitioning = options.get("partitioning", "created_at")
        if partitioning not in PARTITIONINGS:
            raise SparkOptionError(
                "partitioning", f"must be one of {', '.join(PARTITIONINGS)}, got {partitioning!r}"
            )
        return cls(
            dialect=dialect_for(options.get("url")),
            table=table,
            partitioning=partitioning,
            partitions=_int_option(options, "partitions", DEFAULT_PARTITIONS, MAX_PARTITIONS),
            fetch_size=_int_option(options, "fetch_size", DEFAULT_FETCH_SIZE, 1_000_000),
            predicates=subset_predicates(table, options),
        )


def _time_option(name: str, raw: str) -> datetime:
    try:
        value = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise SparkOptionError(name, f"must be an ISO-8601 time, got {raw!r}") from None
    if value.tzinfo is None:
        raise SparkOptionError(name, f"needs a time zone (e.g. {raw.strip()}+00:00), got {raw!r}")
    return value


def _list_option(name: str, raw: str) -> tuple[str, ...]:
    values = tuple(v.strip() for v in raw.split(",") if v.strip())
    if not values:
        raise SparkOptionError(name, "must name at least one value (comma-separated)")
    return values


def subset_predicates(table: str, options: Mapping[str, str]) -> tuple[Predicate, ...]:
    """The ``created_from``, ``created_until``, ``type_name`` and ``status`` options of a read."""
    predicates: list[Predicate] = []
    for name, tables in SUBSET_OPTIONS.items():
        raw = options.get(name)
        if raw is None:
            continue
        if table not in tables:
            raise SparkOptionError(name, f"applies to table {' or '.join(tables)}, not {table!r}")
        if name == "created_from":
            predicates.append(Predicate("created_at", ">=", _time_option(name, raw)))
        elif name == "created_until":
            predicates.append(Predicate("created_at", "<", _time_option(name, raw)))
        else:
            values = _list_option(name, raw)
            known = {s.value for s in JobStatus}
            unknown = [v for v in values if v not in known]
            if name == "status" and unknown:
                raise SparkOptionError(
                    name, f"unknown status {unknown[0]!r}; choose from {', '.join(sorted(known))}"
                )
            predicates.append(Predicate(name, "in", values))
    return tuple(predicates)


def split_key(table: str, partitioning: str) -> tuple[str, ...]:
    """The output columns a ``partitioning`` of ``table`` splits on, most significant first."""
    ident = SPLIT_COLUMNS[table]["id"]
    return (ident,) if partitioning == "id" else ("created_at", ident)


def key_ranges(keys: tuple[str, ...], bounds: Sequence[tuple[object, ...]]) -> list[KeyRange]:
    """``len(bounds) + 1`` adjacent ranges; the first has no lower bound, the last none above."""
    edges: list[tuple[object, ...] | None] = [None, *bounds, None]
    return [KeyRange(keys, edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


class JobchainReader(DataSourceReader):
    """Reads one job-history table in balanced range partitions (see module doc)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(r) for r in self.ranges()]

    def ranges(self) -> list[KeyRange]:
        """The key ranges of the partitions: quantile boundaries from one query (see module doc)."""
        opts = self.options
        keys = split_key(opts.table, opts.partitioning)
        with opts.dialect.connect() as conn:
            opts.dialect.check_schema(conn)  # SchemaVersionError here, on the driver, not in each task
            if opts.partitions == 1:
                return [KeyRange(keys)]
            bounds = opts.dialect.split_keys(conn, opts.table, keys, opts.partitions, opts.predicates)
        return key_ranges(keys, bounds)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        opts = self.options
        schema = to_arrow_schema(spark_schema(opts.table), timezone="UTC")
        key_range: KeyRange = partition.value
        statement, params = opts.dialect.query(opts.table, opts.predicates, key_range)
        with opts.dialect.connect() as conn:
            for rows in opts.dialect.stream(conn, statement, params, opts.fetch_size):
                yield opts.dialect.arrow_batch(opts.table, rows, schema)


__all__ = ["SUBSET_OPTIONS", "JobchainReader", "ReadOptions", "key_ranges", "split_key", "subset_predicates"]
