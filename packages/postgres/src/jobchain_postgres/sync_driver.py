"""An async-looking view over a synchronous psycopg ``Connection``, for :mod:`jobchain.sync`.

The state adapter is written once, as coroutines over psycopg's ``AsyncConnection``. Given this
view instead, each of its ``await``\\ s calls the synchronous driver and finishes at once, so
:func:`jobchain.sync.drive.drive` runs the adapter's code (same SQL, same validation, same
errors) to completion in the caller's thread, with no event loop.

The view offers exactly the part of ``AsyncConnection`` (and ``AsyncCursor``) the adapter uses:
:class:`DriverConnection` and :class:`DriverCursor` name it, and the type checker verifies that
both psycopg's async classes and these views provide it. The adapter's code is annotated with
``AsyncConnection``; :func:`async_view` is the one place that hands a view over as one.
"""

from __future__ import annotations

from collections.abc import Awaitable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

import psycopg
from psycopg.abc import Params
from psycopg.abc import QueryNoTemplate as Query
from psycopg.adapt import AdaptersMap
from psycopg.rows import tuple_row

if TYPE_CHECKING:
    from psycopg import ConnectionInfo
    from psycopg.pq.abc import PGresult

    from jobchain_postgres.providers import AnyConnection

__all__ = ["DriverConnection", "DriverCursor", "SyncConnectionView", "SyncCursorView", "async_view"]

T = TypeVar("T")
SyncConnection = psycopg.Connection[Any]


class DriverCursor(Protocol):
    """The cursor surface the state adapter uses (``AsyncCursor`` provides it)."""

    @property
    def adapters(self) -> AdaptersMap: ...
    @property
    def description(self) -> list[psycopg.Column] | None: ...
    @property
    def pgresult(self) -> PGresult | None: ...

    def execute(
        self, query: Query, params: Params | None = None, *, prepare: bool | None = None
    ) -> Awaitable[Any]: ...
    def fetchall(self) -> Awaitable[list[Any]]: ...
    def fetchone(self) -> Awaitable[Any | None]: ...


class DriverConnection(Protocol):
    """The connection surface the state adapter uses (``AsyncConnection`` provides it)."""

    @property
    def info(self) -> ConnectionInfo: ...
    @property
    def autocommit(self) -> bool: ...
    @property
    def read_only(self) -> bool | None: ...
    @property
    def broken(self) -> bool: ...
    @property
    def closed(self) -> bool: ...

    def cursor(self) -> DriverCursor: ...
    def execute(
        self, query: Query, params: Params | None = None, *, prepare: bool | None = None
    ) -> Awaitable[Any]: ...
    def pipeline(self) -> AbstractAsyncContextManager[Any]: ...
    def transaction(self) -> AbstractAsyncContextManager[Any]: ...
    def set_read_only(self, value: bool | None) -> Awaitable[None]: ...
    def set_autocommit(self, value: bool) -> Awaitable[None]: ...
    def rollback(self) -> Awaitable[None]: ...


class _AsyncBlock(Generic[T]):
    """A synchronous context manager (psycopg's pipeline or transaction block) behind ``async with``."""

    __slots__ = ("_block",)

    def __init__(self, block: AbstractContextManager[T]) -> None:
        self._block = block

    async def __aenter__(self) -> T:
        return self._block.__enter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return self._block.__exit__(exc_type, exc, tb)


class SyncCursorView:
    """A synchronous psycopg ``Cursor`` whose methods are coroutines that never suspend."""

    __slots__ = ("_cursor",)

    def __init__(self, cursor: psycopg.Cursor[Any]) -> None:
        self._cursor = cursor

    @property
    def adapters(self) -> AdaptersMap:
        return self._cursor.adapters

    @property
    def description(self) -> list[psycopg.Column] | None:
        return self._cursor.description

    @property
    def pgresult(self) -> PGresult | None:
        return self._cursor.pgresult

    async def execute(
        self, query: Query, params: Params | None = None, *, prepare: bool | None = None
    ) -> SyncCursorView:
        self._cursor.execute(query, params, prepare=prepare)
        return self

    async def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    async def fetchone(self) -> Any | None:
        return self._cursor.fetchone()


class SyncConnectionView:
    """A synchronous psycopg ``Connection`` seen through the ``AsyncConnection`` surface the
    adapter uses. It never commits, closes or reconfigures the connection on its own: only the
    adapter's statements (the same ones it sends on an ``AsyncConnection``) reach it."""

    __slots__ = ("_connection",)

    def __init__(self, connection: SyncConnection) -> None:
        self._connection = connection

    @property
    def sync_connection(self) -> SyncConnection:
        """The psycopg ``Connection`` behind this view (your own SQL goes there)."""
        return self._connection

    def __repr__(self) -> str:
        return f"<SyncConnectionView of {self._connection!r}>"

    @property
    def info(self) -> ConnectionInfo:
        return self._connection.info

    @property
    def autocommit(self) -> bool:
        return self._connection.autocommit

    @property
    def read_only(self) -> bool | None:
        return self._connection.read_only

    @property
    def broken(self) -> bool:
        return self._connection.broken

    @property
    def closed(self) -> bool:
        return self._connection.closed

    def cursor(self) -> SyncCursorView:
        # A plain server-binding cursor with tuple rows, whatever cursor_factory or row_factory
        # the caller's connection has (Django's, for one, binds client-side): the adapter
        # reads its rows by position and sends the same statements as on the async path.
        return SyncCursorView(psycopg.Cursor(self._connection, row_factory=tuple_row))

    async def execute(
        self, query: Query, params: Params | None = None, *, prepare: bool | None = None
    ) -> SyncCursorView:
        return await self.cursor().execute(query, params, prepare=prepare)

    def pipeline(self) -> _AsyncBlock[psycopg.Pipeline]:
        return _AsyncBlock(self._connection.pipeline())

    def transaction(self) -> _AsyncBlock[psycopg.Transaction]:
        return _AsyncBlock(self._connection.transaction())

    async def set_read_only(self, value: bool | None) -> None:
        self._connection.read_only = value

    async def set_autocommit(self, value: bool) -> None:
        self._connection.autocommit = value

    async def rollback(self) -> None:
        self._connection.rollback()


def async_view(connection: SyncConnection) -> AnyConnection:
    """``connection`` behind the ``AsyncConnection`` surface the state adapter is annotated with.

    The one cast of the synchronous path: the adapter's code is typed with psycopg's
    ``AsyncConnection`` but uses only :class:`DriverConnection` of it, which the type checker
    verifies that :class:`SyncConnectionView` provides (see ``_conforms`` below), and a test
    checks that every connection and cursor attribute the adapter's modules touch is in it.
    """
    return cast("AnyConnection", SyncConnectionView(connection))


if TYPE_CHECKING:

    def _conforms(
        view: SyncConnectionView,
        cursor: SyncCursorView,
        native: psycopg.AsyncConnection[Any],
        native_cursor: psycopg.AsyncCursor[Any],
    ) -> tuple[DriverConnection, DriverCursor, DriverConnection, DriverCursor]:
        # Checked by mypy only: the views and psycopg's async classes offer the same surface.
        return view, cursor, native, native_cursor
