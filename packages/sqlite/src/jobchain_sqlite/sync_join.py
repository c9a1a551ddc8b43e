"""Joining a caller's synchronous SQLite transaction: ``sqlite3.Connection`` or SQLAlchemy sync.

The caller's commit decides; jobchain never commits or rolls back a joined connection. What
"inside a transaction" means depends on the stdlib module's transaction control:

- ``isolation_level=''`` (sqlite3's default, also SQLAlchemy's pysqlite and Django after
  ``set_autocommit(False)``): sqlite3 opens a transaction implicitly before the first write
  and ``commit()`` ends it. If none is open yet, a write transaction opens it (``BEGIN
  IMMEDIATE``): the same transaction the caller commits.
- ``isolation_level=None`` or ``autocommit=True`` (autocommit; Django outside ``atomic``, which
  starts ``BEGIN`` explicitly inside it): a write transaction needs the caller's explicit
  ``BEGIN`` (``transaction.atomic()``, ``conn.execute("BEGIN")``), or jobchain's writes would
  outlive the block in a transaction the caller never commits. jobchain refuses with
  InvalidArgumentError instead.
- Read-only work never begins a transaction on a joined connection: it runs inside the
  caller's transaction if one is open, else each statement on its own.
- ``autocommit=False`` (Python 3.12+): a transaction is always open; jobchain joins it.

A transaction the caller opened with a plain (deferred) ``BEGIN``, as Django's ``atomic()``
does by default, takes the write lock at its first write: under contention from another
writer SQLite may report the file busy at once instead of waiting (DatabaseLockedError).
Django's ``OPTIONS={"transaction_mode": "IMMEDIATE"}`` avoids that.

SQLAlchemy: a sync ``Session`` (its transaction is begun, so its ``commit()`` decides) or a
sync ``Connection`` inside ``begin()``, on a ``sqlite`` engine with the pysqlite driver; the
adapter runs on the underlying ``sqlite3.Connection`` within that transaction.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from jobchain.errors import InvalidArgumentError
from jobchain_sqlite.providers.sqlite3 import Sqlite3Executor, autocommits

SUPPORTED = "a sqlite3.Connection, or an SQLAlchemy Session or Connection on a 'sqlite://' (pysqlite) engine"


async def join_sync(connection: object, *, read_only: bool) -> tuple[Sqlite3Executor, bool]:
    """An executor on the caller's transaction and whether it enforces foreign keys."""
    if isinstance(connection, sqlite3.Connection):
        return await join_sqlite3(connection, read_only=read_only, what="the sqlite3 connection")
    if type(connection).__module__.startswith("sqlalchemy."):
        raw = _unwrap_sqlalchemy(connection)
        what = "the SQLAlchemy connection's sqlite3 connection"
        return await join_sqlite3(raw, read_only=read_only, what=what)
    hint = ""
    if type(connection).__module__.startswith("aiosqlite"):
        hint = " (an aiosqlite connection belongs to the async client: use jobchain.connect)"
    raise InvalidArgumentError(
        f"connection must be {SUPPORTED} for the synchronous client, got {type(connection).__name__}{hint}"
    )


async def join_sqlite3(
    conn: sqlite3.Connection, *, read_only: bool, what: str
) -> tuple[Sqlite3Executor, bool]:
    executor = Sqlite3Executor(conn, own=False)
    if not conn.in_transaction and not read_only:
        if autocommits(conn):
            raise InvalidArgumentError(
                f"{what} is in autocommit mode (isolation_level=None; SQLAlchemy: "
                "isolation_level='AUTOCOMMIT') and not inside a "
                "transaction, so nothing would commit what jobchain writes; begin one first "
                "(Django: inside transaction.atomic(); sqlite3: conn.execute('BEGIN')) so your "
                "commit decides, or call transaction() without connection= to let jobchain commit"
            )
        # The transaction sqlite3 opens at the first write anyway, which the caller commits;
        # IMMEDIATE takes the write lock now, so a write never fails midway on a busy file.
        await executor.fetch("BEGIN IMMEDIATE")
    rows = await executor.fetch("PRAGMA foreign_keys")
    return executor, bool(rows and rows[0]["foreign_keys"])


def _unwrap_sqlalchemy(connection: object) -> sqlite3.Connection:
    """The ``sqlite3.Connection`` under a sync SQLAlchemy Session or Connection, in its transaction."""
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session

    if isinstance(connection, Session):
        try:
            bind: Any = connection.get_bind()
        except Exception as exc:  # UnboundExecutionError: the session has no engine
            raise InvalidArgumentError(f"the SQLAlchemy Session has no engine to join: {exc}") from None
        _check_dialect(bind.dialect)
        connection = connection.connection()  # begins the session's transaction: its commit decides
    if not isinstance(connection, Connection):
        raise InvalidArgumentError(
            f"connection must be {SUPPORTED} for the synchronous client, got SQLAlchemy "
            f"{type(connection).__name__} (AsyncSession/AsyncConnection belong to the async client)"
        )
    _check_dialect(connection.dialect)
    if not connection.in_transaction():
        raise InvalidArgumentError(
            "the SQLAlchemy connection is not inside a transaction; use `with conn.begin():` "
            "(or a Session) so your commit decides"
        )
    raw = connection.connection.driver_connection
    if not isinstance(raw, sqlite3.Connection):
        raise InvalidArgumentError(
            f"the SQLAlchemy connection's driver connection is {type(raw).__name__}, not a "
            "sqlite3.Connection; use an engine created from a 'sqlite:///path.db' URL (pysqlite)"
        )
    return raw


def _check_dialect(dialect: Any) -> None:
    if dialect.name != "sqlite" or dialect.driver != "pysqlite":
        raise InvalidArgumentError(
            f"the SQLAlchemy connection is for {dialect.name}+{dialect.driver}; the synchronous SQLite "
            "adapter needs an engine created from a 'sqlite:///path.db' URL (pysqlite)"
        )


__all__ = ["SUPPORTED", "join_sqlite3", "join_sync"]
