"""The PostgreSQL state adapter for :mod:`jobchain.sync`: the same adapter over synchronous psycopg.

``open_sync_state_adapter(url)`` (the ``sync_factory`` behind ``postgresql://``) returns a
:class:`SyncPostgresStateAdapter`: a :class:`~jobchain_postgres.state.PostgresStateAdapter`
whose own transactions run on a synchronous ``psycopg_pool.ConnectionPool`` and whose
``transaction(connection=…)`` joins your synchronous objects:

- a psycopg ``Connection`` (not in autocommit mode, or inside ``with conn.transaction():``);
- an SQLAlchemy ``Session`` (or ``scoped_session``) or ``Connection`` on ``postgresql+psycopg``.

Its methods are still coroutines, but none of them ever suspends: every ``await`` reaches the
synchronous driver through :mod:`jobchain_postgres.sync_driver` and returns at once, so
:func:`jobchain.sync.drive.drive` runs them in the caller's thread without an event loop. The
SQL, the validation, the results and the typed errors are those of the async adapter.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool

from jobchain.errors import InvalidArgumentError
from jobchain.url import BackendURL
from jobchain_postgres._tx import PostgresStateTx
from jobchain_postgres.errors import closed, unreachable
from jobchain_postgres.options import StateOptions, parse_url, state_options, target
from jobchain_postgres.providers import AnyConnection, Database, database_of
from jobchain_postgres.state import PostgresStateAdapter, utc_session
from jobchain_postgres.sync_driver import SyncConnection, async_view

__all__ = [
    "SyncPoolProvider",
    "SyncPostgresStateAdapter",
    "open_sync_state_adapter",
    "sync_joined_connection",
]

SUPPORTED = (
    "a psycopg Connection, or an SQLAlchemy Session or Connection on postgresql+psycopg "
    "(create_engine('postgresql+psycopg://…'))"
)
"""What ``transaction(connection=…)`` of the synchronous adapter accepts, for error messages."""


class SyncPoolProvider:
    """Connections from a synchronous psycopg ``ConnectionPool``, lent as async-looking views.

    Closes the pool only if ``owned``. Every method is a coroutine that never suspends.
    """

    def __init__(self, pool: ConnectionPool[Any], *, owned: bool, label: str = "psycopg pool (sync)") -> None:
        self.pool = pool
        self.owned = owned
        self.label = label

    @property
    def database(self) -> Database | None:
        conninfo = self.pool.conninfo
        return database_of(conninfo) if isinstance(conninfo, str) else None

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AnyConnection]:
        # The pool's block rolls back a connection handed back inside a transaction and
        # discards a broken one, as the async pool does.
        with self.pool.connection() as connection:
            yield async_view(connection)

    @property
    def max_connections(self) -> int:
        """The most connections the pool holds at once (its size now; ``reserve`` may grow it)."""
        return self.pool.max_size

    async def recover(self) -> None:
        self.pool.check()

    async def reserve(self, count: int) -> int | None:
        """Grow an owned pool to ``count`` connections; a caller's pool keeps the size it was given."""
        if self.owned and self.pool.max_size < count:
            self.pool.resize(min_size=self.pool.min_size, max_size=count)
        return self.pool.max_size

    async def close(self) -> None:
        if self.owned:
            self.pool.close()


class SyncPostgresStateAdapter(PostgresStateAdapter):
    """The PostgreSQL state adapter over synchronous psycopg, for :mod:`jobchain.sync`.

    Build it with :meth:`open_sync` (own pool) or :meth:`from_sync_pool` (your
    ``ConnectionPool``); drive its coroutines with :func:`jobchain.sync.drive.drive`. The
    inherited async constructors (``open``, ``from_pool``…) build the async adapter's providers:
    do not use them here.
    """

    def __init__(self, provider: SyncPoolProvider, options: StateOptions | None = None) -> None:
        super().__init__(provider, options)
        # Where PostgreSQL notify listens on the same database, starts announce themselves in
        # their own statement (AnnouncesWithinState), exactly as with the async adapter.
        self.database = provider.database

    @classmethod
    def open_sync(
        cls, url: BackendURL | str, options: StateOptions | None = None
    ) -> SyncPostgresStateAdapter:
        """Connect with an own synchronous pool; URL query keys override ``options``.

        Raises BackendUnreachableError (refused, unknown host, bad password) before returning.
        """
        parsed = parse_url(url)
        resolved = state_options(parsed, options)
        where = target(parsed, resolved.connect_timeout)
        try:
            # One direct connection first: its error says *why* (refused, password…), a pool's does not.
            psycopg.connect(where.conninfo).close()
        except psycopg.Error as exc:
            raise unreachable(exc, where.display) from None
        pool: ConnectionPool[SyncConnection] = ConnectionPool(
            utc_session(where.conninfo),
            min_size=resolved.pool_min_size,
            max_size=resolved.pool_max_size,
            kwargs={"autocommit": True, "prepare_threshold": resolved.prepare_threshold},
            timeout=resolved.connect_timeout,
            open=False,
            name=f"jobchain-sync-{resolved.schema}",
        )
        pool.open(wait=False)
        return cls(SyncPoolProvider(pool, owned=True, label=f"{where.display} (sync)"), resolved)

    @classmethod
    def from_sync_pool(
        cls, pool: ConnectionPool[Any], options: StateOptions | None = None
    ) -> SyncPostgresStateAdapter:
        """Use your synchronous psycopg ``ConnectionPool`` (opened by you, never closed here)."""
        return cls(SyncPoolProvider(pool, owned=False), options)

    # The async adapter's constructors would put an async provider under this class.
    @classmethod
    async def open(cls, url: BackendURL | str, options: StateOptions | None = None) -> PostgresStateAdapter:
        raise _async_constructor("open", "open_sync(url)")

    @classmethod
    def from_pool(cls, pool: Any, options: StateOptions | None = None) -> PostgresStateAdapter:
        raise _async_constructor("from_pool", "from_sync_pool(pool)")

    @classmethod
    def from_connection(cls, connection: Any, options: StateOptions | None = None) -> PostgresStateAdapter:
        raise _async_constructor(
            "from_connection", "transaction(connection=conn) on an adapter from open_sync"
        )

    @classmethod
    def from_sqlalchemy(cls, engine: Any, options: StateOptions | None = None) -> PostgresStateAdapter:
        raise _async_constructor(
            "from_sqlalchemy", "transaction(connection=session) on an adapter from open_sync"
        )

    @asynccontextmanager
    async def _joined(self, connection: object, read_only: bool) -> AsyncIterator[PostgresStateTx]:
        if self._closed:  # transaction() checked already; kept for direct callers of _joined
            raise closed()
        tx = self._tx(async_view(sync_joined_connection(connection)), read_only)
        try:
            yield tx
        finally:
            tx._end()

    def after_commit(
        self, connection: object, on_commit: Callable[[], Awaitable[None]], on_rollback: Callable[[], None]
    ) -> bool:
        """Always False: this adapter does not watch your commit itself.

        The synchronous client (:mod:`jobchain.sync`) listens for an SQLAlchemy ``Session`` or
        ``Connection`` commit on its own; after committing a psycopg ``Connection`` call
        ``tx.flush()``.
        """
        return False


def _async_constructor(name: str, instead: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"SyncPostgresStateAdapter.{name} is the async adapter's constructor; use {instead} "
        f"(or PostgresStateAdapter.{name} for the async adapter)"
    )


def open_sync_state_adapter(url: BackendURL) -> PostgresStateAdapter:
    """``sync_factory`` behind ``postgresql://`` and ``postgres://`` (state role), named in ``plugin.py``."""
    return SyncPostgresStateAdapter.open_sync(url)


# ------------------------------------------------------------ joining a caller's transaction


def sync_joined_connection(connection: object) -> SyncConnection:
    """The psycopg ``Connection`` behind what a caller passes to ``transaction(connection=…)``.

    Accepts a psycopg ``Connection``, or an SQLAlchemy ``Session``/``scoped_session``/
    ``Connection`` on ``postgresql+psycopg`` (a session's transaction is begun if it has not
    begun, so its commit covers jobchain's writes). Refuses, with InvalidArgumentError, a
    connection in autocommit mode outside a transaction (its statements would commit on their
    own and your commit would decide nothing), another SQLAlchemy dialect, async objects, and
    anything else.
    """
    if isinstance(connection, psycopg.Connection):
        return _in_transaction(
            connection, "open one first (with conn.transaction(): …) or use autocommit=False"
        )
    if isinstance(connection, psycopg.AsyncConnection):
        raise InvalidArgumentError(
            f"cannot join a psycopg AsyncConnection synchronously; use the async client "
            f"(jobchain.connect) with it, or pass {SUPPORTED}"
        )
    if type(connection).__module__.startswith("sqlalchemy."):
        return _sqlalchemy_connection(connection)
    raise InvalidArgumentError(f"cannot join a {type(connection).__name__}; pass {SUPPORTED}")


def _in_transaction(connection: SyncConnection, fix: str) -> SyncConnection:
    if connection.closed:
        raise InvalidArgumentError("the psycopg connection is closed; pass an open one")
    if connection.autocommit and connection.info.transaction_status == TransactionStatus.IDLE:
        raise InvalidArgumentError(
            f"the psycopg connection is in autocommit mode and not inside a transaction; {fix} "
            "so your commit decides"
        )
    return connection


def _require_psycopg_dialect(bind: Any, what: str) -> None:
    dialect = getattr(bind, "dialect", None)
    name = f"{getattr(dialect, 'name', '?')}+{getattr(dialect, 'driver', '?')}"
    if name != "postgresql+psycopg":
        raise InvalidArgumentError(
            f"the SQLAlchemy {what} uses {name}; jobchain-postgres needs postgresql+psycopg "
            "(create_engine('postgresql+psycopg://…'))"
        )


def _sqlalchemy_connection(obj: Any) -> SyncConnection:
    from sqlalchemy.engine import Connection
    from sqlalchemy.exc import UnboundExecutionError
    from sqlalchemy.orm import Session, scoped_session

    if isinstance(obj, scoped_session):
        obj = obj()  # the current thread's Session (Flask-SQLAlchemy's db.session, for one)
    if isinstance(obj, Session):
        try:
            bind = obj.get_bind()
        except UnboundExecutionError:
            raise InvalidArgumentError(
                "the SQLAlchemy Session has no engine bound; create it with Session(engine)"
            ) from None
        _require_psycopg_dialect(bind, "Session")
        # Begins the session's transaction if it has not begun, so its commit covers our writes.
        obj = obj.connection()
    elif not isinstance(obj, Connection):
        async_hint = (
            " (async objects go with the async client, jobchain.connect)"
            if "Async" in type(obj).__name__
            else ""
        )
        raise InvalidArgumentError(f"cannot join a {type(obj).__name__}{async_hint}; pass {SUPPORTED}")
    _require_psycopg_dialect(obj, "Connection")
    if obj.closed or obj.invalidated:
        raise InvalidArgumentError("the SQLAlchemy connection is closed; pass an open one")
    if not obj.in_transaction():
        raise InvalidArgumentError(
            "the SQLAlchemy connection is not inside a transaction; use `with engine.begin() as conn:` "
            "(or conn.begin(), or a Session) so your commit decides"
        )
    driver = obj.connection.driver_connection
    if not isinstance(driver, psycopg.Connection):
        raise InvalidArgumentError(
            f"the SQLAlchemy connection wraps {type(driver).__name__}, not a psycopg Connection; "
            "use create_engine('postgresql+psycopg://…')"
        )
    return _in_transaction(driver, "do not use isolation_level='AUTOCOMMIT' for it")
