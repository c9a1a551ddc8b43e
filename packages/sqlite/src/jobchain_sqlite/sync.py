"""The SQLite state adapter on stdlib ``sqlite3`` connections, for the synchronous client.

:func:`open_sync_state_adapter` (the ``sync_factory`` of ``sqlite://``) returns a
:class:`SyncSqliteStateAdapter`: the same adapter, statements and errors as the async one,
whose transactions run on ``sqlite3`` connections, so its coroutines never suspend and
``jobchain.sync.drive`` runs them without an event loop.

Threads: one adapter may serve many threads (Django or Flask request threads). It mirrors
the async concurrency model with thread primitives:

- One writer connection (``check_same_thread=False``). An own write transaction holds a
  ``threading.Lock`` from ``BEGIN IMMEDIATE`` to ``COMMIT``, so writers in this process queue on
  the lock (any thread) and writers in other processes wait in SQLite's busy handler. A
  thread that opens a second own write transaction while its first is open gets
  InvalidArgumentError (it would wait for itself); use ``tx.savepoint()``.
- Read-only transactions run on a pool of up to ``max_readers`` reader connections, each used
  by one thread at a time. ``:memory:`` has one connection: every transaction takes the lock.
- A joined transaction runs on the caller's connection in the caller's thread and takes no
  lock: its writes wait for the file's write lock in SQLite's busy handler.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager

from jobchain.contracts.state import StateTx
from jobchain.entities import utcnow
from jobchain.errors import InvalidArgumentError
from jobchain.url import BackendURL
from jobchain_sqlite.context import TxContext
from jobchain_sqlite.decoding import read_text
from jobchain_sqlite.errors import translating
from jobchain_sqlite.migrate import apply_migrations, check_schema_version
from jobchain_sqlite.options import SqliteOptions
from jobchain_sqlite.providers import Executor
from jobchain_sqlite.providers.sqlite3 import Sqlite3Executor
from jobchain_sqlite.state import SqliteStateAdapter
from jobchain_sqlite.sync_join import join_sync
from jobchain_sqlite.tx import SqliteTx
from jobchain_sqlite.wal import WAL, enable_wal_sync


class SyncSqliteStateAdapter(SqliteStateAdapter):
    """SqliteStateAdapter on ``sqlite3`` connections: every coroutine completes without suspending.

    ``transaction(connection=…)`` joins a ``sqlite3.Connection`` or an SQLAlchemy sync
    ``Session``/``Connection`` on a pysqlite engine (see ``jobchain_sqlite.sync_join``).
    """

    def __init__(self, options: SqliteOptions | str) -> None:
        super().__init__(options)
        self._sync_lock = threading.Lock()  # own write transactions, migrate, close
        self._sync_lock_owner: int | None = None  # thread ident holding _sync_lock
        self._open_guard = threading.Lock()  # opening the writer connection
        self._pool_guard = threading.Lock()  # the idle reader list
        self._sync_writer: sqlite3.Connection | None = None
        self._sync_idle: list[sqlite3.Connection] = []
        self._sync_slots = threading.BoundedSemaphore(self.options.max_readers)

    def __repr__(self) -> str:
        return f"SyncSqliteStateAdapter({self.options.path!r}, table_prefix={self.options.table_prefix!r})"

    # ------------------------------------------------------------ connections

    def _connect_sync(self, *, reader: bool) -> sqlite3.Connection:
        opts = self.options
        with translating(opts.path, opts.table_prefix):
            # isolation_level=None: the adapter issues BEGIN/COMMIT itself (as on aiosqlite).
            # check_same_thread=False: a connection serves one thread at a time, but not always
            # the same one (the lock and the reader pool hand it over).
            conn = sqlite3.connect(
                opts.path, timeout=opts.busy_timeout, isolation_level=None, check_same_thread=False
            )
            try:
                conn.row_factory = sqlite3.Row
                conn.text_factory = read_text
                if not reader:
                    enable_wal_sync(lambda: conn.execute(WAL).fetchall(), opts.busy_timeout)
                    conn.execute(f"PRAGMA synchronous = {opts.synchronous}").fetchall()
                conn.execute("PRAGMA foreign_keys = ON").fetchall()
                if reader:
                    conn.execute("PRAGMA query_only = ON").fetchall()
            except BaseException:
                conn.close()
                raise
        return conn

    async def _sync_writer_conn(self, *, migrating: bool = False) -> sqlite3.Connection:
        self._check_open()
        if self._sync_writer is None:
            with self._open_guard:
                if self._sync_writer is None:
                    conn = self._connect_sync(reader=False)
                    try:
                        await check_schema_version(
                            Sqlite3Executor(conn, own=True),
                            self.options,
                            self._q,
                            require_current=not migrating,
                        )
                    except BaseException:
                        conn.close()
                        raise
                    self._sync_writer = conn
        return self._sync_writer

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the writer lock (waiting for other threads' own write transactions)."""
        me = threading.get_ident()
        if self._sync_lock_owner == me:
            raise InvalidArgumentError(
                f"this thread already has a transaction of {self!r} open, and a second one would "
                "wait for it forever; use tx.savepoint() inside the first, or open the next after it"
            )
        with self._sync_lock:
            self._sync_lock_owner = me
            try:
                yield
            finally:
                self._sync_lock_owner = None

    @contextmanager
    def _sync_reader(self) -> Iterator[sqlite3.Connection]:
        with self._sync_slots:
            self._check_open()
            with self._pool_guard:
                conn = self._sync_idle.pop() if self._sync_idle else None
            if conn is None:
                conn = self._connect_sync(reader=True)
            reusable = False
            try:
                yield conn
                reusable = True
            finally:
                with self._pool_guard:
                    if reusable and not self._closed:
                        self._sync_idle.append(conn)
                        conn = None
                if conn is not None:
                    with contextlib.suppress(sqlite3.Error):
                        conn.close()

    # ------------------------------------------------------------ transactions

    def transaction(
        self, *, read_only: bool = False, connection: object | None = None
    ) -> AbstractAsyncContextManager[StateTx]:
        """Open a transaction, or join the caller's ``sqlite3.Connection`` or SQLAlchemy sync
        ``Session``/``Connection`` (pysqlite): the caller's commit decides (see sync_join)."""
        return super().transaction(read_only=read_only, connection=connection)

    @asynccontextmanager
    async def _write_transaction(self, read_only: bool) -> AsyncIterator[StateTx]:
        with self._locked():
            conn = await self._sync_writer_conn()
            async with self._sync_own_transaction(
                conn, "BEGIN" if read_only else "BEGIN IMMEDIATE", read_only
            ) as tx:
                yield tx

    @asynccontextmanager
    async def _read_transaction(self) -> AsyncIterator[StateTx]:
        await self._sync_writer_conn()  # the writer sets WAL mode and checks the schema version first
        with self._sync_reader() as conn:
            async with self._sync_own_transaction(conn, "BEGIN", True) as tx:
                yield tx

    @asynccontextmanager
    async def _sync_own_transaction(
        self, conn: sqlite3.Connection, begin: str, read_only: bool
    ) -> AsyncIterator[StateTx]:
        executor = Sqlite3Executor(conn, own=True)
        ctx = self._context(executor, read_only, foreign_keys=True)
        with translating(self.options.path, self.options.table_prefix):
            await executor.fetch(begin)
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

    @asynccontextmanager
    async def _joined(self, connection: object, read_only: bool) -> AsyncIterator[StateTx]:
        with translating(self.options.path, self.options.table_prefix):
            executor, foreign_keys = await join_sync(connection, read_only=read_only)
        ctx = self._context(executor, read_only, foreign_keys=foreign_keys)
        try:
            yield SqliteTx(ctx)
        finally:
            ctx.closed = True

    def _context(self, executor: Executor, read_only: bool, *, foreign_keys: bool) -> TxContext:
        ctx = super()._context(executor, read_only, foreign_keys=foreign_keys)
        ctx.driven = True
        return ctx

    # ------------------------------------------------------------ lifecycle

    async def migrate(self) -> None:
        """Apply the migrations this database lacks (see SqliteStateAdapter.migrate)."""
        self._check_open()
        with self._locked():
            conn = await self._sync_writer_conn(migrating=True)
            await apply_migrations(Sqlite3Executor(conn, own=True), self.options, self._q, utcnow())

    async def close(self) -> None:
        """Close every connection; idempotent. Waits for an own write transaction of another
        thread to end; a reader in use closes when its transaction ends."""
        if self._closed:
            return
        self._closed = True
        with contextlib.ExitStack() as stack:
            if self._sync_lock_owner != threading.get_ident():
                stack.enter_context(self._sync_lock)
            with self._pool_guard:
                conns = [c for c in (self._sync_writer, *self._sync_idle) if c is not None]
                self._sync_writer = None
                self._sync_idle.clear()
            for conn in conns:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()


def open_sync_state_adapter(url: BackendURL) -> SqliteStateAdapter:
    """The ``sqlite://`` sync factory named in ``jobchain_sqlite.plugin`` (see SqliteOptions.from_url).

    Also takes ``sqlite+pysqlite://`` (SQLAlchemy's name for the stdlib driver), so a sync app
    can pass its engine's URL; the options and pragmas are those of the async factory.
    """
    if url.driver == "pysqlite":
        url = dataclasses.replace(url, driver=None)
    return SyncSqliteStateAdapter(SqliteOptions.from_url(url))


__all__ = ["SyncSqliteStateAdapter", "open_sync_state_adapter"]
