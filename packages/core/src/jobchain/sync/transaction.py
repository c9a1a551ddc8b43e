"""The synchronous transaction a :class:`~jobchain.sync.SyncClient` yields, and driven contexts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import TypeVar

from jobchain.contracts.state import StateTx
from jobchain.sync.drive import drive, refuse_in_event_loop
from jobchain.transactions import Transaction, TransactionHooks

T = TypeVar("T")


@contextmanager
def driven(context: AbstractAsyncContextManager[T]) -> Iterator[T]:
    """Use an async context manager that never suspends as a plain ``with`` block."""
    value = drive(context.__aenter__())
    try:
        yield value
    except BaseException as error:
        if not drive(context.__aexit__(type(error), error, error.__traceback__)):
            raise
    else:
        drive(context.__aexit__(None, None, None))


class SyncTransaction:
    """What ``with chains.transaction(...) as tx`` yields; pass it to the client's writes.

    Joined to your psycopg or sqlite3 connection, call :meth:`flush` after your own commit to
    send the wake-ups (without it workers still find the jobs, at their next poll). jobchain's
    own transactions, and SQLAlchemy sessions and connections, flush by themselves.
    """

    __slots__ = ("_deferred", "_deliver", "_tx")

    def __init__(self, tx: Transaction, deliver: Callable[[TransactionHooks], None]) -> None:
        self._tx = tx
        self._deliver = deliver
        self._deferred = False

    @property
    def transaction(self) -> Transaction:
        """The underlying async :class:`~jobchain.transactions.Transaction` (for driven calls)."""
        return self._tx

    @property
    def state(self) -> StateTx:
        """The open state transaction."""
        return self._tx.state

    @property
    def hooks(self) -> TransactionHooks:
        """The side effects buffered until commit."""
        return self._tx.hooks

    @property
    def active(self) -> bool:
        """False once the transaction (or this savepoint) has ended."""
        return self._tx.active

    def defer_flush(self) -> None:
        """Keep the buffered side effects for :meth:`flush` (a joined caller transaction)."""
        self._deferred = True

    def flush(self) -> None:
        """Send the wake-ups of a joined transaction; call it after your own commit.

        A no-op when jobchain sends them by itself (its own transaction, SQLAlchemy commits),
        when they were sent already, and inside the ``with`` block (commit first).
        """
        refuse_in_event_loop("SyncTransaction.flush()")
        if not self._deferred:
            return
        self._deferred = False
        self._deliver(self._tx.hooks)

    @contextmanager
    def savepoint(self) -> Iterator[SyncTransaction]:
        """A savepoint: an error inside rolls back its writes and its buffered side effects."""
        refuse_in_event_loop("SyncTransaction.savepoint()")
        with driven(self._tx.savepoint()) as inner:
            yield SyncTransaction(inner, self._deliver)


__all__ = ["SyncTransaction", "driven"]
