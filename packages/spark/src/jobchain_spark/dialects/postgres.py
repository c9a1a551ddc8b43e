"""PostgreSQL dialect: the job tables of a ``postgresql://`` state URL, read with psycopg 3.

The URL is interpreted exactly as jobchain-postgres does (``schema``, ``table_prefix``,
libpq keys). Rows stream through a server-side (named) cursor inside a read-only
REPEATABLE READ transaction, so a partition reads one consistent snapshot.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from jobchain.url import BackendURL
from jobchain_spark.dialects.base import (
    EXPRESSIONS,
    Dialect,
    KeyRange,
    Predicate,
    canonical_uuids,
    sql_template,
    valid_statuses,
)
from jobchain_spark.tables import table_columns


class PostgresDialect(Dialect):
    """Reads ``{schema}.{prefix}job`` and ``{schema}.{prefix}job_blocker``."""

    migration = "0006_job_lifecycle (jobchain-postgres)"

    def stored_columns(self, conn: Any) -> tuple[str, set[str]]:
        _conninfo, schema, prefix = self._settings()
        rows = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s",
            [schema, prefix + "job"],
        ).fetchall()
        conn.rollback()
        return f"{schema}.{prefix}job", {str(r[0]) for r in rows}

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

    def _template(self, name: str, **fragments: Any) -> Any:
        from psycopg import sql

        _conninfo, schema, prefix = self._settings()
        # The template ships with this package; identifiers are quoted by psycopg.sql.
        template = sql.SQL(sql_template("postgres", name))
        return template.format(
            job=sql.Identifier(schema, prefix + "job"),
            job_blocker=sql.Identifier(schema, prefix + "job_blocker"),
            **fragments,
        )

    def query(
        self, table: str, predicates: Sequence[Predicate], key_range: KeyRange | None = None
    ) -> tuple[Any, list[Any]]:
        from psycopg import sql

        _conninfo, schema, prefix = self._settings()
        where, params = self._where(table, predicates, schema, prefix)
        if key_range is not None:
            bounds, bound_params = _range_sql(table, key_range)
            if bounds is not None:
                where = sql.SQL(" AND ").join([where, bounds])
                params.extend(bound_params)
        return self._template(f"{table}_read", where=where), params

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

    def split_keys(
        self, conn: Any, table: str, keys: tuple[str, ...], parts: int, predicates: Sequence[Predicate] = ()
    ) -> list[tuple[Any, ...]]:
        from psycopg import sql

        _conninfo, schema, prefix = self._settings()
        k1, k2 = (sql.SQL(EXPRESSIONS[table][k]) for k in (keys[0], keys[-1]))  # fixed map
        where, params = self._where(table, predicates, schema, prefix)
        statement = self._template(f"{table}_split", k1=k1, k2=k2, where=where)
        rows = conn.execute(statement, [*params, parts, parts]).fetchall()
        conn.rollback()
        out: list[tuple[Any, ...]] = []
        for row in rows:
            key = tuple(row[: len(keys)])
            if not out or key != out[-1]:  # a repeated boundary would make an empty range
                out.append(key)
        return out


def _range_sql(table: str, key_range: KeyRange) -> tuple[Any, list[Any]]:
    """The key bounds. The plain bound on the first column keeps the scan an index range; the
    row value then makes the bound exact on ties (created_at shared by a whole batch)."""
    from psycopg import sql

    exprs = [sql.SQL(EXPRESSIONS[table][k]) for k in key_range.keys]  # fixed map in dialects.base
    a, b = exprs[0], exprs[-1]
    pair = len(exprs) == 2
    parts: list[Any] = []
    params: list[Any] = []
    if key_range.lower is not None:
        text = "{a} >= %s AND ({a}, {b}) >= (%s, %s)" if pair else "{a} >= %s"
        parts.append(sql.SQL(text).format(a=a, b=b))
        params.extend([key_range.lower[0], *key_range.lower] if pair else [key_range.lower[0]])
    if key_range.upper is not None:
        text = "{a} <= %s AND ({a}, {b}) < (%s, %s)" if pair else "{a} < %s"
        parts.append(sql.SQL(text).format(a=a, b=b))
        params.extend([key_range.upper[0], *key_range.upper] if pair else [key_range.upper[0]])
    if not parts:
        return None, params
    return sql.SQL(" AND ").join(parts), params


__all__ = ["PostgresDialect"]
