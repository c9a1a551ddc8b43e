"""A loopback TCP proxy between one worker and the private PostgreSQL server, to partition it.

The proxy runs its own event loop in a thread of the test process, so a cell's schedule can
freeze and thaw it from anywhere. Three faults:

- :meth:`freeze` with ``hold=True``: nothing passes either way, and what each side sends is
  kept and delivered at :meth:`thaw`: a partition that heals before TCP gives up (the bytes
  were retransmitted). A request the worker sent during the partition reaches the server late.
- :meth:`freeze` with ``hold=False``: nothing passes, what is sent is lost, and at the thaw
  every connection that was open is cut (TCP gave up on it: the worker sees it broken). New
  connections made meanwhile wait, and are cut too.
- :attr:`delay`: every chunk is forwarded that many seconds late, each way (a slow network).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Coroutine
from typing import Any


class _Pipe:
    """One direction of one connection: a reader, a writer, and what the partition held."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.held: list[bytes] = []


class PartitionProxy:
    """Forwards 127.0.0.1:``port`` to ``target_port``; freeze, thaw and slow it down."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.delay = 0.0
        """Seconds each chunk waits before it is forwarded, each way."""
        self.frozen_since: float | None = None
        self.hold = True
        self.chunks_held = 0
        self.chunks_dropped = 0
        self.connections_cut = 0
        self._open: set[asyncio.StreamWriter] = set()
        self._pipes: list[_Pipe] = []
        self._thawed: asyncio.Event | None = None
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-partition-proxy", daemon=True)

    def __enter__(self) -> PartitionProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the partition proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._call(self._close_all())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def url(self, database: str) -> str:
        """A state URL for ``database`` through the proxy."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def freeze(self, *, hold: bool) -> None:
        """Partition: from now on nothing passes (``hold``: what is sent is delivered at the thaw;
        otherwise it is lost and the connections are cut at the thaw)."""
        self._call(self._freeze(hold))

    def thaw(self) -> float:
        """Heal the partition; returns how long it lasted (seconds)."""
        return float(self._call(self._thaw()))

    # ------------------------------------------------------------------ the loop's side

    def _call(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(30)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def boot() -> None:
            self._thawed = asyncio.Event()
            self._thawed.set()
            server = await asyncio.start_server(self._client, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()

        self._loop.run_until_complete(boot())
        self._loop.run_forever()

    async def _freeze(self, hold: bool) -> None:
        assert self._thawed is not None
        self.hold = hold
        self.frozen_since = time.monotonic()
        self._thawed.clear()

    async def _thaw(self) -> float:
        assert self._thawed is not None
        assert self.frozen_since is not None
        lasted = time.monotonic() - self.frozen_since
        if self.hold:
            for pipe in self._pipes:
                for chunk in pipe.held:
                    pipe.writer.write(chunk)
                pipe.held.clear()
        else:
            await self._close_all()
        self.frozen_since = None
        self._thawed.set()
        return lasted

    async def _close_all(self) -> None:
        for writer in list(self._open):
            self.connections_cut += 1
            writer.transport.abort()  # a reset, not a goodbye: the peer finds it broken
        self._open.clear()
        self._pipes.clear()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._thawed is not None
        self._open.add(writer)
        if self.frozen_since is not None:
            await self._thawed.wait()  # a connection made during the partition waits for it
            if not self.hold:
                writer.transport.abort()
                return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._open.add(up_writer)
        up, down = _Pipe(reader, up_writer), _Pipe(up_reader, writer)
        self._pipes += [up, down]
        await asyncio.gather(self._forward(up), self._forward(down), return_exceptions=True)
        for pipe in (up, down):
            with contextlib.suppress(ValueError):
                self._pipes.remove(pipe)
        for side in (writer, up_writer):
            self._open.discard(side)
            side.close()

    async def _forward(self, pipe: _Pipe) -> None:
        assert self._thawed is not None
        while data := await pipe.reader.read(65536):
            if self.delay:
                await asyncio.sleep(self.delay)
            if self.frozen_since is not None:
                if self.hold:
                    self.chunks_held += 1
                    pipe.held.append(data)
                else:
                    self.chunks_dropped += 1
                continue
            pipe.writer.write(data)
            await pipe.writer.drain()
        pipe.writer.close()
