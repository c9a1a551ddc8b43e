"""SqliteStateAdapter: the StateAdapter on aiosqlite, and the ``sqlite://`` factory.

Concurrency model:

- One writer connection per adapter. Write transactions take an in-process asyncio lock
  (FIFO) and then ``BEGIN IMMEDIATE``, so async writers in one process queue on the lock
  instead of tripping over SQLITE_BUSY, and writers in other processes wait in SQLite's busy
  handler (``busy_timeout``) for the file's write lock.
- Read-only transactions run on a small pool of separate reader connections. In WAL mode a
  reader sees a snapshot of committed data and never waits for writers.
- An in-memory database (``:memory:``) exists only on one connection, so there every
  transaction, read-only ones included, takes the writer lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta

import aiosqlite

from jobchain.contracts.capabilities import Capability
from jobchain.contracts.state import StateTx
from jobchain.entities import utcnow
from jobchain.errors import AdapterClosedError, InvalidArgumentError, JobchainError
from jobchain.integrations.sqlalchemy_commits import observe_sqlalchemy_commit
from jobchain.url import BackendURL
from jobchain_sqlite.context import TxContext
from jobchain_sqlite.decoding import read_text
from jobchain_sqlite.errors import SqliteVersionError, translating
from jobchain_sqlite.migrate import apply_migrations, check_schema_version
from jobchain_sqlite.options import SqliteOptions
from jobchain_sqlite.providers import AiosqliteExecutor, Executor, is_aiosqlite_connection
from jobchain_sqlite.queries import queries
from jobchain_sqlite.tx import SqliteTx
from jobchain_sqlite.wal import WAL, enable_wal

MIN_SQLITE_VERSION = (3, 35, 0)
"""RETURNING arrived in SQLite 3.35."""


class SqliteStateAdapter:
    """The jobchain state adapter for one SQLite database file (or ``:memory:``)."""

    # ROW_LOCKS holds because a write transaction owns SQLite's write lock from BEGIN IMMEDIATE
    # to COMMIT: a second locked read waits (on the writer lock) until the holder commits.
    # CONCURRENT_TRANSACTIONS does not: a second write transaction cannot open while one is
    # open. POISONABLE_TRANSACTIONS does not either: a failed statement never aborts the tx.
    capabilities: frozenset[Capability] = frozenset({Capability.SAVEPOINTS, Capability.ROW_LOCKS})
    time_precision: timedelta = timedelta(microseconds=1)

    def __init__(self, options: SqliteOptions | str) -> None:
        if sqlite3.sqlite_version_info < MIN_SQLITE_VERSION:
            raise SqliteVersionError(
                f"SQLite {sqlite3.sqlite_version} is too old: jobchain-sqlite needs 3.35 or newer "
                "(RETURNING); use a newer Python build or pysqlite3"
            )
        self.options = SqliteOptions(path=options) if isinstance(options, str) else options
        self._q = queries(self.options.table_prefix)
        self._write_lock = asyncio.Lock()
        self._open_lock = asyncio.Lock()
        self._writer: aiosqlite.Connection | None = None
        self._idle_readers: list[aiosqlite.Connection] = []
        self._reader_slots = asyncio.Semaphore(self.options.max_readers)
        self._closed = False
        self._flushes: set[asyncio.Task[None]] = set()

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return f"SqliteStateAdapter({self.options.path!r}, table_prefix={self.options.table_prefix!r})"

    async def __aenter__(self) -> SqliteStateAdapter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------ connections

    def _check_open(self) -> None:
        if self._closed:
            raise AdapterClosedError(f"{self!r} is closed; open a new adapter")

    async def _connect(self, *, reader: bool) -> aiosqlite.Connection:
        opts = self.options
        with translating(opts.path, opts.table_prefix):
            conn = await _open(opts.path, opts.busy_timeout)
            try:
                conn.row_factory = sqlite3.Row
                if not reader:
                    await enable_wal(lambda: conn.execute_fetchall(WAL), opts.busy_timeout)
                    await conn.execute_fetchall(f"PRAGMA synchronous = {opts.synchronous}")
                await conn.execute_fetchall("PRAGMA foreign_keys = ON")
                if reader:
                    await conn.execute_fetchall("PRAGMA query_only = ON")
            except BaseException:
                await conn.close()
                raise
        return conn

    async def _get_writer(self, *, migrating: bool = False) -> aiosqlite.Connection:
        self._check_open()
        if self._writer is None:
            async with self._open_lock:
                if self._writer is None:
                    conn = await self._connect(reader=False)
                    try:
                        await check_schema_version(
                            AiosqliteExecutor(conn, own=True),
                            self.options,
                            self._q,
                            require_current=not migrating,
                        )
                    except BaseException:
                        await conn.close()
                        raise
                    self._writer = conn
        return self._writer

    @asynccontextmanager
    async def _reader(self) -> AsyncIterator[aiosqlite.Connection]:
        async with self._reader_slots:
            self._check_open()
            conn = self._idle_readers.pop() if self._idle_readers else await self._connect(reader=True)
            reusable = False
            try:
                yield conn
                reusable = True
            finally:
                if reusable and not self._closed:
                    self._idle_readers.append(conn)
                else:
                    await conn.close()

    # ------------------------------------------------------------ transactions

    def transaction(
        self, *, read_only: bool = False, connection: object | None = None
    ) -> AbstractAsyncContextManager[StateTx]:
        """Open a transaction, or join the caller's aiosqlite / SQLAlchemy ``connection``.

        A joined transaction runs on the caller's connection and neither commits nor rolls
        back: the caller's commit decides. Its writes wait for the file's write lock in
        SQLite's busy handler, not on this adapter's in-process lock.
        """
        self._check_open()
        if connection is not None:
            return self._joined(connection, read_only)
        if read_only and not self.options.in_memory:
            return self._read_transaction()
        return self._write_transaction(read_only)

    @asynccontextmanager
    async def _write_transaction(self, read_only: bool) -> AsyncIterator[StateTx]:
        async with self._write_lock:
            conn = await self._get_writer()
            async with self._own_transaction(
                conn, "BEGIN" if read_only else "BEGIN IMMEDIATE", read_only
            ) as tx:
                yield tx

    @asynccontextmanager
    async def _read_transaction(self) -> AsyncIterator[StateTx]:
        await self._get_writer()  # the writer sets WAL mode and checks the schema version first
        async with self._reader() as conn, self._own_transaction(conn, "BEGIN", True) as tx:
            yield tx

    @asynccontextmanager
    async def _own_transaction(
        self, conn: aiosqlite.Connection, begin: str, read_only: bool
    ) -> AsyncIterator[StateTx]:
        executor = AiosqliteExecutor(conn, own=True)
        ctx = self._context(executor, read_only, foreign_keys=True)
        try:
            with translating(self.options.path, self.options.table_prefix):
                await executor.fetch(begin)
        except BaseException:
            # Cancelled mid-BEGIN, the statement may still run on aiosqlite's thread; the
            # ROLLBACK queues behind it, so the connection never stays inside a transaction.
            await self._rollback(executor)
            raise
        try:
            yield SqliteTx(ctx)
        except BaseException:
            ctx.closed = True
            await self._rollback(executor)
            raise
        ctx.closed = True
        try:
            with translating(self.options.path, self.options.table_prefix):
                await executor.fetch("COMMIT")
        except BaseException:
            await self._rollback(executor)
            raise

    async def _rollback(self, executor: Executor) -> None:
        """Roll back unconditionally; "no transaction is active" and other errors are moot here."""
        with contextlib.suppress(JobchainError, sqlite3.Error, ValueError):
            await executor.fetch("ROLLBACK")

    @asynccontextmanager
    async def _joined(self, connection: object, read_only: bool) -> AsyncIterator[StateTx]:
        with translating(self.options.path, self.options.table_prefix):
            executor, foreign_keys = await _join(connection, read_only)
        ctx = self._context(executor, read_only, foreign_keys=foreign_keys)
        try:
            yield SqliteTx(ctx)
        finally:
            ctx.closed = True

    def _context(self, executor: Executor, read_only: bool, *, foreign_keys: bool) -> TxContext:
        return TxContext(
            executor=executor,
            q=self._q,
            path=self.options.path,
            prefix=self.options.table_prefix,
            read_only=read_only,
            foreign_keys=foreign_keys,
        )

    # ------------------------------------------------------------ lifecycle

    async def migrate(self) -> None:
        """Apply the migrations this database lacks; idempotent and safe across processes.

        Runs in one ``BEGIN IMMEDIATE`` transaction, so concurrent migrators (threads or
        processes) apply each migration exactly once. Raises SchemaTooNewError when the
        database records migrations this library does not know.
        """
        self._check_open()
        async with self._write_lock:
            conn = await self._get_writer(migrating=True)
            await apply_migrations(AiosqliteExecutor(conn, own=True), self.options, self._q, utcnow())

    def after_commit(
        self, connection: object, on_commit: Callable[[], Awaitable[None]], on_rollback: Callable[[], None]
    ) -> bool:
        """Send a joined SQLAlchemy session's or connection's side effects after it commits.

        Returns False for a joined aiosqlite connection (it reports no commit): call
        ``await tx.flush()`` after committing it.
        """
        return observe_sqlalchemy_commit(connection, on_commit, on_rollback, self._flushes)

    async def close(self) -> None:
        """Close every connection; idempotent. Later transactions raise AdapterClosedError."""
        if self._closed:
            return
        self._closed = True
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)
        conns = [c for c in (self._writer, *self._idle_readers) if c is not None]
        self._writer = None
        self._idle_readers.clear()
        for conn in conns:
            # Closing must not fail; the connection is gone either way.
            with contextlib.suppress(sqlite3.Error, ValueError):
                await conn.close()


async def _open(path: str, busy_timeout: float) -> aiosqlite.Connection:
    connection = aiosqlite.connect(path, isolation_level=None, timeout=busy_timeout)
    try:
        opened = await connection
    except BaseException:
        # aiosqlite stops its worker thread on a failed connect without waiting for it; if the
        # event loop closed first, that thread would die on the closed loop. Wait for it here.
        thread = getattr(connection, "_thread", None)
        if thread is not None:
            await asyncio.to_thread(thread.join, 5.0)
        raise
    opened.text_factory = read_text
    return opened


async def _join(connection: object, read_only: bool) -> tuple[Executor, bool]:
    if is_aiosqlite_connection(connection):
        assert isinstance(connection, aiosqlite.Connection)
        executor = AiosqliteExecutor(connection, own=False)
        if not connection.in_transaction:
            await executor.fetch("BEGIN" if read_only else "BEGIN IMMEDIATE")
        rows = await executor.fetch("PRAGMA foreign_keys")
        return executor, bool(rows and rows[0]["foreign_keys"])
    if type(connection).__module__.startswith("sqlalchemy."):
        try:
            from jobchain_sqlite.providers.sqlalchemy import join_sqlalchemy
        except ImportError as exc:  # pragma: no cover - SQLAlchemy objects imply SQLAlchemy is installed
            raise InvalidArgumentError(f"the SQLAlchemy provider could not be imported: {exc}") from None
        return await join_sqlalchemy(connection, read_only=read_only)
    raise InvalidArgumentError(
        "connection must be an aiosqlite.Connection or an SQLAlchemy AsyncConnection/AsyncSession "
        f"(sqlite+aiosqlite), got {type(connection).__name__}{_sync_hint(connection)}"
    )


def _sync_hint(connection: object) -> str:
    """Point a synchronous connection at the synchronous client that joins it."""
    if isinstance(connection, sqlite3.Connection):
        return " (a sqlite3.Connection joins through the synchronous client, jobchain.sync)"
    return ""


async def open_state_adapter(url: BackendURL) -> SqliteStateAdapter:
    """The ``sqlite://`` factory named in ``jobchain_sqlite.plugin`` (see SqliteOptions.from_url)."""
    return SqliteStateAdapter(SqliteOptions.from_url(url))


__all__ = ["MIN_SQLITE_VERSION", "SqliteStateAdapter", "open_state_adapter"]
