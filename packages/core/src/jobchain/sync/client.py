"""The synchronous client: start and read chains from code that has no event loop.

:class:`SyncClient` wraps an async :class:`~jobchain.client.Client` built on a state adapter
whose coroutines never suspend (the backend's ``sync_factory``: psycopg, sqlite3) and runs its
methods with :func:`~jobchain.sync.drive.drive`: the same validation, SQL, typed errors and
results as the async client, without a second implementation. What it does itself is what the
async client does with its event loop: it decides when a transaction's buffered wake-ups
leave (after the commit it can see, or at ``tx.flush()``), and it keeps the async notify
adapter on one background thread (:mod:`jobchain.sync._loop`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar

from jobchain.client import ChainStart, ChainStarted, Client
from jobchain.client_queries import Clock
from jobchain.contracts.notify import NotifyAdapter
from jobchain.contracts.observe import Observer
from jobchain.contracts.state import StateAdapter
from jobchain.end_hooks import EndHookWakes
from jobchain.entities import Chain, Deduplication, Schedule
from jobchain.integrations.sqlalchemy_commits import CommitFinished, observe_sqlalchemy_sync_commit
from jobchain.job_types import JobType, JobTypes
from jobchain.sync._loop import FLUSH_TIMEOUT, NotifyLoop
from jobchain.sync._reads import SyncReads
from jobchain.sync.drive import drive, refuse_in_event_loop
from jobchain.sync.transaction import SyncTransaction, driven
from jobchain.transactions import Transaction, TransactionHooks

logger = logging.getLogger("jobchain.sync")

I = TypeVar("I")  # noqa: E741 -- conventional input type variable name
P = ParamSpec("P")
R = TypeVar("R")

COMMIT_WAIT = 30.0
"""Seconds the notify thread waits for an SQLAlchemy ``Connection``'s commit to finish."""


def _write(
    method: Callable[Concatenate[Client, Transaction, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[SyncClient, SyncTransaction, P], R]:
    """The driven form of a write of the async client (same arguments, ``tx`` a SyncTransaction)."""
    name = method.__name__

    def call(self: SyncClient, tx: SyncTransaction, /, *args: P.args, **kwargs: P.kwargs) -> R:
        self._enter(name)
        return drive(method(self._client, self._unwrap(tx), *args, **kwargs))

    call.__name__ = name
    call.__qualname__ = f"SyncClient.{name}"
    call.__doc__ = method.__doc__
    return call


class SyncClient(SyncReads):
    """Starts and reads chains synchronously; build it with :func:`jobchain.sync.connect`.

    Every write takes the transaction of ``with client.transaction(...) as tx``. Every call
    refuses to run inside a running event loop (SyncInEventLoopError: use the async client
    there). One SyncClient may serve many threads when its backend's synchronous adapter does
    (PostgreSQL's pool, SQLite's connection per transaction). ``close()`` (or ``with``) ends it.
    """

    def __init__(self, client: Client, loop: NotifyLoop | None = None) -> None:
        super().__init__(client, loop)
        self._close_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<SyncClient state={self._client.state!r} notify={self._client.notify!r}>"

    @property
    def client(self) -> Client:
        """The wrapped async client (its coroutines run only through ``drive``)."""
        return self._client

    @property
    def state(self) -> StateAdapter:
        return self._client.state

    @property
    def notify(self) -> NotifyAdapter | None:
        """The notify adapter; it lives on the client's notify thread, never call it directly."""
        return self._client.notify

    @property
    def job_types(self) -> JobTypes:
        return self._client.job_types

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------ transactions

    @contextmanager
    def transaction(self, connection: object | None = None) -> Iterator[SyncTransaction]:
        """Open a write transaction; its wake-ups leave after it commits, never on rollback.

        Without ``connection`` jobchain runs its own transaction and commits it at the end of
        the block. With your psycopg ``Connection``, ``sqlite3.Connection`` or SQLAlchemy
        ``Session``/``Connection`` (the backend says which it joins), jobchain writes there and
        your commit decides: SQLAlchemy tells jobchain when it commits; after a psycopg or
        sqlite3 commit call ``tx.flush()`` (without it workers find the jobs at their next poll).
        """
        self._enter("transaction")
        client = self._client
        hooks = TransactionHooks(
            record_events=client.records_transaction_events, end_hooks=EndHookWakes(client.job_types)
        )
        tx: Transaction | None = None
        try:
            with driven(client.state.transaction(connection=connection)) as state_tx:
                tx = Transaction(state_tx, hooks, client)
                sync_tx = SyncTransaction(tx, self._deliver)
                yield sync_tx
                tx.close()
        except BaseException:
            if tx is not None:
                tx.close()
            hooks.discard()
            raise
        if connection is None:
            self._deliver(hooks)
        elif not self._watch_commit(connection, hooks):
            sync_tx.defer_flush()

    def _watch_commit(self, connection: object, hooks: TransactionHooks) -> bool:
        """Deliver ``hooks`` when ``connection``'s commit is observable (SQLAlchemy); else False."""

        def committed(finished: CommitFinished) -> None:
            if finished() or self._loop is None:
                # Without a notify thread only observers' events remain; for an SQLAlchemy
                # Connection they are seen as its commit starts (leaky: no later event exists).
                self._deliver(hooks)
            else:
                self._loop.submit(self._deliver_when(hooks, finished))

        return observe_sqlalchemy_sync_commit(connection, committed, hooks.discard)

    def _deliver(self, hooks: TransactionHooks) -> None:
        """Send what a committed transaction buffered: on the notify thread, bounded."""
        client = self._client
        if hooks.closed:
            return
        if self._loop is None or not hooks.pending(notify=client.notify is not None):
            drive(hooks.flush(None, client.observers))  # observers only: nothing awaits
            return
        try:
            self._loop.run(hooks.flush(client.notify, client.observers), FLUSH_TIMEOUT)
        except Exception:
            # The commit already happened; wake-ups are hints and workers fall back to polling.
            logger.warning(
                "sending a transaction's wake-ups failed or took over %g s; workers fall back to polling",
                FLUSH_TIMEOUT,
                exc_info=True,
            )

    async def _deliver_when(self, hooks: TransactionHooks, finished: CommitFinished) -> None:
        """On the notify thread: wait for the caller's commit to finish, then send (bounded)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + COMMIT_WAIT
        delay = 0.0005
        while not finished():
            if hooks.closed:  # rolled back meanwhile
                return
            if loop.time() > deadline:
                hooks.discard()
                logger.warning(
                    "a joined SQLAlchemy commit did not finish within %g s; its wake-ups are dropped",
                    COMMIT_WAIT,
                )
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)
        await hooks.flush(self._client.notify, self._client.observers)

    # ------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close the notify adapter (on its thread) and stop that thread, then the state adapter."""
        refuse_in_event_loop("SyncClient.close()")
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        client = self._client
        try:
            notify, loop = client.notify, self._loop
            if notify is not None and loop is not None:
                try:
                    loop.run(notify.close(), FLUSH_TIMEOUT)
                except Exception:
                    logger.warning("closing the notify adapter failed", exc_info=True)
            # Closed above on its own loop: the async client then closes the state adapter only.
            client.notify = None
            drive(client.close())
        finally:
            if self._loop is not None:
                self._loop.stop()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------ start

    def start_chain(
        self,
        tx: SyncTransaction,
        job_type: JobType[I, Any, Any, Literal[True]],
        input: I,
        *,
        id: str | None = None,
        deduplication: Deduplication | None = None,
        schedule: Schedule | None = None,
        blockers: Sequence[Chain | str] = (),
        priority: int | None = None,
        ordering_key: str | None = None,
    ) -> ChainStarted:
        """Start a chain of the entry type ``job_type`` (see :meth:`jobchain.Client.start_chain`).

        Raises the same typed errors as the async client, before writing anything.
        """
        self._enter("start_chain")
        return drive(
            self._client.start_chain(
                self._unwrap(tx),
                job_type,
                input,
                id=id,
                deduplication=deduplication,
                schedule=schedule,
                blockers=blockers,
                priority=priority,
                ordering_key=ordering_key,
            )
        )

    def start_chains(self, tx: SyncTransaction, starts: Sequence[ChainStart[Any]]) -> list[ChainStarted]:
        """Start several chains in one round trip; results keep the input order."""
        self._enter("start_chains")
        return drive(self._client.start_chains(self._unwrap(tx), starts))

    # ------------------------------------------------------------ other writes (driven as is)

    complete_chain = _write(Client.complete_chain)
    trigger_job = _write(Client.trigger_job)
    trigger_jobs = _write(Client.trigger_jobs)
    cancel_chain = _write(Client.cancel_chain)
    cancel_chains = _write(Client.cancel_chains)
    cancel_chains_cascading = _write(Client.cancel_chains_cascading)
    retry_job = _write(Client.retry_job)
    retry_jobs = _write(Client.retry_jobs)
    retry_chains = _write(Client.retry_chains)
    delete_chain = _write(Client.delete_chain)
    delete_chains = _write(Client.delete_chains)


def connect(
    state_url: str | StateAdapter | None = None,
    *,
    notify: str | NotifyAdapter | None = None,
    job_types: JobTypes,
    observers: Sequence[Observer] | None = None,
    clock: Clock | None = None,
    migrate: bool | None = None,
) -> SyncClient:
    """Open the backends named by URLs (or environment variables) and return a SyncClient.

    Same arguments as :func:`jobchain.connect`. The state backend must serve ``jobchain.sync``
    (``postgresql://``, ``sqlite:///…``, ``memory://``); another raises BackendUnavailableError
    naming those that do. With a notify backend, the client runs one background thread for it
    until ``close()``. Refuses to run inside a running event loop (SyncInEventLoopError).
    """
    refuse_in_event_loop("jobchain.sync.connect()")
    from jobchain.connect_backends import (
        open_notify,
        open_sync_state,
        resolve_notify_url,
        state_url_configured,
    )
    from jobchain.errors import InvalidArgumentError
    from jobchain.plugins.manager import collect_observers

    if not isinstance(job_types, JobTypes):
        raise InvalidArgumentError(f"job_types must be a JobTypes registry, got {job_types!r}")
    if migrate is None:
        migrate = state_url is None and not state_url_configured()
    if observers is None:
        observers = collect_observers()
    given_state = isinstance(state_url, StateAdapter)
    state = state_url if isinstance(state_url, StateAdapter) else open_sync_state(state_url)
    loop: NotifyLoop | None = None
    try:
        if migrate:
            drive(state.migrate())
        notify_adapter: NotifyAdapter | None = notify if isinstance(notify, NotifyAdapter) else None
        notify_url = (
            None
            if notify_adapter is not None or isinstance(notify, NotifyAdapter)
            else resolve_notify_url(notify)
        )
        if notify_adapter is not None or notify_url is not None:
            loop = NotifyLoop()
            if notify_adapter is None:
                notify_adapter = loop.run(open_notify(notify_url), FLUSH_TIMEOUT * 3)
        client = Client(state, notify_adapter, job_types, observers=observers, clock=clock)
        return SyncClient(client, loop)
    except BaseException:
        if loop is not None:
            loop.stop()
        if not given_state:
            drive(state.close())
        raise


__all__ = ["COMMIT_WAIT", "FLUSH_TIMEOUT", "SyncClient", "connect"]
