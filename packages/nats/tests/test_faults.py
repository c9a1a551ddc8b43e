"""Broker failures, with a private nats-server per test that is killed (SIGKILL) and restarted.

Never the shared service. The private server keeps its JetStream file store across restarts,
as a real deployment does. Waits are bounded polls for an effect, never timing assertions.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from jobchain_nats import NatsNotifyAdapter, NatsNotifyOptions

FAST = NatsNotifyOptions(
    prefix="faults",
    kv_bucket="hints",
    kv_create=True,
    reconnect_wait=timedelta(milliseconds=50),
)


@pytest.fixture
async def adapter(private_nats: Any) -> AsyncIterator[NatsNotifyAdapter]:
    opened = await NatsNotifyAdapter.connect(private_nats.url, options=FAST)
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
    """Publish until the listener sees ``expected``: publishes made before the reconnect are
    dropped, which is the contract."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while expected not in received:
        if loop.time() > deadline:
            pytest.fail(f"{expected!r} not delivered within {within} s after the restart; got {received}")
        await publish()
        await asyncio.sleep(0.05)


async def until_connected(adapter: NatsNotifyAdapter, within: float = 15.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not adapter._nc.is_connected:
        if loop.time() > deadline:
            pytest.fail(f"not reconnected within {within} s")
        await asyncio.sleep(0.02)


def outage_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "jobchain_nats" and r.levelno == logging.WARNING]


async def test_publishing_while_nats_is_down_does_not_raise_and_logs_once(
    adapter: NatsNotifyAdapter, private_nats: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobchain_nats")
    await adapter.publish_job_scheduled("t")
    private_nats.kill()
    for i in range(50):
        await adapter.publish_job_scheduled("t")
        await adapter.publish_chain_completed(f"chain-{i}")
        await adapter.publish_job_ownership_lost(f"job-{i}")
        await adapter.provide_wake_hint("t", 1)
        await asyncio.sleep(0.005)  # let nats-py notice the outage and try to reconnect meanwhile
    warnings = outage_warnings(caplog)
    assert len(warnings) == 1
    assert "unreachable" in warnings[0].getMessage()


async def test_consume_wake_hint_fails_open_while_nats_is_down(
    adapter: NatsNotifyAdapter, private_nats: Any
) -> None:
    await adapter.provide_wake_hint("t", 1)
    assert await adapter.consume_wake_hint("t") is True
    assert await adapter.consume_wake_hint("t") is False, "budget exhausted while NATS is up"
    private_nats.kill()
    assert await adapter.consume_wake_hint("t") is True
    assert await adapter.consume_wake_hint("t") is True


async def test_wake_hints_are_tracked_again_after_a_restart(
    adapter: NatsNotifyAdapter, private_nats: Any
) -> None:
    private_nats.restart()
    await until_connected(adapter)
    # JetStream may still be recovering its streams: hints fail open (True) until it answers.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while True:
        await adapter.provide_wake_hint("t", 1)
        assert await adapter.consume_wake_hint("t") is True
        if await adapter.consume_wake_hint("t") is False:
            break
        if loop.time() > deadline:
            pytest.fail("wake hints not tracked again within 30 s of the restart")


async def test_listeners_receive_notifications_again_after_a_restart(
    adapter: NatsNotifyAdapter, private_nats: Any, caplog: pytest.LogCaptureFixture, unhandled: Any
) -> None:
    caplog.set_level(logging.INFO, logger="jobchain_nats")
    scheduled: list[str] = []
    lost: list[str] = []
    await adapter.listen_job_scheduled(["t"], scheduled.append)
    await adapter.listen_job_ownership_lost("j", lost.append)
    await until_delivered(lambda: adapter.publish_job_scheduled("t"), scheduled, "t")

    private_nats.kill()
    await adapter.publish_job_scheduled("t")  # dropped, not raised
    private_nats.start()

    scheduled.clear()
    await until_delivered(lambda: adapter.publish_job_scheduled("t"), scheduled, "t")
    await until_delivered(lambda: adapter.publish_job_ownership_lost("j"), lost, "j")
    assert len(outage_warnings(caplog)) == 1
    assert any("reachable again" in r.getMessage() for r in caplog.records)
    assert unhandled == []


async def test_listen_while_nats_is_down_subscribes_once_it_is_back(
    adapter: NatsNotifyAdapter, private_nats: Any
) -> None:
    private_nats.kill()
    received: list[str] = []
    unsubscribe = await adapter.listen_chain_completed("c", received.append)
    private_nats.start()
    await until_delivered(lambda: adapter.publish_chain_completed("c"), received, "c")
    await unsubscribe()


async def test_several_outages_in_a_row_recover_each_time(
    adapter: NatsNotifyAdapter, private_nats: Any, unhandled: Any
) -> None:
    received: list[str] = []
    await adapter.listen_job_scheduled(["t"], received.append)
    for _ in range(3):
        private_nats.restart()
        received.clear()
        await until_delivered(lambda: adapter.publish_job_scheduled("t"), received, "t")
    assert unhandled == []


async def test_unsubscribe_and_close_while_nats_is_down_are_clean(
    private_nats: Any, unhandled: Any, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = await NatsNotifyAdapter.connect(private_nats.url, options=FAST)
    unsubscribe = await adapter.listen_job_scheduled(["t"], lambda _: None)
    private_nats.kill()
    await unsubscribe()
    await adapter.listen_chain_completed("c", lambda _: None)
    await adapter.close()
    gc.collect()  # "exception was never retrieved" is reported when a task is collected
    await asyncio.sleep(0)
    assert unhandled == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_connect_retries_until_nats_starts(private_nats: Any) -> None:
    private_nats.kill()
    options = NatsNotifyOptions(
        prefix="faults", connect_attempts=60, connect_retry_delay=timedelta(milliseconds=20)
    )
    connecting = asyncio.create_task(NatsNotifyAdapter.connect(private_nats.url, options=options))
    await asyncio.sleep(0.05)  # let the first attempts fail (not an assertion on timing)
    private_nats.start()
    adapter = await asyncio.wait_for(connecting, 30)
    try:
        received: list[str] = []
        await adapter.listen_job_scheduled(["t"], received.append)
        await until_delivered(lambda: adapter.publish_job_scheduled("t"), received, "t")
    finally:
        await adapter.close()


async def test_a_server_stalled_past_the_listen_timeout_does_not_leave_the_connection_deaf(
    private_nats: Any, unhandled: Any
) -> None:
    adapter = await NatsNotifyAdapter.connect(
        private_nats.url, options=NatsNotifyOptions(prefix="faults", request_timeout=timedelta(seconds=1))
    )
    try:
        received: list[str] = []
        private_nats.pause()
        try:
            # Returns after request_timeout without the server's PONG; the PONG comes later.
            await adapter.listen_job_scheduled(["t"], received.append)
        finally:
            private_nats.resume()
        await until_delivered(lambda: adapter.publish_job_scheduled("t"), received, "t")
    finally:
        await adapter.close()
    assert unhandled == []


async def test_closing_while_reconnecting_leaves_no_reconnect_task_running(private_nats: Any) -> None:
    """nats-py's close() cancels its reconnect task once; on Python 3.11 a connect attempt
    failing in the same loop iteration swallows that cancel and the task reconnects forever
    (it then also hangs the loop's shutdown). Many closes spread over the reconnect attempts
    hit that window; without the adapter's remedy a few of 100 tasks stayed alive."""
    options = NatsNotifyOptions(prefix="faults", reconnect_wait=timedelta(milliseconds=20))
    adapters = [await NatsNotifyAdapter.connect(private_nats.url, options=options) for _ in range(100)]
    private_nats.kill()
    spread = random.Random(14)

    async def close(adapter: NatsNotifyAdapter) -> None:
        await asyncio.sleep(spread.random() * 0.3)  # spreads the closes over many attempts
        await adapter.close()

    try:
        await asyncio.gather(*(close(adapter) for adapter in adapters))
        running = [a for a in adapters if a._nc._reconnection_task and not a._nc._reconnection_task.done()]
        assert running == []
    finally:
        for adapter in adapters:
            task = adapter._nc._reconnection_task
            while task is not None and not task.done():  # leave the loop's shutdown free to end
                task.cancel()
                await asyncio.wait({task}, timeout=1.0)
