"""The read side of the ``jobchain`` data source: options, filter pushdown, range partitions.

Each Spark partition is one range scan: by ``id`` (the UUID space cut into equal ranges) or
by ``created_at`` (MIN..MAX of the filtered rows cut into equal spans). The first range has
no lower bound and the last none above, so rows outside the planned span (non-UUID ids, rows
created after planning) still land in exactly one partition: no row is missed or read twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.pandas.types import to_arrow_schema

from jobchain_spark.dialects import Dialect, Predicate, dialect_for
from jobchain_spark.dialects.base import EXPRESSIONS, Op, uuid_boundaries
from jobchain_spark.errors import SparkOptionError
from jobchain_spark.tables import SPLIT_COLUMNS, spark_schema, table_columns

DEFAULT_PARTITIONS: Final = 4
MAX_PARTITIONS: Final = 10_000
DEFAULT_FETCH_SIZE: Final = 10_000
PARTITIONINGS: Final = ("created_at", "id")

_RANGE_FILTERS: Final[dict[type[Filter], Op]] = {
    GreaterThan: ">",
    GreaterThanOrEqual: ">=",
    LessThan: "<",
    LessThanOrEqual: "<=",
}


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
        )


def to_predicate(table: str, f: Filter) -> Predicate | None:
    """The predicate for a Spark filter this source applies exactly, or None to leave it to Spark."""
    attribute: tuple[str, ...] = tuple(getattr(f, "attribute", ()))
    if len(attribute) != 1 or attribute[0] not in EXPRESSIONS[table]:
        return None
    column = attribute[0]
    kind = next(c.kind for c in table_columns(table) if c.name == column)
    value = getattr(f, "value", None)
    if kind == "time":
        op = "=" if isinstance(f, EqualTo) else _RANGE_FILTERS.get(type(f))
        # A naive datetime's zone is ambiguous here; Spark evaluates that filter itself.
        if op is None or not isinstance(value, datetime) or value.tzinfo is None:
            return None
        return Predicate(column, op, value)
    if isinstance(f, EqualTo) and isinstance(value, str):
        return Predicate(column, "=", value)
    if isinstance(f, In) and all(isinstance(v, str) for v in f.value):
        return Predicate(column, "in", tuple(f.value))
    return None


class JobchainReader(DataSourceReader):
    """Reads one job-history table in parallel range partitions (see module doc)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.predicates: list[Predicate] = []

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802 -- Spark's name
        for f in filters:
            predicate = to_predicate(self.options.table, f)
            if predicate is None:
                yield f
            else:
                self.predicates.append(predicate)

    def partitions(self) -> Sequence[InputPartition]:
        ranges = self._ranges()
        return [InputPartition(tuple(r)) for r in ranges]

    def _ranges(self) -> list[list[Predicate]]:
        opts = self.options
        column = SPLIT_COLUMNS[opts.table][opts.partitioning]
        count = opts.partitions
        if count == 1:
            return [[]]
        bounds: list[Any]
        if opts.partitioning == "id":
            bounds = list(uuid_boundaries(count))
        else:
            with opts.dialect.connect() as conn:
                span = opts.dialect.time_range(conn, opts.table, column, self.predicates)
            if span is None or span[0] == span[1]:
                return [[]]
            low, high = span
            step = (high - low) / count
            bounds = sorted({low + step * i for i in range(1, count)})
        ranges: list[list[Predicate]] = []
        for i in range(len(bounds) + 1):
            part: list[Predicate] = []
            if i > 0:
                part.append(Predicate(column, ">=", bounds[i - 1]))
            if i < len(bounds):
                part.append(Predicate(column, "<", bounds[i]))
            ranges.append(part)
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        opts = self.options
        schema = to_arrow_schema(spark_schema(opts.table), timezone="UTC")
        predicates = [*self.predicates, *partition.value]
        statement, params = opts.dialect.query(opts.table, predicates)
        with opts.dialect.connect() as conn:
            for rows in opts.dialect.stream(conn, statement, params, opts.fetch_size):
                yield opts.dialect.arrow_batch(opts.table, rows, schema)


__all__ = ["JobchainReader", "ReadOptions", "to_predicate"]
