"""Providers: how the adapter runs SQL on a connection it owns or on the caller's own one.

A provider is an :class:`Executor`: it runs one statement with named parameters and returns
rows addressable by column name. It never begins, commits or rolls back on its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import aiosqlite

from jobchain_sqlite.rows import Row

Params = Mapping[str, object]


class Executor(Protocol):
    """Runs one SQL statement; rows come back addressable by column name."""

    async def fetch(self, sql: str, params: Params | None = None) -> Sequence[Row]: ...

    async def in_transaction(self) -> bool:
        """Whether the connection is inside an open SQLite transaction."""
        ...


class AiosqliteExecutor:
    """An aiosqlite connection: the adapter's own (``row_factory`` set) or the caller's.

    ``begin`` (own connections only) is a deferred BEGIN: it runs in the same hand-off to
    aiosqlite's thread as the next statement, so a transaction costs one hand-off less. It
    stays pending while no BEGIN has succeeded; a transaction that ran no statement has
    nothing to commit.
    """

    __slots__ = ("_conn", "_own", "begin")

    def __init__(self, conn: aiosqlite.Connection, *, own: bool) -> None:
        self._conn = conn
        self._own = own
        self.begin: str | None = None

    async def fetch(self, sql: str, params: Params | None = None) -> Sequence[Row]:
        if self._own:
            if self.begin is not None:
                return await self._begin_and_fetch(self.begin, sql, params or {})
            # One thread hop: the adapter's connections use sqlite3.Row rows.
            return list(await self._conn.execute_fetchall(sql, params or {}))
        # The caller's connection keeps its own row_factory; name columns from the cursor.
        async with self._conn.execute(sql, params or {}) as cursor:
            rows = await cursor.fetchall()
            names = [d[0] for d in cursor.description or ()]
        return [dict(zip(names, row, strict=True)) for row in rows]

    async def _begin_and_fetch(self, begin: str, sql: str, params: Params) -> Sequence[Row]:
        # aiosqlite runs every call as a function on its connection thread (_execute) but has no
        # public way to run two statements in one hand-off; without it, take two hand-offs.
        run: Any = getattr(self._conn, "_execute", None)
        if run is None:
            await self._conn.execute_fetchall(begin)
            self.begin = None
            return list(await self._conn.execute_fetchall(sql, params))
        conn: Any = self._conn
        self.begin = None

        def begin_then_fetch() -> list[Row]:
            raw = conn._conn  # on aiosqlite's thread, where its sqlite3 connection lives
            try:
                raw.execute(begin)
            except BaseException:
                self.begin = begin  # still no transaction: the next statement begins it
                raise
            rows: list[Row] = raw.execute(sql, params).fetchall()
            return rows

        rows: list[Row] = await run(begin_then_fetch)
        return rows

    async def in_transaction(self) -> bool:
        return self._conn.in_transaction


def is_aiosqlite_connection(obj: object) -> bool:
    return isinstance(obj, aiosqlite.Connection)


__all__ = ["AiosqliteExecutor", "Executor", "Params", "is_aiosqlite_connection"]
