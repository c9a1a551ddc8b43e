"""Your own SQL in jobchain's transaction: each backend's accessor has its driver's type."""

from __future__ import annotations

import sqlite3
from typing import Any

import aiosqlite
import psycopg

import jobchain_postgres
import jobchain_sqlite
from jobchain import Transaction
from jobchain.sync import SyncTransaction
from jobchain.worker import Attempt


async def on_postgres(tx: Transaction, attempt: Attempt[int, str], sync_tx: SyncTransaction) -> None:
    connection: psycopg.AsyncConnection[Any] = jobchain_postgres.connection_of(tx)
    await connection.execute("SELECT 1")
    await jobchain_postgres.connection_of(attempt).execute("SELECT 1")
    await jobchain_postgres.connection_of(attempt.transaction).execute("SELECT 1")
    jobchain_postgres.sync_connection_of(sync_tx).execute("SELECT 1")
    # E: (expression has type "AsyncConnection[Any]", variable has type "Connection")
    # fix: other: psycopg.AsyncConnection[Any] = jobchain_postgres.connection_of(tx)
    other: aiosqlite.Connection = jobchain_postgres.connection_of(tx)
    # E: (expression has type "Connection[Any]", variable has type "AsyncConnection[Any]")
    # fix: blocking: psycopg.Connection[Any] = jobchain_postgres.sync_connection_of(sync_tx)
    blocking: psycopg.AsyncConnection[Any] = jobchain_postgres.sync_connection_of(sync_tx)
    # E: Argument 1 to "connection_of" has incompatible type "SyncTransaction"
    # fix: jobchain_postgres.connection_of(sync_tx.transaction)
    jobchain_postgres.connection_of(sync_tx)
    print(other, blocking)


async def on_sqlite(tx: Transaction, attempt: Attempt[int, str], sync_tx: SyncTransaction) -> None:
    connection: aiosqlite.Connection = jobchain_sqlite.connection_of(tx)
    await connection.execute("SELECT 1")
    await jobchain_sqlite.connection_of(attempt).execute("SELECT 1")
    jobchain_sqlite.sync_connection_of(sync_tx).execute("SELECT 1")
    # E: type "aiosqlite.core.Connection", variable has type "psycopg.connection.Connection[Any]"
    # fix: other: aiosqlite.Connection = jobchain_sqlite.connection_of(tx)
    other: psycopg.Connection[Any] = jobchain_sqlite.connection_of(tx)
    # E: Argument 1 to "sync_connection_of" has incompatible type "Transaction"
    # fix: blocking: sqlite3.Connection = jobchain_sqlite.sync_connection_of(sync_tx)
    blocking: sqlite3.Connection = jobchain_sqlite.sync_connection_of(tx)
    print(other, blocking)
