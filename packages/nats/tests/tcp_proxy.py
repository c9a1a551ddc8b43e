"""A loopback TCP proxy in the test's event loop, to break a client's connection on demand.

The shared nats-server has no way to kick one client without a system account, and it must
never be restarted by a test. So the conformance tests connect each adapter through a proxy
of its own; ``drop()`` aborts both sides of every proxied connection at once, so the server
forgets the client's subscriptions and the client sees its socket die, exactly as when a
connection breaks. The proxy keeps accepting, so the client can reconnect through it.
"""

from __future__ import annotations

import asyncio
import contextlib


class TcpProxy:
    """Forwards connections on a free loopback port to ``host:port``."""

    def __init__(self, host: str, port: int) -> None:
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def drop(self) -> int:
        """Abort every proxied connection (both sides); returns how many were cut."""
        pairs = list(self._pairs)
        for client, upstream in pairs:
            client.transport.abort()
            upstream.transport.abort()
        return len(pairs)

    async def close(self) -> None:
        """Stop accepting, cut every connection and wait for the forwarding tasks to end."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        self.drop()
        if self._handlers:
            await asyncio.wait(self._handlers, timeout=30)

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection(self._host, self._port)
            except OSError:
                client_writer.transport.abort()
                return
            pair = (client_writer, upstream_writer)
            self._pairs.add(pair)
            try:
                await asyncio.gather(
                    _pipe(client_reader, upstream_writer), _pipe(upstream_reader, client_writer)
                )
            finally:
                self._pairs.discard(pair)
        finally:
            self._handlers.discard(task)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass  # the other side was aborted (drop) or reset
    finally:
        # One direction ended: end the whole connection, as a broken link does.
        writer.transport.abort()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
