"""A Redis that goes silent (a partition, a frozen host) is noticed: both connections the adapter
opens probe an idle peer and give up on unacknowledged data within a stated bound (issue 35)."""

from __future__ import annotations

import socket
from typing import Any

from jobchain_redis import RedisNotifyAdapter, RedisNotifyOptions
from jobchain_redis.notify import KEEPALIVE_OPTIONS


def _socket_of(client: Any) -> socket.socket:
    connection = client.connection or client.connection_pool._available_connections[0]
    sock = connection._writer.get_extra_info("socket")
    assert sock is not None
    return sock


def _options(sock: socket.socket) -> dict[str, int]:
    return {
        "keepalive": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
        "idle": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
        "interval": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
        "count": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
        "user_timeout": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
    }


EXPECTED = {"keepalive": 1, "idle": 10, "interval": 5, "count": 3, "user_timeout": 30_000}


async def test_both_connections_probe_a_silent_peer(redis_url: str, unique_prefix: str) -> None:
    adapter = await RedisNotifyAdapter.connect(redis_url, options=RedisNotifyOptions(prefix=unique_prefix))
    try:
        await adapter._commands.ping()
        unsubscribe = await adapter.listen_job_scheduled(["keepalive.probe"], lambda _: None)
        try:
            pubsub = adapter._subscriber._pubsub
            assert pubsub is not None
            assert _options(_socket_of(adapter._commands)) == EXPECTED
            assert _options(pubsub.connection._writer.get_extra_info("socket")) == EXPECTED
        finally:
            await unsubscribe()
    finally:
        await adapter.close()


def test_the_options_are_the_postgresql_bounds() -> None:
    assert KEEPALIVE_OPTIONS == {
        socket.TCP_KEEPIDLE: 10,
        socket.TCP_KEEPINTVL: 5,
        socket.TCP_KEEPCNT: 3,
        socket.TCP_USER_TIMEOUT: 30_000,
    }
