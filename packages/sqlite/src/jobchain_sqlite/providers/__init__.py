"""Providers: how the adapter runs SQL on a connection it owns or on the caller's own one.

A provider is an :class:`Executor`: it runs one statement with named parameters and returns
rows addressable by column name. It never begins, commits or rolls back on its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

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
    """An aiosqlite connection: the adapter's own (``row_factory`` set) or the caller's."""

    __slots__ = ("_conn", "_own")

    def __init__(self, conn: aiosqlite.Connection, *, own: bool) -> None:
        self._conn = conn
        self._own = own

    async def fetch(self, sql: str, params: Params | None = None) -> Sequence[Row]:
        if self._own:
            # One thread hop: the adapter's connections use sqlite3.Row rows. Their text never
            # fails to decode (decoding.read_text), so no row error can leave the statement open.
            return list(await self._conn.execute_fetchall(sql, params or {}))
        # The caller's connection keeps its own row_factory; name columns from the cursor.
        async with self._conn.execute(sql, params or {}) as cursor:
            rows = await cursor.fetchall()
            names = [d[0] for d in cursor.description or ()]
        return [dict(zip(names, row, strict=True)) for row in rows]

    async def in_transaction(self) -> bool:
        return self._conn.in_transaction


def is_aiosqlite_connection(obj: object) -> bool:
    return isinstance(obj, aiosqlite.Connection)


__all__ = ["AiosqliteExecutor", "Executor", "Params", "is_aiosqlite_connection"]
