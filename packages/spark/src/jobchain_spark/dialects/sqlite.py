"""SQLite dialect: the job tables of a ``sqlite://`` state URL, read with the stdlib sqlite3.

The URL is interpreted exactly as jobchain-sqlite does (path, ``table_prefix``). Times are
stored as fixed-width UTC text, so time filters compare text and Arrow parses the values.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any

from jobchain.errors import InvalidArgumentError
from jobchain.url import BackendURL
from jobchain_spark.dialects.base import (
    EXPRESSIONS,
    Dialect,
    Predicate,
    canonical_uuids,
    sql_template,
    valid_statuses,
)
from jobchain_spark.tables import table_columns


def _fmt_time(value: datetime) -> str:
    from jobchain_sqlite.rows import fmt_time

    return fmt_time(value)


class SqliteDialect(Dialect):
    """Reads ``{prefix}job`` and ``{prefix}job_blocker`` of one SQLite file."""

    times_as_text = True

    def _options(self) -> tuple[str, str, float]:
        from jobchain_sqlite.options import SqliteOptions

        options = SqliteOptions.from_url(BackendURL.parse(self.url))
        if options.in_memory:
            raise InvalidArgumentError(
                "option 'url': sqlite:///:memory: exists only inside one process; "
                "Spark reads a database file (sqlite:///path.db)"
            )
        return options.path, options.table_prefix, options.busy_timeout

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        path, _prefix, timeout = self._options()
        # mode=rw: never create an empty database where the user mistyped a path.
        try:
            conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=timeout)
        except sqlite3.OperationalError as exc:
            raise InvalidArgumentError(f"option 'url': cannot open SQLite database {path!r}: {exc}") from None
        try:
            conn.execute("PRAGMA query_only = ON")
            yield conn
        finally:
            conn.close()

    def connect(self) -> AbstractContextManager[Any]:
        return self._connection()

    def query(self, table: str, predicates: Sequence[Predicate]) -> tuple[str, list[Any]]:
        _path, prefix, _timeout = self._options()
        where, params = self._where(table, predicates)
        text = sql_template("sqlite", f"{table}_read")
        # The prefix was validated by SqliteOptions (letters, digits, '_'); the rest is fixed text.
        text = text.replace("{job_blocker}", f"{prefix}job_blocker").replace("{job}", f"{prefix}job")
        return text.replace("{where}", where), params

    def _where(self, table: str, predicates: Sequence[Predicate]) -> tuple[str, list[Any]]:
        kinds = {c.name: c.kind for c in table_columns(table)}
        parts: list[str] = []
        params: list[Any] = []
        for p in predicates:
            expr = EXPRESSIONS[table][p.column]
            kind = kinds[p.column]
            if p.op == "in" or (p.op == "=" and kind != "time"):
                values = list(p.value) if p.op == "in" else [p.value]
                if kind == "uuid":
                    values = canonical_uuids(values)
                elif kind == "status":
                    values = valid_statuses(values)
                parts.append(f"{expr} IN (SELECT value FROM json_each(?))")
                params.append(json.dumps(values))
            else:
                parts.append(f"{expr} {p.op} ?")
                params.append(_fmt_time(p.value) if isinstance(p.value, datetime) else p.value)
        return (" AND ".join(parts) or "1 = 1"), params

    def stream(
        self, conn: sqlite3.Connection, statement: str, params: Sequence[Any], size: int
    ) -> Iterator[list[tuple[Any, ...]]]:
        cursor = conn.execute(statement, list(params))
        try:
            while rows := cursor.fetchmany(size):
                yield rows
        finally:
            cursor.close()

    def time_range(
        self, conn: sqlite3.Connection, table: str, column: str, predicates: Sequence[Predicate]
    ) -> tuple[datetime, datetime] | None:
        statement, params = self.query(table, predicates)
        row = conn.execute(f"SELECT MIN(t.{column}), MAX(t.{column}) FROM ({statement}) t", params).fetchone()
        if row is None or row[0] is None:
            return None
        return datetime.fromisoformat(row[0]), datetime.fromisoformat(row[1])


__all__ = ["SqliteDialect"]
