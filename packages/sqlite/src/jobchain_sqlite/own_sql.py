"""Your own SQL in jobchain's transaction: the SQLite connection under a jobchain transaction.

``connection_of(tx)`` is the ``aiosqlite.Connection`` that ``tx`` runs on, typed as such: what
you execute there commits or rolls back with jobchain's writes of that transaction. ``tx`` is
what you hold where you write:

- ``async with client.transaction() as tx`` (own, or joined to your aiosqlite connection, which
  comes back as is, or to an SQLAlchemy ``AsyncConnection``/``AsyncSession`` on
  ``sqlite+aiosqlite``, whose aiosqlite connection comes back);
- a handler's :class:`~jobchain.worker.Attempt` in atomic mode (or ``attempt.transaction``);
- the ``tx`` a prepare or complete callback receives, or a ``tx.savepoint()``.

``sync_connection_of(tx)`` is the same for :mod:`jobchain.sync`: the ``sqlite3.Connection``
under ``with chains.transaction() as tx`` (your own, if joined).

jobchain's own connections return ``sqlite3.Row`` rows (by index or by column name) and run in
autocommit mode with an explicit ``BEGIN``: never call ``commit()`` or ``rollback()`` on them.
Anything else (a transaction of another backend, a staged attempt between its phases, a
transaction that has ended) raises :class:`NotASqliteTransactionError`, never a driver error.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

import aiosqlite

from jobchain.errors import InvalidArgumentError
from jobchain.transactions import Transaction
from jobchain_sqlite.providers import AiosqliteExecutor
from jobchain_sqlite.providers.sqlite3 import Sqlite3Executor
from jobchain_sqlite.tx import SqliteTx

if TYPE_CHECKING:
    from jobchain.sync import SyncTransaction
    from jobchain.worker import Attempt

__all__ = ["NotASqliteTransactionError", "connection_of", "sync_connection_of"]


class NotASqliteTransactionError(InvalidArgumentError):
    """This is not an open transaction of a SQLite state adapter; the message says what to pass."""


def connection_of(tx: Transaction | Attempt[Any, Any, Any] | None) -> aiosqlite.Connection:
    """The aiosqlite connection of ``tx``: your SQL there commits and rolls back with jobchain's.

    ``tx`` is a :class:`~jobchain.Transaction` (``client.transaction()``, a callback's ``tx``,
    ``attempt.transaction``) or an :class:`~jobchain.worker.Attempt` in atomic mode. Do not
    commit, roll back or close the connection: the transaction's owner does. Raises
    NotASqliteTransactionError for anything else.
    """
    executor = _executor(_transaction(tx, "connection_of"), "connection_of")
    if isinstance(executor, AiosqliteExecutor):
        return executor._conn
    if isinstance(executor, Sqlite3Executor):
        raise NotASqliteTransactionError(
            "this transaction belongs to the synchronous client (jobchain.sync); use "
            "jobchain_sqlite.sync_connection_of(tx) with the tx of `with chains.transaction() as tx`"
        )
    from jobchain_sqlite.providers.sqlalchemy import SqlAlchemyExecutor  # only SQLAlchemy is left

    assert isinstance(executor, SqlAlchemyExecutor)
    # Joined (so inside the caller's begun transaction): the pooled connection is checked out
    # already and its driver connection is the aiosqlite one; reading it does no I/O.
    joined = executor._conn.sync_connection
    driver = None if joined is None else joined.connection.driver_connection
    if not isinstance(driver, aiosqlite.Connection):
        raise NotASqliteTransactionError(
            f"the joined SQLAlchemy connection runs on {type(driver).__name__}, not aiosqlite; "
            "use an engine from a 'sqlite+aiosqlite:///path.db' URL, or run your SQL on it directly"
        )
    return driver


def sync_connection_of(tx: SyncTransaction) -> sqlite3.Connection:
    """The ``sqlite3.Connection`` of a :mod:`jobchain.sync` transaction (your own, if joined).

    Your SQL there commits and rolls back with jobchain's. Do not commit, roll back or close
    it: the transaction's owner does. Raises NotASqliteTransactionError for anything else.
    """
    from jobchain.sync import SyncTransaction

    if not isinstance(tx, SyncTransaction):
        raise NotASqliteTransactionError(
            f"sync_connection_of takes the tx of `with chains.transaction() as tx` (jobchain.sync), "
            f"got {_kind(tx)}; for an async transaction or an attempt use jobchain_sqlite.connection_of"
        )
    executor = _executor(_transaction(tx.transaction, "sync_connection_of"), "sync_connection_of")
    if isinstance(executor, Sqlite3Executor):
        return executor.connection
    raise NotASqliteTransactionError(
        "this transaction belongs to the async client; use jobchain_sqlite.connection_of(tx)"
    )


def _transaction(tx: object, accessor: str) -> Transaction:
    """The open Transaction that ``tx`` stands for (an Attempt's, or ``tx`` itself)."""
    if tx is None or _is_attempt(tx):
        attempt_tx = getattr(tx, "transaction", None)
        if attempt_tx is None:
            raise NotASqliteTransactionError(
                "this attempt has no open transaction (staged mode runs its work outside any); "
                'call `await attempt.prepare("atomic")` first, or run your SQL in the callback '
                f"of prepare or complete and pass its tx to {accessor}"
            )
        tx = attempt_tx
    if not isinstance(tx, Transaction):
        raise NotASqliteTransactionError(
            f"{accessor} takes a jobchain Transaction (`async with client.transaction() as tx`, a "
            f"callback's tx) or an Attempt in atomic mode, got {_kind(tx)}"
        )
    if not tx.active:
        raise NotASqliteTransactionError(
            "this transaction has ended; run your SQL inside its `async with` block (or callback)"
        )
    return tx


def _executor(tx: Transaction, accessor: str) -> object:
    state: object = tx.state
    # jobchain.testing.clocked_state wraps each transaction in a proxy that forwards public
    # names only (SqliteTx has none for its connection): look through it. Leaky: the proxy's
    # slot name is core's; test_a_clocked_state_adapter_still_gives_its_connection guards it.
    while not isinstance(state, SqliteTx) and (inner := getattr(state, "_inner", None)) is not None:
        state = inner
    if not isinstance(state, SqliteTx):
        raise NotASqliteTransactionError(
            f"{accessor} needs a transaction of the SQLite state backend, got one of "
            f"{type(tx.state).__name__}; connect the client with a sqlite:/// URL, or use the "
            "accessor of its own backend (jobchain_postgres.connection_of for postgresql://; "
            "memory:// runs no SQL)"
        )
    ctx = state._ctx
    if ctx.closed:
        raise NotASqliteTransactionError(
            "this transaction has ended; run your SQL inside its `async with` block (or callback)"
        )
    return ctx.executor


def _is_attempt(obj: object) -> bool:
    from jobchain.worker import Attempt

    return isinstance(obj, Attempt)


def _kind(obj: object) -> str:
    return "None" if obj is None else type(obj).__name__
