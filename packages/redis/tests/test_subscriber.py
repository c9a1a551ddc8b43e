"""The subscription connection: one socket per epoch, never reopened in place.

redis-py 8 reconnects a PubSub connection inside its failure handler, even with zero retries,
from whichever task saw the failure. With a second task sending SUBSCRIBE on the same
connection, two coroutines then read one socket and the caller gets asyncio's "readuntil()
called while another coroutine is already waiting" (CI, stop 52). The subscriber owns
reconnects: a broken connection ends the epoch, and only a new epoch opens a socket.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest
from redis.asyncio.connection import Connection

from jobchain_redis import RedisNotifyAdapter, RedisNotifyOptions

from .conftest import kill_clients

# Generous: a starved machine may take long to notice the kill and open the new epoch.
WITHIN = 60.0


async def test_a_killed_subscription_connection_is_reopened_only_by_a_new_epoch(
    redis_url: str, unique_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened_outside_an_epoch: list[str] = []
    original = Connection._connect

    async def recording_connect(self: Connection) -> Any:
        stack = inspect.stack(0)
        callers = [frame.function for frame in stack]
        from_subscriber = any(frame.filename.endswith("jobchain_redis/_subscriber.py") for frame in stack)
        if from_subscriber and "_start_epoch" not in callers:
            opened_outside_an_epoch.append(" < ".join(callers[:12]))
        return await original(self)

    monkeypatch.setattr(Connection, "_connect", recording_connect)
    adapter = await RedisNotifyAdapter.connect(redis_url, options=RedisNotifyOptions(prefix=unique_prefix))
    try:
        await adapter.listen_job_scheduled(["before"], lambda _: None)
        subscriber = adapter._subscriber
        first = subscriber._pubsub
        assert first is not None
        killed = await kill_clients(redis_url, name_prefix=f"jobchain:{unique_prefix}:subscriptions")
        assert killed == 1
        deadline = asyncio.get_running_loop().time() + WITHIN
        while subscriber._pubsub in (None, first):
            assert asyncio.get_running_loop().time() < deadline, "no new epoch after the kill"
            await asyncio.sleep(0.01)
        # The new epoch answers: a channel added now is confirmed by Redis.
        while not await (await subscriber.subscribe("after")):
            assert asyncio.get_running_loop().time() < deadline, "the new epoch never confirmed"
            await asyncio.sleep(0.05)
    finally:
        await adapter.close()
    assert opened_outside_an_epoch == []
