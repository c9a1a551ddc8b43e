"""The stdlib ``sqlite3`` provider: statements on a synchronous ``sqlite3.Connection``.

Its coroutines never suspend (every call returns at once), so the adapter's async code runs
over it under ``jobchain.sync.drive`` without an event loop. Used by the synchronous adapter
(``jobchain_sqlite.sync``) for its own connections and for a caller's joined connection.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from jobchain_sqlite.providers import Params
from jobchain_sqlite.rows import Row


class Sqlite3Executor:
    """A ``sqlite3.Connection``: the adapter's own (``row_factory`` sqlite3.Row) or the caller's.

    The caller's connection keeps its ``row_factory``: this executor sets ``sqlite3.Row`` on its
    own cursors only. It never begins, commits or rolls back on its own.
    """

    __slots__ = ("_conn", "_own")

    def __init__(self, conn: sqlite3.Connection, *, own: bool) -> None:
        self._conn = conn
        self._own = own

    @property
    def connection(self) -> sqlite3.Connection:
        return self._conn

    async def fetch(self, sql: str, params: Params | None = None) -> Sequence[Row]:
        if self._own:
            return self._conn.execute(sql, params or {}).fetchall()
        cursor = self._conn.cursor()
        try:
            cursor.row_factory = sqlite3.Row  # this cursor only
            cursor.execute(sql, params or {})
            return cursor.fetchall()
        finally:
            cursor.close()

    async def in_transaction(self) -> bool:
        return self._conn.in_transaction


def autocommits(conn: sqlite3.Connection) -> bool:
    """Whether statements on ``conn`` outside ``BEGIN`` commit on their own.

    That is ``isolation_level=None`` (legacy transaction control: sqlite3 never opens a
    transaction implicitly) or, from Python 3.12, ``autocommit=True``. With
    ``isolation_level=''`` (the default) sqlite3 opens a transaction before the first
    INSERT/UPDATE/DELETE that ``commit()`` ends, so a transaction jobchain begins there is
    the one the caller commits anyway.
    """
    autocommit = getattr(conn, "autocommit", -1)  # sqlite3.LEGACY_TRANSACTION_CONTROL is -1
    if autocommit is True:
        return True
    if autocommit is False:
        return False
    return conn.isolation_level is None


__all__ = ["Sqlite3Executor", "autocommits"]
