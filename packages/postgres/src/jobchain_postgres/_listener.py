"""The one dedicated LISTEN connection of a notify adapter, and its reconnect loop.

Started lazily by the first listener and stopped by the last (start and stop are serialized).
It LISTENs on every channel of the adapter at once, so adding a listener never needs a
statement on a connection that is busy waiting for notifications. If the connection or the
server drops, the reader reconnects with exponential backoff and LISTENs again; notifications
sent meanwhile are lost, which the notify contract allows (workers also poll).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import psycopg

from jobchain_postgres._identifiers import listen_statement

log = logging.getLogger("jobchain_postgres.notify")

Dispatch = Callable[[str, str], None]
"""Called with (channel, payload) for every notification received."""


class ListenConnection:
    """One connection LISTENing on ``channels``; notifications go to ``dispatch``."""

    def __init__(
        self,
        conninfo: str,
        channels: list[str],
        dispatch: Dispatch,
        *,
        on_connected: Callable[[], None],
        reconnect_initial: float,
        reconnect_max: float,
    ) -> None:
        self._conninfo = conninfo
        self._listen = listen_statement(channels)
        self._dispatch = dispatch
        self._on_connected = on_connected
        self._initial = reconnect_initial
        self._max = reconnect_max
        self._lock = asyncio.Lock()
        self._connection: psycopg.AsyncConnection[object] | None = None
        self._reader: asyncio.Task[None] | None = None
        self.reconnects = 0
        """How many times the connection was re-established after a drop (for tests and metrics)."""
        self.pause: Callable[[float], Awaitable[None]] = asyncio.sleep
        """Waits out the backoff before a reconnect; a test holds the reconnect with a gate."""

    @property
    def running(self) -> bool:
        return self._reader is not None

    @property
    def connected(self) -> bool:
        return self._connection is not None and not self._connection.closed

    @property
    def backend_pid(self) -> int | None:
        """The server process id of the LISTEN connection (None while disconnected)."""
        connection = self._connection
        return None if connection is None or connection.closed else connection.info.backend_pid

    async def start(self) -> None:
        """Connect and LISTEN (if not running); returns once notifications can arrive."""
        async with self._lock:
            if self._reader is not None:
                return
            self._connection = await self._connect()
            self._reader = asyncio.create_task(self._read(), name="jobchain-postgres-listen")
        self._on_connected()

    async def stop(self) -> None:
        """Stop reading and close the connection. Safe to call when not running."""
        async with self._lock:
            reader, self._reader = self._reader, None
            if reader is not None:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await reader
            await self._close()

    async def _connect(self) -> psycopg.AsyncConnection[object]:
        connection: psycopg.AsyncConnection[object] = await psycopg.AsyncConnection.connect(
            self._conninfo, autocommit=True
        )
        try:
            await connection.execute(self._listen, prepare=False)
        except BaseException:
            await connection.close()
            raise
        return connection

    async def _close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and not connection.closed:
            with contextlib.suppress(Exception):
                await connection.close()

    async def _read(self) -> None:
        delay = self._initial
        while True:
            connection = self._connection
            try:
                if connection is None or connection.closed:
                    connection = self._connection = await self._connect()
                    self.reconnects += 1
                    log.info("jobchain LISTEN connection re-established")
                    self._on_connected()
                delay = self._initial
                async for notification in connection.notifies():
                    self._dispatch(notification.channel, notification.payload)
            except asyncio.CancelledError:
                raise
            except psycopg.Error as error:
                log.warning("jobchain LISTEN connection lost (%s); reconnecting in %.1f s", error, delay)
                await self._close()
                await self.pause(delay)
                delay = min(delay * 2, self._max)


__all__ = ["Dispatch", "ListenConnection"]
