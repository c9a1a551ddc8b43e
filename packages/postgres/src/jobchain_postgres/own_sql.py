"""Your own SQL in jobchain's transaction: the psycopg connection under a jobchain transaction.

``connection_of(tx)`` is the psycopg ``AsyncConnection`` that ``tx`` runs on, typed as such:
what you execute there commits or rolls back with jobchain's writes of that transaction. ``tx``
is what you hold where you write:

- ``async with client.transaction() as tx`` (own, or joined to your psycopg connection or
  SQLAlchemy ``AsyncConnection``/``AsyncSession``: then it is the psycopg connection under it);
- a handler's :class:`~jobchain.worker.Attempt` in atomic mode (or ``attempt.transaction``);
- the ``tx`` a prepare or complete callback receives, or a ``tx.savepoint()``.

``sync_connection_of(tx)`` is the same for :mod:`jobchain.sync`: the psycopg ``Connection``
under ``with chains.transaction() as tx``.

Anything else (a transaction of another backend, a staged attempt between its phases, a
transaction that has ended) raises :class:`NotAPostgresTransactionError`, never a driver error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg

from jobchain.errors import InvalidArgumentError
from jobchain.transactions import Transaction

if TYPE_CHECKING:
    from jobchain.sync import SyncTransaction
    from jobchain.worker import Attempt

__all__ = ["NotAPostgresTransactionError", "connection_of", "sync_connection_of"]


class NotAPostgresTransactionError(InvalidArgumentError):
    """This is not an open transaction of a PostgreSQL state adapter; the message says what to pass."""


def connection_of(tx: Transaction | Attempt[Any, Any, Any] | None) -> psycopg.AsyncConnection[Any]:
    """The psycopg connection of ``tx``: your SQL there commits and rolls back with jobchain's.

    ``tx`` is a :class:`~jobchain.Transaction` (``client.transaction()``, a callback's ``tx``,
    ``attempt.transaction``) or an :class:`~jobchain.worker.Attempt` in atomic mode. Do not
    commit, roll back or close the connection: the transaction's owner does. Raises
    NotAPostgresTransactionError for anything else.
    """
    connection = _connection(_transaction(tx, "connection_of"), "connection_of")
    if isinstance(connection, psycopg.AsyncConnection):
        return connection
    raise NotAPostgresTransactionError(
        "this transaction belongs to the synchronous client (jobchain.sync); use "
        "jobchain_postgres.sync_connection_of(tx) with the tx of `with chains.transaction() as tx`"
    )


def sync_connection_of(tx: SyncTransaction) -> psycopg.Connection[Any]:
    """The psycopg ``Connection`` of a :mod:`jobchain.sync` transaction (your own, if joined).

    Your SQL there commits and rolls back with jobchain's. Do not commit, roll back or close
    it: the transaction's owner does. Raises NotAPostgresTransactionError for anything else.
    """
    from jobchain.sync import SyncTransaction

    if not isinstance(tx, SyncTransaction):
        raise NotAPostgresTransactionError(
            f"sync_connection_of takes the tx of `with chains.transaction() as tx` (jobchain.sync), "
            f"got {_kind(tx)}; for an async transaction or an attempt use jobchain_postgres.connection_of"
        )
    connection = _connection(_transaction(tx.transaction, "sync_connection_of"), "sync_connection_of")
    # jobchain.sync runs the adapter on a view of the synchronous connection (sync_driver).
    from jobchain_postgres.sync_driver import SyncConnectionView

    if isinstance(connection, SyncConnectionView):
        return connection.sync_connection
    raise NotAPostgresTransactionError(
        "this transaction belongs to the async client; use jobchain_postgres.connection_of(tx)"
    )


def _transaction(tx: object, accessor: str) -> Transaction:
    """The open Transaction that ``tx`` stands for (an Attempt's, or ``tx`` itself)."""
    if tx is None or _is_attempt(tx):
        attempt_tx = getattr(tx, "transaction", None)
        if attempt_tx is None:
            raise NotAPostgresTransactionError(
                "this attempt has no open transaction (staged mode runs its work outside any); "
                'call `await attempt.prepare("atomic")` first, or run your SQL in the callback '
                f"of prepare or complete and pass its tx to {accessor}"
            )
        tx = attempt_tx
    if not isinstance(tx, Transaction):
        raise NotAPostgresTransactionError(
            f"{accessor} takes a jobchain Transaction (`async with client.transaction() as tx`, a "
            f"callback's tx) or an Attempt in atomic mode, got {_kind(tx)}"
        )
    if not tx.active:
        raise NotAPostgresTransactionError(
            "this transaction has ended; run your SQL inside its `async with` block (or callback)"
        )
    return tx


def _connection(tx: Transaction, accessor: str) -> object:
    # PostgresStateTx.connection (forwarded by jobchain.testing's clocked proxies as well);
    # taking it begins the transaction if jobchain has sent nothing yet.
    connection = getattr(tx.state, "connection", None)
    if connection is None:
        raise NotAPostgresTransactionError(
            f"{accessor} needs a transaction of the PostgreSQL state backend, got one of "
            f"{type(tx.state).__name__}; connect the client with a postgresql:// URL, or use "
            "the accessor of its own backend (jobchain_sqlite.connection_of for sqlite:///; "
            "memory:// runs no SQL)"
        )
    return connection


def _is_attempt(obj: object) -> bool:
    from jobchain.worker import Attempt

    return isinstance(obj, Attempt)


def _kind(obj: object) -> str:
    return "None" if obj is None else type(obj).__name__
