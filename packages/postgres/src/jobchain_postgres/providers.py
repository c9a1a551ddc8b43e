"""Providers: where the state adapter gets a psycopg connection for its own transactions, and how it
joins a caller's transaction.

- :class:`PoolProvider`: a psycopg_pool ``AsyncConnectionPool`` (the adapter's own, from a URL, or
  the caller's).
- :class:`ConnectionProvider`: one caller-owned ``AsyncConnection``; transactions take turns.
- :class:`SQLAlchemyProvider`: an SQLAlchemy ``AsyncEngine`` on ``postgresql+psycopg``.

:func:`joined_connection` unwraps what ``transaction(connection=…)`` accepts: a psycopg
``AsyncConnection`` or an SQLAlchemy ``AsyncConnection``/``AsyncSession`` (optional extra).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from jobchain.contracts.providers import StateProvider
from jobchain.errors import InvalidArgumentError

AnyConnection = AsyncConnection[Any]


Provider = StateProvider[AnyConnection]
"""What the adapter borrows connections from (core's provider contract over psycopg connections)."""

Database = tuple[str, str, str]
"""A server database as (host, port, dbname): where notifications sent in a transaction go."""


def database_of(conninfo: str) -> Database | None:
    """The database a libpq connection string names, or None unless host and dbname are explicit."""
    params = conninfo_to_dict(conninfo)
    host, dbname = params.get("host") or params.get("hostaddr"), params.get("dbname")
    if not host or not dbname:
        return None
    return (str(host), str(params.get("port") or 5432), str(dbname))


def provider_database(provider: object) -> Database | None:
    """The database a provider's connections open, where it can tell without connecting."""
    if isinstance(provider, PoolProvider):
        # A pool may take a function that builds its conninfo per connection: then unknown.
        conninfo = provider.pool.conninfo
        return database_of(conninfo) if isinstance(conninfo, str) else None
    if isinstance(provider, ConnectionProvider):
        info = provider.connection_info
        return (info.host, str(info.port), info.dbname) if info.host and info.dbname else None
    if isinstance(provider, SQLAlchemyProvider):
        return provider.database
    return None


class PoolProvider:
    """Connections from a psycopg ``AsyncConnectionPool``; closes it only if ``owned``."""

    def __init__(self, pool: AsyncConnectionPool[Any], *, owned: bool, label: str = "psycopg pool") -> None:
        self.pool = pool
        self.owned = owned
        self.label = label

    def connection(self) -> AbstractAsyncContextManager[AnyConnection]:
        return self.pool.connection()

    @property
    def max_connections(self) -> int:
        """The most connections the pool holds at once (its size now; ``reserve`` may grow it)."""
        return self.pool.max_size

    async def recover(self) -> None:
        # A server restart kills every pooled connection at once: check the idle ones now
        # instead of failing one transaction per dead connection.
        await self.pool.check()

    async def reserve(self, count: int) -> int | None:
        """Grow an owned pool to ``count`` connections; a caller's pool keeps the size it was given."""
        if self.owned and self.pool.max_size < count:
            await self.pool.resize(min_size=self.pool.min_size, max_size=count)
        return self.pool.max_size

    async def close(self) -> None:
        if self.owned:
            await self.pool.close()


class ConnectionProvider:
    """One caller-owned connection shared by every transaction, one at a time (never closed here)."""

    def __init__(self, connection: AnyConnection) -> None:
        self._connection = connection
        self._lock = asyncio.Lock()
        self.label = "psycopg connection"

    @property
    def connection_info(self) -> Any:
        """The connection's ``psycopg.ConnectionInfo`` (host, port, dbname…)."""
        return self._connection.info

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AnyConnection]:
        async with self._lock:
            yield self._connection

    async def recover(self) -> None:
        return None

    async def reserve(self, count: int) -> int | None:
        return 1  # transactions take turns on the one connection

    async def close(self) -> None:
        return None


class SQLAlchemyProvider:
    """Raw psycopg connections checked out of an SQLAlchemy ``AsyncEngine`` (never disposed here)."""

    def __init__(self, engine: Any) -> None:
        _require_psycopg_dialect(engine)
        self._engine = engine
        self.label = "SQLAlchemy engine"

    @property
    def database(self) -> Database | None:
        """The database the engine's URL names (None unless host and database are in it)."""
        url = getattr(self._engine, "url", None)
        host, dbname = getattr(url, "host", None), getattr(url, "database", None)
        return (str(host), str(getattr(url, "port", None) or 5432), str(dbname)) if host and dbname else None

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AnyConnection]:
        async with self._engine.connect() as sa_connection:
            raw = await sa_connection.get_raw_connection()
            yield _driver_connection(raw)

    @property
    def max_connections(self) -> int | None:
        """The engine pool's size plus overflow (None if unbounded or not a sized pool)."""
        pool = getattr(getattr(self._engine, "sync_engine", None), "pool", None)
        size, overflow = getattr(pool, "size", None), getattr(pool, "_max_overflow", None)
        if not callable(size) or not isinstance(overflow, int) or overflow < 0:
            return None
        return int(size()) + overflow

    async def recover(self) -> None:
        return None  # SQLAlchemy's pool invalidates connections that raised a disconnect error

    async def reserve(self, count: int) -> int | None:
        """The engine pool's size plus overflow (None if unbounded or not a sized pool)."""
        return self.max_connections

    async def close(self) -> None:
        return None


def dead_connections_at_most(provider: object) -> int:
    """How many dead connections in a row one transaction may be handed by ``provider``.

    A server restart kills every connection a pool holds, and one still being opened (its
    backend already counted) reaches the pool dead after the pool was checked: at most the
    pool's size, each handed out once and then discarded; the next one is new. A provider
    that cannot tell its size (one connection of yours, an unbounded engine pool) counts 1.
    """
    held = getattr(provider, "max_connections", None)
    return held if isinstance(held, int) and held > 0 else 1


def _is_sqlalchemy(obj: object) -> bool:
    return type(obj).__module__.startswith("sqlalchemy.")


def _require_psycopg_dialect(engine: Any) -> None:
    sync_engine = getattr(engine, "sync_engine", None)
    dialect = getattr(sync_engine, "dialect", None)
    name = f"{getattr(dialect, 'name', '?')}+{getattr(dialect, 'driver', '?')}"
    if name != "postgresql+psycopg":
        raise InvalidArgumentError(
            f"the SQLAlchemy engine uses {name}; jobchain-postgres needs postgresql+psycopg "
            "(create_async_engine('postgresql+psycopg://…'))"
        )


def _driver_connection(raw: Any) -> AnyConnection:
    driver = getattr(raw, "driver_connection", None)
    if not isinstance(driver, AsyncConnection):
        raise InvalidArgumentError(
            f"the SQLAlchemy connection wraps {type(driver).__name__}, not a psycopg AsyncConnection; "
            "use create_async_engine('postgresql+psycopg://…')"
        )
    return driver


async def joined_connection(connection: object) -> AnyConnection:
    """The psycopg connection behind what a caller passes to ``transaction(connection=…)``.

    Accepts a psycopg ``AsyncConnection`` or an SQLAlchemy ``AsyncConnection``/``AsyncSession``
    on ``postgresql+psycopg``. An autocommit psycopg connection must already be inside a
    transaction (``async with conn.transaction():``), otherwise every statement would commit on
    its own and the caller's commit would decide nothing.
    """
    if isinstance(connection, AsyncConnection):
        if connection.autocommit and connection.info.transaction_status == TransactionStatus.IDLE:
            raise InvalidArgumentError(
                "the psycopg connection is in autocommit mode and not inside a transaction; "
                "open one first (async with conn.transaction(): …) so your commit decides"
            )
        return connection
    if _is_sqlalchemy(connection):
        return await _sqlalchemy_connection(connection)
    raise InvalidArgumentError(
        f"cannot join a {type(connection).__name__}; pass a psycopg AsyncConnection or an SQLAlchemy "
        "AsyncConnection/AsyncSession on postgresql+psycopg"
    )


async def _sqlalchemy_connection(obj: Any) -> AnyConnection:
    from sqlalchemy.ext.asyncio import AsyncConnection as SAConnection
    from sqlalchemy.ext.asyncio import AsyncSession

    if isinstance(obj, AsyncSession):
        # Begins the session's transaction if it has not begun, so its commit covers our writes.
        obj = await obj.connection()
    if not isinstance(obj, SAConnection):
        raise InvalidArgumentError(
            f"cannot join a {type(obj).__name__}; pass an SQLAlchemy AsyncConnection or AsyncSession"
        )
    _require_psycopg_dialect(obj)
    if not obj.in_transaction():
        raise InvalidArgumentError(
            "the SQLAlchemy connection is not inside a transaction; use `async with engine.begin() as conn:` "
            "(or a session) so your commit decides"
        )
    raw = await obj.get_raw_connection()
    return _driver_connection(raw)


__all__ = [
    "AnyConnection",
    "ConnectionProvider",
    "Database",
    "PoolProvider",
    "Provider",
    "SQLAlchemyProvider",
    "database_of",
    "dead_connections_at_most",
    "joined_connection",
    "provider_database",
]
