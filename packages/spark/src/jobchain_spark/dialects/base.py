"""What a dialect does for the reader: connect, render the read SQL with filters, stream rows.

Filters arrive as :class:`Predicate` values (a column of the table, a fixed operator and a
bound value). The column's SQL expression comes from a fixed per-table map and the operator
from a fixed list, so no user text ever becomes SQL: values always travel as parameters.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any, Final, Literal

import pyarrow as pa

from jobchain.entities import JobStatus
from jobchain_spark.errors import SchemaVersionError
from jobchain_spark.tables import STORED_JOB_COLUMNS, Column, table_columns

Op = Literal["=", "in", ">", ">=", "<", "<="]
RANGE_OPS: Final = (">", ">=", "<", "<=")

EXPRESSIONS: Final[dict[str, dict[str, str]]] = {
    "jobs": {
        "id": "j.id",
        "chain_id": "j.chain_id",
        "type_name": "j.type_name",
        "chain_type_name": "j.chain_type_name",
        "status": "j.status",
        "created_at": "j.created_at",
        "scheduled_at": "j.scheduled_at",
        "last_attempt_at": "j.last_attempt_at",
        "first_attempt_at": "j.first_attempt_at",
        "attempt_started_at": "j.attempt_started_at",
        "leased_until": "j.leased_until",
        "completed_at": "j.completed_at",
        "deduplication_key": "j.deduplication_key",
    },
    "chains": {
        "id": "r.id",
        "type_name": "r.chain_type_name",
        "status": "l.status",
        "created_at": "r.created_at",
        "completed_at": "l.completed_at",
        "deduplication_key": "r.deduplication_key",
    },
    "blockers": {
        "job_id": "b.job_id",
        "chain_id": "j.chain_id",
        "blocked_by_chain_id": "b.blocked_by_chain_id",
        "created_at": "j.created_at",
    },
}
"""The SQL expression behind each filterable output column (aliases of the *_read.sql files)."""

_STATUSES: Final = frozenset(s.value for s in JobStatus)


@dataclass(frozen=True, slots=True)
class Predicate:
    """``column op value``; ``value`` is a tuple for ``in``, a datetime for time columns."""

    column: str
    op: Op
    value: Any


def canonical_uuids(values: Sequence[object]) -> list[str]:
    """The values that are canonical lowercase UUID strings (others can match no stored id)."""
    kept: list[str] = []
    for value in values:
        if isinstance(value, str):
            try:
                if str(uuid.UUID(value)) == value:
                    kept.append(value)
            except ValueError:
                pass
    return kept


def valid_statuses(values: Sequence[object]) -> list[str]:
    """The values that are job statuses (others can match no row)."""
    return [v for v in values if isinstance(v, str) and v in _STATUSES]


@dataclass(frozen=True, slots=True)
class KeyRange:
    """The rows whose split key lies in ``[lower, upper)``; None is an open end.

    ``keys`` are output columns of the table (``created_at`` then the id column, or the id
    column alone); ``lower`` and ``upper`` hold the raw database values of those columns, as
    :meth:`Dialect.split_keys` returned them, so comparing them never converts a value.
    """

    keys: tuple[str, ...]
    lower: tuple[Any, ...] | None = None
    upper: tuple[Any, ...] | None = None


@cache
def sql_template(dialect: str, name: str) -> str:
    """The text of ``sql/<dialect>/<name>.sql`` (shipped with this package)."""
    return (files("jobchain_spark") / "sql" / dialect / f"{name}.sql").read_text(encoding="utf-8")


class Dialect(ABC):
    """Reads the documented job tables of one backend with its own driver.

    Instances are pickled to Spark's Python workers, so they hold only the URL text and
    open connections inside :meth:`connect`.
    """

    def __init__(self, url: str) -> None:
        self._url = url

    @property
    def url(self) -> str:
        return self._url

    @abstractmethod
    def connect(self) -> AbstractContextManager[Any]:
        """A read-only connection (closed on exit)."""

    @abstractmethod
    def query(
        self, table: str, predicates: Sequence[Predicate], key_range: KeyRange | None = None
    ) -> tuple[Any, Sequence[Any]]:
        """The read statement for ``table`` with ``predicates`` and ``key_range`` ANDed, and its
        parameters. A bounded key range is an index range scan on the split key."""

    @abstractmethod
    def stream(
        self, conn: Any, statement: Any, params: Sequence[Any], size: int
    ) -> Iterator[list[tuple[Any, ...]]]:
        """Run ``statement`` and yield its rows in lists of at most ``size`` (streamed, not loaded)."""

    @abstractmethod
    def split_keys(
        self, conn: Any, table: str, keys: tuple[str, ...], parts: int, predicates: Sequence[Predicate] = ()
    ) -> list[tuple[Any, ...]]:
        """In one query, the first key (in ``keys`` order) of each of ``parts`` equal slices of
        ``table``'s rows matching ``predicates``, the first slice excepted: at most
        ``parts - 1`` sorted, distinct keys."""

    times_as_text: bool = False
    """True when the driver returns times as ISO-8601 text (converted by Arrow, not Python)."""

    migration: str = ""
    """The backend's migration that brought the job table to the schema this version reads."""

    @abstractmethod
    def stored_columns(self, conn: Any) -> tuple[str, set[str]]:
        """(the job table's name, its column names; empty when the table does not exist)."""

    def check_schema(self, conn: Any) -> None:
        """SchemaVersionError unless the job table has every column the reader selects.

        One catalog query, run on the driver when Spark plans a read: an older schema fails
        there with a message that says to migrate, not in every task with a driver error.
        """
        table, present = self.stored_columns(conn)
        if not present:
            raise SchemaVersionError(table, (), self.migration)
        missing = [c for c in STORED_JOB_COLUMNS if c not in present]
        if missing:
            raise SchemaVersionError(table, missing, self.migration)

    def arrow_batch(self, table: str, rows: list[tuple[Any, ...]], schema: pa.Schema) -> pa.RecordBatch:
        """Rows (in table column order) as one Arrow record batch of ``schema``."""
        columns: list[Column] = list(table_columns(table))
        arrays: list[pa.Array] = []
        values = list(zip(*rows, strict=True)) if rows else [() for _ in columns]
        for column, field, data in zip(columns, schema, values, strict=True):
            if column.kind == "time" and self.times_as_text:
                arrays.append(pa.array(data, pa.string()).cast(field.type))
            elif pa.types.is_boolean(field.type):  # SQLite stores booleans as 0/1
                arrays.append(pa.array([None if v is None else bool(v) for v in data], field.type))
            else:
                arrays.append(pa.array(data, field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def __repr__(self) -> str:
        from jobchain.url import mask_url

        return f"{type(self).__name__}({mask_url(self._url)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._url,))


__all__ = [
    "EXPRESSIONS",
    "RANGE_OPS",
    "Dialect",
    "KeyRange",
    "Op",
    "Predicate",
    "canonical_uuids",
    "sql_template",
    "valid_statuses",
]
