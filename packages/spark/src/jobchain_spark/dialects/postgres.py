"""PostgreSQL dialect: the job tables of a ``postgresql://`` state URL, read with psycopg 3.

The URL is interpreted exactly as jobchain-postgres does (``schema``, ``table_prefix``,
libpq keys). Rows stream through a server-side (named) cursor inside a read-only
REPEATABLE READ transaction, so a partition reads one consistent snapshot.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any

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


class PostgresDialect(Dialect):
    """Reads ``{schema}.{prefix}job`` and ``{schema}.{prefix}job_blocker``."""

    def _settings(self) -> tuple[str, str, str]:
        from jobchain_postgres.options import parse_url, state_options, target

        url = parse_url(BackendURL.parse(self.url))
        options = state_options(url)
        return target(url, options.connect_timeout).conninfo, options.schema, options.table_prefix

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        import psycopg

        conninfo, _schema, _prefix = self._settings()
        with psycopg.connect(conninfo) as conn:
            conn.read_only = True
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            yield conn

    def connect(self) -> AbstractContextManager[Any]:
        return self._connection()

    def query(self, table: str, predicates: Sequence[Predicate]) -> tuple[Any, list[Any]]:
        from psycopg import sql

        _conninfo, schema, prefix = self._settings()
        where, params = self._where(table, predicates, schema, prefix)
        # The template ships with this package; identifiers are quoted by psycopg.sql.
        text = sql_template("postgres", f"{table}_read")
        template = sql.SQL(text)  # a file shipped with this package
        statement = template.format(
            job=sql.Identifier(schema, prefix + "job"),
            job_blocker=sql.Identifier(schema, prefix + "job_blocker"),
            where=where,
        )
        return statement, params

    def _where(
        self, table: str, predicates: Sequence[Predicate], schema: str, prefix: str
    ) -> tuple[Any, list[Any]]:
        from psycopg import sql

        kinds = {c.name: c.kind for c in table_columns(table)}
        parts: list[sql.Composable] = []
        params: list[Any] = []
        for p in predicates:
            expr = sql.SQL(EXPRESSIONS[table][p.column])  # fixed map in dialects.base
            kind = kinds[p.column]
            if p.op == "in" or (p.op == "=" and kind != "time"):
                values = list(p.value) if p.op == "in" else [p.value]
                if kind == "uuid":
                    parts.append(sql.SQL("{} = ANY(%s)").format(expr))
                    params.append([uuid.UUID(v) for v in canonical_uuids(values)])
                elif kind == "status":
                    status_type = sql.Identifier(schema, prefix + "job_status")
                    parts.append(sql.SQL("{} = ANY(%s::{}[])").format(expr, status_type))
                    params.append(valid_statuses(values))
                else:
                    parts.append(sql.SQL("{} = ANY(%s)").format(expr))
                    params.append([str(v) for v in values])
            else:
                op = sql.SQL({">": ">", ">=": ">=", "<": "<", "<=": "<="}[p.op])  # fixed operators
                value = uuid.UUID(p.value) if kind == "uuid" else p.value
                parts.append(sql.SQL("{} {} %s").format(expr, op))
                params.append(value)
        if not parts:
            return sql.SQL("TRUE"), params
        return sql.SQL(" AND ").join(parts), params

    def stream(
        self, conn: Any, statement: Any, params: Sequence[Any], size: int
    ) -> Iterator[list[tuple[Any, ...]]]:
        with conn.cursor(name=f"jobchain_spark_{uuid.uuid4().hex[:12]}") as cursor:
            cursor.itersize = size
            cursor.execute(statement, list(params))
            while rows := cursor.fetchmany(size):
                yield rows

    def time_range(
        self, conn: Any, table: str, column: str, predicates: Sequence[Predicate]
    ) -> tuple[datetime, datetime] | None:
        from psycopg import sql

        statement, params = self.query(table, predicates)
        bounds = sql.SQL("SELECT MIN(t.{c}), MAX(t.{c}) FROM ({q}) t").format(
            c=sql.Identifier(column), q=statement
        )
        row = conn.execute(bounds, params).fetchone()
        conn.rollback()
        if row is None or row[0] is None:
            return None
        return row[0], row[1]


__all__ = ["PostgresDialect"]
