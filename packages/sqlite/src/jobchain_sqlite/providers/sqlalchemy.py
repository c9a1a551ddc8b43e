"""SQLAlchemy provider: run the adapter's statements on the caller's ``AsyncConnection`` or
``AsyncSession`` (``sqlite+aiosqlite``), inside the caller's own transaction.

Needs the ``jobchain-sqlite[sqlalchemy]`` extra. The caller commits or rolls back; the adapter
never does. pysqlite opens its transaction lazily (at the first INSERT/UPDATE/DELETE), so on
joining the adapter makes sure a real SQLite transaction is open (``BEGIN IMMEDIATE`` for a
write transaction) so that its savepoints nest inside the caller's transaction instead of
starting and committing one of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from jobchain.errors import InvalidArgumentError
from jobchain_sqlite.providers import Params
from jobchain_sqlite.rows import Row


class SqlAlchemyExecutor:
    """Runs statements through ``AsyncConnection.exec_driver_sql`` (no SQL compilation)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def fetch(self, sql: str, params: Params | None = None) -> Sequence[Row]:
        result = await self._conn.exec_driver_sql(sql, dict(params or {}))
        if not result.returns_rows:
            return []
        try:
            return list(result.mappings().all())
        finally:
            result.close()  # a row that fails to decode must not leave the statement in progress

    async def in_transaction(self) -> bool:
        raw = await self._conn.get_raw_connection()
        driver: Any = raw.driver_connection
        return bool(driver.in_transaction)


async def join_sqlalchemy(connection: object, *, read_only: bool) -> tuple[SqlAlchemyExecutor, bool]:
    """An executor on the caller's connection, inside a real SQLite transaction.

    Returns the executor and whether foreign keys are enforced on that connection (the
    adapter does not change the caller's pragmas; it deletes blocker rows itself when off).
    """
    if isinstance(connection, AsyncSession):
        connection = await connection.connection()
    if not isinstance(connection, AsyncConnection):
        raise InvalidArgumentError(
            "connection must be an SQLAlchemy AsyncConnection or AsyncSession, "
            f"got {type(connection).__name__} (a sync Session or Connection joins through the "
            "synchronous client, jobchain.sync)"
        )
    if connection.dialect.name != "sqlite":
        raise InvalidArgumentError(
            f"the SQLAlchemy connection is for {connection.dialect.name!r}; the SQLite adapter needs "
            "an engine created from a 'sqlite+aiosqlite:///path.db' URL"
        )
    if not connection.in_transaction():
        raise InvalidArgumentError(
            "the SQLAlchemy connection is not inside a transaction; use `async with conn.begin():` "
            "(or a session's begin()) so your commit decides"
        )
    executor = SqlAlchemyExecutor(connection)
    if not await executor.in_transaction():
        await executor.fetch("BEGIN" if read_only else "BEGIN IMMEDIATE")
    rows = await executor.fetch("PRAGMA foreign_keys")
    foreign_keys = bool(rows and rows[0]["foreign_keys"])
    return executor, foreign_keys


__all__ = ["SqlAlchemyExecutor", "join_sqlalchemy"]
