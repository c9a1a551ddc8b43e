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
from typing import Any, Final

from jobchain.errors import InvalidArgumentError
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


def _fmt_time(value: datetime) -> str:
    from jobchain_sqlite.rows import fmt_time

    return fmt_time(value)


class SqliteDialect(Dialect):
    """Reads ``{prefix}job`` and ``{prefix}job_blocker`` of one SQLite file."""

    times_as_text = True
    migration = "0005_job_lifecycle (jobchain-sqlite)"

    def stored_columns(self, conn: sqlite3.Connection) -> tuple[str, set[str]]:
        _path, prefix, _timeout = self._options()
        rows = conn.execute("SELECT name FROM pragma_table_info(?)", [prefix + "job"]).fetchall()
        return prefix + "job", {str(r[0]) for r in rows}

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

    def _template(self, name: str) -> str:
        _path, prefix, _timeout = self._options()
        text = sql_template("sqlite", name)
        # The prefix was validated by SqliteOptions (letters, digits, '_'); the rest is fixed text.
        return text.replace("{job_blocker}", f"{prefix}job_blocker").replace("{job}", f"{prefix}job")

    def query(
        self, table: str, predicates: Sequence[Predicate], key_range: KeyRange | None = None
    ) -> tuple[str, list[Any]]:
        where, params = self._where(table, predicates)
        if key_range is not None:
            bounds, bound_params = _range_sql(table, key_range)
            where = f"{where} AND {bounds}" if bounds else where
            params.extend(bound_params)
        return self._template(f"{table}_read").replace("{where}", where), params

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

    def split_keys(
        self,
        conn: sqlite3.Connection,
        table: str,
        keys: tuple[str, ...],
        parts: int,
        predicates: Sequence[Predicate] = (),
    ) -> list[tuple[Any, ...]]:
        k1, k2 = (EXPRESSIONS[table][k] for k in (keys[0], keys[-1]))  # fixed map in dialects.base
        where, params = self._where(table, predicates)
        text = self._template(f"{table}_split").replace("{k1}", k1).replace("{k2}", k2)
        rows = conn.execute(text.replace("{where}", where), [*params, parts, parts]).fetchall()
        return _distinct([tuple(row[: len(keys)]) for row in rows])


_LOWER: Final = {1: "{a} >= ?", 2: "{a} >= ? AND ({a}, {b}) >= (?, ?)"}
_UPPER: Final = {1: "{a} < ?", 2: "{a} <= ? AND ({a}, {b}) < (?, ?)"}
"""Key bounds. The plain bound on the first column keeps the scan an index range even where
the index holds only that column; the row value then makes the bound exact on ties."""


def _range_sql(table: str, key_range: KeyRange) -> tuple[str, list[Any]]:
    exprs = [EXPRESSIONS[table][k] for k in key_range.keys]  # fixed map in dialects.base
    a, b = exprs[0], exprs[-1]
    parts: list[str] = []
    params: list[Any] = []
    for templates, key in ((_LOWER, key_range.lower), (_UPPER, key_range.upper)):
        if key is not None:
            parts.append(templates[len(exprs)].format(a=a, b=b))
            params.extend([key[0], *key] if len(exprs) == 2 else [key[0]])
    return " AND ".join(parts), params


def _distinct(keys: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Sorted keys without repeats (a repeated boundary would make an empty range)."""
    out: list[tuple[Any, ...]] = []
    for key in keys:
        if not out or key != out[-1]:
            out.append(key)
    return out


__all__ = ["SqliteDialect"]
