"""Broker failures, with a private redis-server per test that is killed (SIGKILL) and restarted.

Never the shared service. Waits are bounded polls for an effect ("delivered", "connected"),
never sleeps that assert timing.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from jobchain_redis import RedisNotifyAdapter, RedisNotifyOptions

FAST = RedisNotifyOptions(
    prefix="faults",
    retry_interval=timedelta(milliseconds=50),
    connect_timeout=timedelta(seconds=2),
    subscribe_timeout=timedelta(seconds=2),
)


@pytest.fixture
async def adapter(private_redis: Any) -> AsyncIterator[RedisNotifyAdapter]:
    opened = await RedisNotifyAdapter.connect(private_redis.url, options=FAST)
    yield opened
    await opened.close()


@pytest.fixture
async def unhandled() -> AsyncIterator[list[dict[str, Any]]]:
    """Exceptions reported to the loop's handler (e.g. a task's exception never retrieved)."""
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    yield seen
    loop.set_exception_handler(previous)


async def until_delivered(
    publish: Callable[[], Awaitable[None]], received: list[str], expected: str, within: float = 15.0
) -> None:
    """Publish until the listener sees ``expected``: after a restart the first publishes may be
    dropped (the adapter is still in its retry window or resubscribing), which is the contract."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while expected not in received:
        if loop.time() > deadline:
            pytest.fail(f"{expected!r} not delivered within {within} s after the restart; got {received}")
        await publish()
        await asyncio.sleep(0.05)


def outage_warnings(caplog: pytest.LogCaptureFixture, path: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "jobchain_redis" and r.levelno == logging.WARNING and f"({path})" in r.getMessage()
    ]


async def test_publishing_while_redis_is_down_does_not_raise_and_logs_once(
    adapter: RedisNotifyAdapter, private_redis: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobchain_redis")
    await adapter.publish_job_scheduled("t")
    private_redis.kill()
    for i in range(50):
        await adapter.publish_job_scheduled("t")
        await adapter.publish_chain_completed(f"chain-{i}")
        await adapter.publish_job_ownership_lost(f"job-{i}")
        await adapter.provide_wake_hint("t", 1)
        await asyncio.sleep(0.005)  # let the retry window pass now and then, so Redis is retried
    assert len(outage_warnings(caplog, "commands")) == 1
    assert "unreachable" in outage_warnings(caplog, "commands")[0].getMessage()


async def test_consume_wake_hint_fails_open_while_redis_is_down(
    adapter: RedisNotifyAdapter, private_redis: Any
) -> None:
    await adapter.provide_wake_hint("t", 1)
    assert await adapter.consume_wake_hint("t") is True
    assert await adapter.consume_wake_hint("t") is False, "budget exhausted while Redis is up"
    private_redis.kill()
    assert await adapter.consume_wake_hint("t") is True
    assert await adapter.consume_wake_hint("t") is True


async def test_listeners_receive_notifications_again_after_a_restart(
    adapter: RedisNotifyAdapter, private_redis: Any, caplog: pytest.LogCaptureFixture, unhandled: Any
) -> None:
    caplog.set_level(logging.INFO, logger="jobchain_redis")
    scheduled: list[str] = []
    completed: list[str] = []
    await adapter.listen_job_scheduled(["t"], scheduled.append)
    await adapter.listen_chain_completed("c", completed.append)
    await until_delivered(lambda: adapter.publish_job_scheduled("t"), scheduled, "t")

    private_redis.kill()
    await adapter.publish_job_scheduled("t")  # dropped, not raised
    private_redis.start()

    scheduled.clear()
    await until_delivered(lambda: adapter.publish_job_scheduled("t"), scheduled, "t")
    await until_delivered(lambda: adapter.publish_chain_completed("c"), completed, "c")
    assert len(outage_warnings(caplog, "subscriptions")) == 1
    assert any("reachable again" in r.getMessage() for r in caplog.records)
    assert unhandled == []


async def test_listen_while_redis_is_down_subscribes_once_it_is_back(
    adapter: RedisNotifyAdapter, private_redis: Any
) -> None:
    await adapter.listen_job_ownership_lost("warm-up", lambda _: None)  # subscription connection up
    private_redis.kill()
    received: list[str] = []
    # Returns without waiting for a confirmation Redis cannot give; the wish is kept.
    unsubscribe = await adapter.listen_job_scheduled(["t"], received.append)
    private_redis.start()
    await until_delivered(lambda: adapter.publish_job_scheduled("t"), received, "t")
    await unsubscribe()


async def test_first_listen_while_redis_is_down_subscribes_once_it_is_back(
    adapter: RedisNotifyAdapter, private_redis: Any
) -> None:
    private_redis.kill()
    received: list[str] = []
    await adapter.listen_chain_completed("c", received.append)
    private_redis.start()
    await until_delivered(lambda: adapter.publish_chain_completed("c"), received, "c")


async def test_several_outages_in_a_row_recover_each_time(
    adapter: RedisNotifyAdapter, private_redis: Any, unhandled: Any
) -> None:
    received: list[str] = []
    await adapter.listen_job_scheduled(["t"], received.append)
    for _ in range(3):
        private_redis.restart()
        received.clear()
        await until_delivered(lambda: adapter.publish_job_scheduled("t"), received, "t")
        assert await adapter.consume_wake_hint("t") is True
    assert unhandled == []


async def test_unsubscribe_and_close_while_redis_is_down_are_clean(
    private_redis: Any, unhandled: Any
) -> None:
    adapter = await RedisNotifyAdapter.connect(private_redis.url, options=FAST)
    unsubscribe = await adapter.listen_job_scheduled(["t"], lambda _: None)
    private_redis.kill()
    await unsubscribe()
    await adapter.listen_chain_completed("c", lambda _: None)
    await adapter.close()
    gc.collect()  # "exception was never retrieved" is reported when a task is collected
    await asyncio.sleep(0)
    assert unhandled == []


async def test_connect_retries_until_redis_starts(private_redis: Any) -> None:
    private_redis.kill()
    # Enough attempts to outlast a slow server start on a busy machine (about 30 s): the case
    # ends as soon as the server answers, so only a failure would take that long.
    options = RedisNotifyOptions(
        prefix="faults", connect_attempts=1500, connect_retry_delay=timedelta(milliseconds=20)
    )
    connecting = asyncio.create_task(RedisNotifyAdapter.connect(private_redis.url, options=options))
    await asyncio.sleep(0.05)  # let the first attempts fail (not an assertion on timing)
    private_redis.start()
    adapter = await asyncio.wait_for(connecting, 30)
    try:
        assert await adapter.consume_wake_hint("t") is True
    finally:
        await adapter.close()


async def test_a_stalled_redis_delays_callers_briefly_and_recovers(
    private_redis: Any, unhandled: Any, caplog: pytest.LogCaptureFixture
) -> None:
    options = RedisNotifyOptions(
        prefix="faults",
        command_timeout=timedelta(milliseconds=300),
        subscribe_timeout=timedelta(milliseconds=300),
        retry_interval=timedelta(milliseconds=50),
    )
    adapter = await RedisNotifyAdapter.connect(private_redis.url, options=options)
    try:
        await adapter.listen_job_ownership_lost("warm-up", lambda _: None)
        received: list[str] = []
        private_redis.pause()
        try:
            # SUBSCRIBE is not confirmed within subscribe_timeout; the confirmation comes later.
            await adapter.listen_job_scheduled(["t"], received.append)
            await adapter.publish_job_scheduled("t")  # times out, counts as an outage, no raise
            assert await adapter.consume_wake_hint("t") is True
        finally:
            private_redis.resume()
        await until_delivered(lambda: adapter.publish_job_scheduled("t"), received, "t")
    finally:
        await adapter.close()
    assert unhandled == []
