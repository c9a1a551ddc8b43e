"""The LISTEN/NOTIFY delivery self-check against the real server (issue 36, deliver 7).

No false alarm when nothing listens (the check LISTENs for its own probe); a degraded state
that reaches the adapter's watchers once per change, the client's observers as
``notify_degraded`` / ``notify_recovered`` events, ``client.check_notify_delivery()`` and
``await_chain``, which polls with its short backoff while delivery is degraded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import psycopg
import pytest

from jobchain import ChainCancelledError, Client, JobTypes
from jobchain.contracts.observe import Event
from jobchain.errors import AdapterClosedError
from jobchain.memory.state import MemoryStateAdapter
from jobchain_postgres import NotifyOptions, PostgresNotifyAdapter

from .conftest import conninfo


async def wait_until(predicate: Callable[[], bool]) -> None:
    """Re-check ``predicate`` every 20 ms (it changes on the adapter's own tasks); fail after 10 s."""
    async with asyncio.timeout(10):
        while not predicate():  # noqa: ASYNC110 -- set by the adapter's reader and probe tasks
            await asyncio.sleep(0.02)


def self_check_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "self-check failed" in r.getMessage()]


@pytest.fixture
async def healthy(postgres_url: str, channel_prefix: str) -> AsyncIterator[PostgresNotifyAdapter]:
    """A notify adapter on its own channels whose probe has ample time to come back."""
    adapter = await PostgresNotifyAdapter.open(
        postgres_url, NotifyOptions(channel_prefix=channel_prefix, probe_timeout=10, reconnect_initial=2)
    )
    yield adapter
    await adapter.close()


@pytest.fixture
async def undelivered(postgres_url: str, channel_prefix: str) -> AsyncIterator[PostgresNotifyAdapter]:
    """An adapter that LISTENs on another database than it publishes to: like a
    transaction-pooling proxy, nothing it publishes ever reaches its listeners."""
    adapter = PostgresNotifyAdapter(
        conninfo(postgres_url),
        NotifyOptions(channel_prefix=channel_prefix, probe_timeout=0.3),
        listen_conninfo=conninfo(postgres_url.rsplit("/", 1)[0] + "/postgres"),
    )
    yield adapter
    await adapter.close()


async def test_a_check_without_any_listener_raises_no_false_alarm(
    healthy: PostgresNotifyAdapter, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="jobchain_postgres.notify"):
        assert await healthy.check_delivery() is True
    assert healthy.degraded is False
    assert self_check_warnings(caplog) == []
    # The check listened for its own probe only: no LISTEN connection stays open after it.
    assert healthy.listening is False


async def test_a_check_while_the_last_listener_leaves_raises_no_false_alarm(
    healthy: PostgresNotifyAdapter,
) -> None:
    unsubscribe = await healthy.listen_job_scheduled(["t"], lambda _name: None)
    check = asyncio.create_task(healthy.check_delivery())
    await unsubscribe()
    assert await check is True
    assert healthy.degraded is False
    assert healthy.listening is False


async def test_a_check_without_a_listener_still_finds_undelivered_notifications(
    undelivered: PostgresNotifyAdapter, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="jobchain_postgres.notify"):
        assert await undelivered.check_delivery() is False
    assert undelivered.degraded is True
    assert undelivered.degraded_reason == "no probe within 0.3 s"
    assert len(self_check_warnings(caplog)) == 1
    assert undelivered.listening is False


async def test_watchers_hear_each_change_once_and_stop_after_unwatching(
    undelivered: PostgresNotifyAdapter,
) -> None:
    changes: list[tuple[bool, str | None]] = []
    unwatch = undelivered.watch_delivery(lambda degraded, reason: changes.append((degraded, reason)))
    await undelivered.listen_job_scheduled(["t"], lambda _name: None)  # its probe runs by itself
    await wait_until(lambda: undelivered.degraded)
    assert await undelivered.check_delivery() is False  # still degraded: no second change
    assert changes == [(True, "no probe within 0.3 s")]
    unwatch()
    unwatch()  # safe twice
    assert await undelivered.check_delivery() is False
    assert changes == [(True, "no probe within 0.3 s")]


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)


async def test_a_dropped_listen_connection_is_degraded_until_its_reconnect_probe_returns(
    healthy: PostgresNotifyAdapter, postgres_url: str
) -> None:
    recorder = Recorder()
    async with Client(MemoryStateAdapter(), healthy, JobTypes(), observers=[recorder]) as client:
        await healthy.listen_job_scheduled(["t"], lambda _name: None)
        assert await healthy.check_delivery() is True
        pid = healthy.listen_backend_pid
        assert pid is not None
        # The reconnect waits for this gate, not for a backoff a slow machine could outlast.
        gate = asyncio.Event()
        paused = asyncio.Event()

        async def held(_seconds: float) -> None:
            paused.set()
            await gate.wait()

        healthy._listen.pause = held
        with psycopg.connect(conninfo(postgres_url), autocommit=True) as connection:
            connection.execute("SELECT pg_terminate_backend(%s)", [pid])
        await wait_until(paused.is_set)
        assert healthy.listen_backend_pid is None
        delivery = await client.check_notify_delivery()
        assert (delivery.checked, delivery.degraded) == (True, True)
        assert delivery.reason == "the LISTEN connection is down (reconnecting)"
        # The reconnect's own probe comes back and clears the state.
        gate.set()
        await wait_until(lambda: not healthy.degraded)
        assert (await client.check_notify_delivery()).degraded is False
    names = [(e.name, e.attributes.get("reason")) for e in recorder.events if e.name.startswith("notify_")]
    assert names == [
        ("notify_degraded", "the LISTEN connection is down (reconnecting)"),
        ("notify_recovered", None),
    ]
    assert recorder.events[0].attributes["notify.adapter"] == "PostgresNotifyAdapter"


@dataclass
class Item:
    n: int


types = JobTypes()
item = types.define("item", input=Item, output=int, entry=True)


async def test_await_chain_polls_with_its_short_backoff_while_delivery_is_degraded(
    undelivered: PostgresNotifyAdapter,
) -> None:
    assert await undelivered.check_delivery() is False
    async with Client(MemoryStateAdapter(), undelivered, types) as client:
        async with client.transaction() as tx:
            chain_id = (await client.start_chain(tx, item, Item(1))).id
        requested: list[float] = []

        async def waits(woken: asyncio.Event, seconds: float) -> bool:
            requested.append(seconds)
            if len(requested) == 5:
                async with client.transaction() as tx:
                    await client.cancel_chain(tx, chain_id)
            return woken.is_set()

        client._wait_for_wake = waits  # the client's wait between polls (a seam for tests)
        with pytest.raises(ChainCancelledError):
            await client.await_chain(chain_id, timeout=60)
    assert requested == [0.05, 0.1, 0.2, 0.4, 0.8]


async def test_await_chain_is_woken_when_its_own_subscription_finds_delivery_lost(
    postgres_url: str, channel_prefix: str
) -> None:
    # The web process behind a transaction-pooling proxy: await_chain's subscription opens the
    # LISTEN connection, whose probe never comes back. The wait that trusted notifications
    # ends when the probe times out (3 s here), and the wait polls from then on.
    adapter = PostgresNotifyAdapter(
        conninfo(postgres_url),
        NotifyOptions(channel_prefix=channel_prefix, probe_timeout=3),
        listen_conninfo=conninfo(postgres_url.rsplit("/", 1)[0] + "/postgres"),
    )
    async with Client(MemoryStateAdapter(), adapter, types) as client:
        async with client.transaction() as tx:
            chain_id = (await client.start_chain(tx, item, Item(1))).id
        requested: list[float] = []

        async def waits(woken: asyncio.Event, seconds: float) -> bool:
            requested.append(seconds)
            if len(requested) == 1:
                async with asyncio.timeout(30):  # a guard only: the failed probe sets it
                    await woken.wait()
            elif len(requested) == 4:
                async with client.transaction() as tx:
                    await client.cancel_chain(tx, chain_id)
            return woken.is_set()

        client._wait_for_wake = waits
        with pytest.raises(ChainCancelledError):
            await client.await_chain(chain_id, timeout=60)
        assert adapter.degraded is True
    assert requested == [15.0, 0.05, 0.1, 0.2]


async def test_closing_the_adapter_during_a_check_gives_no_verdict(
    postgres_url: str, channel_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = PostgresNotifyAdapter(
        conninfo(postgres_url),
        NotifyOptions(channel_prefix=channel_prefix, probe_timeout=30),
        listen_conninfo=conninfo(postgres_url.rsplit("/", 1)[0] + "/postgres"),
    )
    with caplog.at_level(logging.WARNING, logger="jobchain_postgres.notify"):
        check = asyncio.create_task(adapter.check_delivery())
        await wait_until(lambda: adapter.listening)  # the check opened its LISTEN connection
        await adapter.close()
        with pytest.raises(AdapterClosedError):
            await check
    assert adapter.degraded is False
    assert self_check_warnings(caplog) == []
