"""PostgresStateAdapter: the jobchain state contract on PostgreSQL (psycopg 3, async).

Open it from a URL (its own connection pool) or over your own psycopg pool, psycopg
connection or SQLAlchemy ``AsyncEngine``::

    adapter = await PostgresStateAdapter.open("postgresql://app@db/app?schema=jobs")
    await adapter.migrate()
    async with adapter.transaction() as tx:
        ...

``transaction(connection=…)`` joins a transaction you already opened on a psycopg
``AsyncConnection`` or an SQLAlchemy ``AsyncConnection``/``AsyncSession``: jobchain's writes
then commit or roll back with yours.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from types import TracebackType
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from jobchain.contracts.capabilities import Capability
from jobchain.errors import TransientStateError
from jobchain.url import BackendURL
from jobchain_postgres._tx import PostgresStateTx, Reconnect, _Transaction
from jobchain_postgres.errors import closed, translated, unreachable
from jobchain_postgres.migrate import apply_migrations
from jobchain_postgres.options import StateOptions, parse_url, state_options, target
from jobchain_postgres.providers import (
    AnyConnection,
    ConnectionProvider,
    Database,
    PoolProvider,
    Provider,
    SQLAlchemyProvider,
    dead_connections_at_most,
    joined_connection,
    provider_database,
)
from jobchain_postgres.queries import Queries

__all__ = ["PostgresStateAdapter", "open_state_adapter"]


class PostgresStateAdapter:
    """The state contract on PostgreSQL: row locks, SKIP LOCKED claims, one statement per operation.

    Guarantees (suite: StateAdapterSuite): every operation is one round trip (job_complete takes
    three only when another transaction holds its row); a failed statement poisons the
    transaction until a savepoint rolls back; read-only transactions never wait for writers.
    """

    capabilities: frozenset[Capability] = frozenset(
        {
            Capability.SAVEPOINTS,
            Capability.POISONABLE_TRANSACTIONS,
            Capability.CONCURRENT_TRANSACTIONS,
            Capability.ROW_LOCKS,
        }
    )
    time_precision: timedelta = timedelta(microseconds=1)

    def __init__(self, provider: Provider, options: StateOptions | None = None) -> None:
        self.options = options or StateOptions()
        if self.options.claim == "atomic-update":
            # Without SKIP LOCKED a claim waits for any open transaction holding a candidate row,
            # so write transactions cannot claim side by side.
            self.capabilities = self.capabilities - {Capability.CONCURRENT_TRANSACTIONS}
        self._provider = provider
        self._queries = Queries(self.options.schema, self.options.table_prefix)
        self._prepare: bool | None = False if self.options.prepare_threshold is None else None
        self._flushes: set[asyncio.Task[None]] = set()  # after-commit flushes still running
        self._closed = False
        self.database: Database | None = provider_database(provider)
        """(host, port, dbname) of the database the adapter works in, where known."""

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        where = f"{self.options.schema}.{self.options.table_prefix}job"
        return (
            f"<PostgresStateAdapter {where} via {self._provider.label} ({state}, claim={self.options.claim})>"
        )

    # ------------------------------------------------------------ construction

    @classmethod
    async def open(cls, url: BackendURL | str, options: StateOptions | None = None) -> PostgresStateAdapter:
        """Connect with an own connection pool; URL query keys override ``options``.

        Raises BackendUnreachableError (refused, unknown host, bad password) before returning.
        """
        parsed = parse_url(url)
        resolved = state_options(parsed, options)
        where = target(parsed, resolved.connect_timeout)
        try:
            # One direct connection first: its error says *why* (refused, password…), a pool's does not.
            probe = await psycopg.AsyncConnection.connect(where.conninfo)
            await probe.close()
        except psycopg.Error as exc:
            raise unreachable(exc, where.display) from None
        pool: AsyncConnectionPool[AnyConnection] = AsyncConnectionPool(
            utc_session(where.conninfo),
            min_size=resolved.pool_min_size,
            max_size=resolved.pool_max_size,
            kwargs={"autocommit": True, "prepare_threshold": resolved.prepare_threshold},
            timeout=resolved.connect_timeout,
            open=False,
            name=f"jobchain-{resolved.schema}",
        )
        await pool.open(wait=False)
        return cls(PoolProvider(pool, owned=True, label=where.display), resolved)

    @classmethod
    def from_pool(
        cls, pool: AsyncConnectionPool[Any], options: StateOptions | None = None
    ) -> PostgresStateAdapter:
        """Use your psycopg ``AsyncConnectionPool`` (opened by you, never closed by the adapter)."""
        return cls(PoolProvider(pool, owned=False), options)

    @classmethod
    def from_connection(
        cls, connection: AnyConnection, options: StateOptions | None = None
    ) -> PostgresStateAdapter:
        """Use one psycopg ``AsyncConnection`` of yours; the adapter's transactions take turns on it."""
        return cls(ConnectionProvider(connection), options)

    @classmethod
    def from_sqlalchemy(cls, engine: Any, options: StateOptions | None = None) -> PostgresStateAdapter:
        """Use an SQLAlchemy ``AsyncEngine`` on ``postgresql+psycopg`` (extra ``[sqlalchemy]``)."""
        return cls(SQLAlchemyProvider(engine), options)

    # ------------------------------------------------------------ transactions

    def transaction(
        self, *, read_only: bool = False, connection: object | None = None
    ) -> AbstractAsyncContextManager[PostgresStateTx]:
        """Open a transaction (committed on success, rolled back and re-raised on error), or join yours.

        With ``connection`` the adapter runs its statements inside your open transaction and
        neither commits nor rolls back: your commit decides. A transaction left poisoned by a
        failed statement is rolled back and raises TransientStateError.

        An own transaction sends BEGIN with its first statement (a start: BEGIN and the INSERT
        in one round trip, then COMMIT; nothing sent: no round trip). Your SQL on
        ``tx.connection`` belongs to it whenever you send it; a ``connection.transaction()``
        block of yours as its very first statement fails instead (send a statement first, or
        use ``tx.savepoint()``).
        """
        if self._closed:
            raise closed()
        if connection is not None:
            return self._joined(connection, read_only)
        return self._own(read_only)

    def autocommit(self, *, read_only: bool = False) -> AbstractAsyncContextManager[PostgresStateTx]:
        """Run each operation as its own transaction: no BEGIN and no COMMIT round trip.

        For a unit of work that is one operation (the worker's claims and look-ups).
        Savepoints raise InvalidArgumentError. On a pooled connection that is not in
        autocommit mode (a pool or connection of yours) this is an ordinary transaction.
        """
        if self._closed:
            raise closed()
        return self._autocommit(read_only)

    @asynccontextmanager
    async def _autocommit(self, read_only: bool) -> AsyncIterator[PostgresStateTx]:
        async with self._checkout() as connection:
            if connection.autocommit and connection.info.transaction_status == TransactionStatus.IDLE:
                tx = self._tx(connection, read_only, autocommit=True)
                try:
                    yield tx
                except TransientStateError:
                    if connection.broken:
                        # A server restart kills every pooled connection: check the idle ones
                        # now rather than fail one operation per dead connection.
                        with contextlib.suppress(Exception):
                            await self._provider.recover()
                    raise
                finally:
                    tx._end()
                return
        # Not in autocommit mode (your pool or connection): an ordinary transaction.
        async with self._own(read_only) as tx:
            yield tx

    def _tx(
        self,
        connection: AnyConnection,
        read_only: bool,
        *,
        autocommit: bool = False,
        begin: _Transaction | None = None,
        reconnect: Reconnect | None = None,
        renewals: int = 1,
    ) -> PostgresStateTx:
        return PostgresStateTx(
            connection,
            self._queries,
            atomic_claim=self.options.claim == "atomic-update",
            read_only=read_only,
            prepare=self._prepare,
            autocommit=autocommit,
            begin=begin,
            reconnect=reconnect,
            renewals=renewals,
        )

    @asynccontextmanager
    async def _checkout(self) -> AsyncIterator[AnyConnection]:
        """A connection from the provider; a pool timeout or refused connection is translated."""
        manager = self._provider.connection()
        with translated():
            connection = await manager.__aenter__()
        done = False
        try:
            yield connection
            done = True
        finally:
            if done:
                await manager.__aexit__(None, None, None)
            else:
                await manager.__aexit__(*sys.exc_info())

    @asynccontextmanager
    async def _own(self, read_only: bool) -> AsyncIterator[PostgresStateTx]:
        async with contextlib.AsyncExitStack() as stack:
            tx = await self._lazy(stack, read_only)
            try:
                yield tx
                if tx.poisoned:
                    raise TransientStateError("a statement failed in this transaction; it was rolled back")
            except BaseException as error:
                tx._end()
                await tx._finish(error)
                raise
            tx._end()
            await tx._finish(None)

    async def _lazy(self, stack: contextlib.AsyncExitStack, read_only: bool) -> PostgresStateTx:
        """A transaction whose BEGIN waits for its first statement (and goes with it).

        A pooled connection the server dropped is found by that first statement: nothing has
        run, so the transaction hands it back and takes another, and again while the next one is
        dead too, up to every connection the pool holds (``dead_connections_at_most``). Nothing
        has happened yet, so that is safe; once BEGIN succeeded, a lost connection is the
        transaction's TransientStateError.
        """
        inner = contextlib.AsyncExitStack()

        async def exit_inner(*exc: Any) -> bool | None:
            return await inner.__aexit__(*exc)

        stack.push_async_exit(exit_inner)
        connection = await self._connection(inner, read_only)
        renewals = dead_connections_at_most(self._provider)

        async def reconnect() -> AnyConnection:
            nonlocal inner
            broken, inner = inner, contextlib.AsyncExitStack()
            await broken.aclose()  # the pool discards the broken connection
            with translated():
                await self._provider.recover()
            return await self._connection(inner, read_only)

        if isinstance(connection, psycopg.AsyncConnection):
            return self._tx(
                connection, read_only, begin=_Transaction(connection), reconnect=reconnect, renewals=renewals
            )
        # jobchain.sync's view of a synchronous connection: BEGIN now, as a block.
        while True:
            try:
                await inner.enter_async_context(_Transaction(connection))
            except TransientStateError:
                if renewals == 0 or not connection.broken:
                    raise
                renewals -= 1
                connection = await reconnect()
                continue
            return self._tx(connection, read_only)

    async def _connection(self, stack: contextlib.AsyncExitStack, read_only: bool) -> AnyConnection:
        """Check out a connection set up for a transaction (handed back when ``stack`` exits)."""
        connection = await stack.enter_async_context(self._checkout())
        if read_only:
            await connection.set_read_only(True)
            stack.push_async_callback(_reset_read_only, connection)
        elif connection.read_only:
            # A read-only transaction cancelled while it ended (a watch stopped as its
            # attempt finished) can hand the connection back before the reset ran:
            # every write transaction states what it needs instead of trusting it.
            await connection.set_read_only(False)
        return connection

    @asynccontextmanager
    async def _joined(self, connection: object, read_only: bool) -> AsyncIterator[PostgresStateTx]:
        raw = await joined_connection(connection)
        tx = self._tx(raw, read_only)
        try:
            yield tx
        finally:
            tx._end()

    def after_commit(
        self, connection: object, on_commit: Callable[[], Awaitable[None]], on_rollback: Callable[[], None]
    ) -> bool:
        """Flush side effects after a joined SQLAlchemy ``AsyncSession``/``AsyncConnection`` commits
        (dropped on rollback).

        Returns False for a psycopg connection: it reports no commit, so call
        ``await tx.flush()`` after committing.
        """
        from jobchain.integrations.sqlalchemy_commits import observe_sqlalchemy_commit

        return observe_sqlalchemy_commit(connection, on_commit, on_rollback, self._flushes)

    # ------------------------------------------------------------ lifecycle

    async def migrate(self) -> None:
        """Create or upgrade the schema; idempotent and safe when several processes start at once."""
        if self._closed:
            raise closed()
        with translated():  # returning the connection to the pool may fail too: no driver error escapes
            async with self._checkout() as connection:
                await apply_migrations(connection, self.options.schema, self.options.table_prefix)

    async def vacuum(self) -> None:
        """VACUUM (ANALYZE) both job tables now; reads and writes continue meanwhile."""
        if self._closed:
            raise closed()
        async with self._checkout() as connection:
            if connection.info.transaction_status != TransactionStatus.IDLE:
                await connection.rollback()
            autocommit = connection.autocommit
            with translated():
                await connection.set_autocommit(True)
                try:
                    await connection.execute(self._queries.vacuum, prepare=False)
                finally:
                    await connection.set_autocommit(autocommit)

    async def reserve_connections(self, count: int) -> int | None:
        """Grow the adapter's own pool to ``count`` connections; see ReservesConnections.

        A pool, connection or engine of yours keeps its size: the result tells the caller
        (a worker) whether it is enough.
        """
        reserve = getattr(self._provider, "reserve", None)
        if reserve is None:
            return None
        available: int | None = await reserve(count)
        return available

    async def close(self) -> None:
        """Refuse new transactions and close the adapter's own pool. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._flushes:  # notifications of joined transactions that committed just now
            await asyncio.gather(*self._flushes, return_exceptions=True)
        await self._provider.close()

    async def __aenter__(self) -> PostgresStateAdapter:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


async def _reset_read_only(connection: AnyConnection) -> None:
    if not connection.closed:
        await connection.set_read_only(False)


def utc_session(conninfo: str) -> str:
    """``conninfo`` with the session time zone set to UTC, unless its ``options`` set one.

    psycopg then returns timestamps with ``datetime.UTC`` itself, and the adapter's conversion of
    every timestamp it reads (several per job) is an identity check instead of ``astimezone``.
    """
    options = str(conninfo_to_dict(conninfo).get("options") or "")
    if "timezone" in options.lower():
        return conninfo
    return make_conninfo(conninfo, options=f"{options} -c TimeZone=UTC".strip())


async def open_state_adapter(url: BackendURL) -> PostgresStateAdapter:
    """Factory behind ``postgresql://`` and ``postgres://`` (state role), named in ``plugin.py``."""
    return await PostgresStateAdapter.open(url)
