"""The three readable tables of the job history and their typed Spark schemas.

``jobs`` has every column of the documented job table (``first_attempt_at`` and
``attempt_started_at`` are NULL for jobs never claimed, for jobs claimed before the state
migration that added them, and in archives written before this version). ``chains`` has one row per chain (its
root joined with its last job, as the client's ``Chain`` pairs them). ``blockers`` has one
row per blocker declaration, with the blocked job's chain id and creation time so it can be
split and filtered like the others. ``input``, ``output`` and trace contexts are JSON text:
parse them with :func:`jobchain_spark.parse_json`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from pyspark.sql.types import (
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from jobchain_spark.errors import UnknownTableError

TableName = Literal["jobs", "chains", "blockers"]
ColumnKind = Literal["uuid", "text", "status", "time"]
"""How a filter on a column is pushed down: ids, plain text, job status, or a timestamp."""


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: DataType
    nullable: bool = True
    kind: ColumnKind | None = None
    """Set when filters on this column are pushed down to SQL."""


def _s(name: str, nullable: bool = True, kind: ColumnKind | None = None) -> Column:
    return Column(name, StringType(), nullable, kind)


def _t(name: str, nullable: bool = True) -> Column:
    return Column(name, TimestampType(), nullable, "time")


def _i(name: str) -> Column:
    return Column(name, IntegerType(), False)


JOB_COLUMNS: Final = (
    _s("id", False, "uuid"),
    _s("chain_id", False, "uuid"),
    _s("type_name", False, "text"),
    _s("chain_type_name", False, "text"),
    _i("chain_index"),
    _s("status", False, "status"),
    _s("input"),
    _s("output"),
    _t("created_at", False),
    _t("scheduled_at", False),
    _i("attempt"),
    _t("last_attempt_at"),
    _s("last_attempt_error"),
    _t("first_attempt_at"),
    _t("attempt_started_at"),
    _s("leased_by"),
    _t("leased_until"),
    Column("lease_generation", LongType(), False),
    _t("completed_at"),
    _s("completed_by"),
    _s("deduplication_key", True, "text"),
    _s("trace_context"),
    _s("chain_trace_context"),
)

CHAIN_COLUMNS: Final = (
    _s("id", False, "uuid"),
    _s("type_name", False, "text"),
    _s("status", False, "status"),
    _s("input"),
    _s("output"),
    _t("created_at", False),
    _t("completed_at"),
    _s("last_job_id", False),
    _s("last_job_type_name", False),
    _i("job_count"),
    _s("deduplication_key", True, "text"),
)

BLOCKER_COLUMNS: Final = (
    _s("job_id", False, "uuid"),
    _s("chain_id", False, "uuid"),
    _s("blocked_by_chain_id", False, "uuid"),
    _i("position"),
    _s("trace_context"),
    _t("created_at", False),
)

TABLES: Final[dict[str, tuple[Column, ...]]] = {
    "jobs": JOB_COLUMNS,
    "chains": CHAIN_COLUMNS,
    "blockers": BLOCKER_COLUMNS,
}

SPLIT_COLUMNS: Final[dict[str, dict[str, str]]] = {
    "jobs": {"id": "id", "created_at": "created_at"},
    "chains": {"id": "id", "created_at": "created_at"},
    "blockers": {"id": "job_id", "created_at": "created_at"},
}
"""Per table, the column each ``partitioning`` option splits on."""


def table_columns(table: str) -> tuple[Column, ...]:
    """The columns of ``table``; UnknownTableError names the valid tables."""
    columns = TABLES.get(table)
    if columns is None:
        raise UnknownTableError("table", f"unknown table {table!r}; choose one of {', '.join(TABLES)}")
    return columns


def spark_schema(table: str) -> StructType:
    """The typed Spark schema of ``table``."""
    return StructType([StructField(c.name, c.type, c.nullable) for c in table_columns(table)])


__all__ = [
    "BLOCKER_COLUMNS",
    "CHAIN_COLUMNS",
    "JOB_COLUMNS",
    "SPLIT_COLUMNS",
    "TABLES",
    "Column",
    "ColumnKind",
    "TableName",
    "spark_schema",
    "table_columns",
]
