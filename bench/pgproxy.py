"""A counting TCP proxy for the PostgreSQL wire protocol (round trips per job, for any driver).

Every frontend message is forwarded unchanged. A round trip is counted for each simple
``Query`` ('Q') and each ``Sync`` ('S', the end of one extended-protocol exchange) — the points
where a client waits for the server. Messages of one exchange that a driver pipelines still count
once per Sync. Runs in a thread of the orchestrator; only loopback.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter


class CountingProxy:
    def __init__(self, target_host: str = "127.0.0.1", target_port: int = 5432) -> None:
        self.target = (target_host, target_port)
        self.counts: Counter[str] = Counter()
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CountingProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def reset(self) -> None:
        self.counts.clear()

    @property
    def round_trips(self) -> int:
        return self.counts["Q"] + self.counts["S"]

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def boot() -> None:
            server = await asyncio.start_server(self._client, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()

        self._loop.run_until_complete(boot())
        self._loop.run_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(
            self._frontend(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )
        for w in (writer, up_writer):
            w.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    async def _frontend(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Startup packets (SSLRequest, GSSENCRequest, StartupMessage) have no type byte.
        while True:
            head = await reader.readexactly(8)
            length = int.from_bytes(head[:4], "big")
            code = int.from_bytes(head[4:8], "big")
            body = await reader.readexactly(length - 8)
            writer.write(head + body)
            await writer.drain()
            if code in (80877103, 80877104):  # SSL / GSS request: the server answers 'N'
                continue
            break
        buf = b""
        while data := await reader.read(65536):
            writer.write(data)
            buf += data
            while len(buf) >= 5:
                length = int.from_bytes(buf[1:5], "big")
                if len(buf) < 1 + length:
                    break
                self.counts[chr(buf[0])] += 1
                buf = buf[1 + length :]
            await writer.drain()
        writer.close()
