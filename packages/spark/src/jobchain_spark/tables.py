"""The three readable tables of the job history and their typed Spark schemas.

``jobs`` has every column of the documented job table (``first_attempt_at`` and
``attempt_started_at`` are NULL for jobs never claimed, for jobs claimed before the state
migration that added them, and in archives written before this version). The lifecycle
columns (``attempt_errors``, ``attempt_base``, ``failed_at``, ``cancelled_at``,
``cancel_reason``, ``failed_by_chain_id``, ``runs_after_failed_blockers``) and the rescue
record (``rescued_at``, ``rescued_from``, ``rescue_reason``) need the current state schema
(jobchain-postgres migration ``0006_job_lifecycle``, jobchain-sqlite ``0005_job_lifecycle``):
reading an older schema raises :class:`~jobchain_spark.errors.SchemaVersionError`. Archives
written before this version lack them; they read as NULL there.

``chains`` has one row per chain (its root joined with its last job, as the client's
``Chain`` pairs them): its status and ``finished_at`` (completed, failed or cancelled) are its
last job's. ``blockers`` has one row per blocker declaration, with the blocked job's chain id
and creation time so it can be split and filtered like the others. ``input``, ``output``,
trace contexts and ``attempt_errors`` are JSON text: parse them with
:func:`jobchain_spark.parse_json` (``attempt_errors`` with :data:`ATTEMPT_ERRORS_SCHEMA`, or
one row per entry with :func:`jobchain_spark.attempt_errors`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from pyspark.sql.types import (
    BooleanType,
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
    _t("rescued_at"),
    _s("rescued_from"),
    _s("rescue_reason"),
    _s("attempt_errors"),
    _i("attempt_base"),
    _t("failed_at"),
    _t("cancelled_at"),
    _s("cancel_reason"),
    _s("failed_by_chain_id"),
    Column("runs_after_failed_blockers", BooleanType(), False),
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
    _t("finished_at"),
    _t("failed_at"),
    _t("cancelled_at"),
    _s("cancel_reason"),
    _s("failed_by_chain_id"),
    _s("last_attempt_error"),
)

BLOCKER_COLUMNS: Final = (
    _s("job_id", False, "uuid"),
    _s("chain_id", False, "uuid"),
    _s("blocked_by_chain_id", False, "uuid"),
    _i("position"),
    _s("trace_context"),
    _t("created_at", False),
)

ATTEMPT_ERRORS_SCHEMA: Final = (
    "array<struct<attempt:int, worker_id:string, error_type:string, message:string, "
    "traceback:string, at:timestamp>>"
)
"""The Spark DDL of the ``attempt_errors`` JSON (``jobchain.entities.AttemptError.to_json``)."""

STORED_JOB_COLUMNS: Final = tuple(c.name for c in JOB_COLUMNS)
"""The job-table columns a read needs; a state schema without one of them is too old."""

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
    "ATTEMPT_ERRORS_SCHEMA",
    "BLOCKER_COLUMNS",
    "CHAIN_COLUMNS",
    "JOB_COLUMNS",
    "SPLIT_COLUMNS",
    "STORED_JOB_COLUMNS",
    "TABLES",
    "Column",
    "ColumnKind",
    "TableName",
    "spark_schema",
    "table_columns",
]
