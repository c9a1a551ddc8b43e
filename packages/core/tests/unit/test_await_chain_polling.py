"""How often ``await_chain`` re-reads a chain when no notification can wake it (issue 36).

Without a notify backend (or when listening failed, or the backend reports its delivery
degraded) the wait backs off from a short poll: 50 ms doubling to at most 1 s (or to
``poll_interval`` when that is shorter). With working notifications it re-checks every
``poll_interval`` seconds. The client's wait is injected: each case records the intervals
the loop asks for and ends the wait by cancelling the chain at a chosen poll, so nothing
depends on how fast the machine is.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

import pytest

from jobchain import ChainCancelledError, Client, JobTypes
from jobchain.contracts.notify import Listener, Unsubscribe
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter
from jobchain.polling import Backoff, wait_for_wake

BACKOFF = [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
"""The intervals of eight polls without notifications: 50 ms doubling, capped at 1 s."""


@dataclass
class Item:
    n: int


types = JobTypes()
item = types.define("item", input=Item, output=int, entry=True)


class Waits:
    """The injected wait of a client: records each interval asked for and returns at once
    (not woken); at the ``until``-th call it cancels the chain, which ends the wait."""

    def __init__(self, client: Client, until: int) -> None:
        self.client = client
        self.until = until
        self.chain_id = ""
        self.requested: list[float] = []

    async def __call__(self, woken: asyncio.Event, seconds: float) -> bool:
        self.requested.append(seconds)
        if len(self.requested) == self.until:
            async with self.client.transaction() as tx:
                await self.client.cancel_chain(tx, self.chain_id, reason="enough polls")
        return woken.is_set()


async def started(client: Client, waits: Waits) -> str:
    async with client.transaction() as tx:
        waits.chain_id = (await client.start_chain(tx, item, Item(1))).id
    client._wait_for_wake = waits  # the client's wait between polls (a seam for tests)
    return waits.chain_id


@pytest.fixture
async def no_notify() -> AsyncIterator[Client]:
    async with Client(MemoryStateAdapter(), None, types) as client:
        yield client


async def wait_cancelled(client: Client, chain_id: str, **kwargs: float) -> None:
    with pytest.raises(ChainCancelledError):
        await client.await_chain(chain_id, timeout=20, **kwargs)


async def test_without_notify_it_polls_from_50_ms_doubling_to_1_s(no_notify: Client) -> None:
    waits = Waits(no_notify, until=len(BACKOFF))
    chain_id = await started(no_notify, waits)
    await wait_cancelled(no_notify, chain_id)
    assert waits.requested == BACKOFF


async def test_without_notify_a_shorter_poll_interval_caps_the_backoff(no_notify: Client) -> None:
    waits = Waits(no_notify, until=5)
    chain_id = await started(no_notify, waits)
    await wait_cancelled(no_notify, chain_id, poll_interval=0.3)
    assert waits.requested == [0.05, 0.1, 0.2, 0.3, 0.3]


async def test_without_notify_a_poll_interval_under_50_ms_is_used_as_is(no_notify: Client) -> None:
    waits = Waits(no_notify, until=3)
    chain_id = await started(no_notify, waits)
    await wait_cancelled(no_notify, chain_id, poll_interval=0.01)
    assert waits.requested == [0.01, 0.01, 0.01]


async def test_with_working_notifications_it_rechecks_every_poll_interval() -> None:
    async with Client(MemoryStateAdapter(), MemoryNotifyAdapter(), types) as client:
        waits = Waits(client, until=3)
        chain_id = await started(client, waits)
        await wait_cancelled(client, chain_id)
        assert waits.requested == [15.0, 15.0, 15.0]


class CannotListen(MemoryNotifyAdapter):
    """The in-process adapter, except that listening for a chain's completion fails."""

    async def listen_chain_completed(self, chain_id: str, listener: Listener) -> Unsubscribe:
        raise ConnectionError("broker down")


async def test_when_listening_fails_it_polls_with_the_backoff() -> None:
    async with Client(MemoryStateAdapter(), CannotListen(), types) as client:
        waits = Waits(client, until=len(BACKOFF))
        chain_id = await started(client, waits)
        await wait_cancelled(client, chain_id)
        assert waits.requested == BACKOFF


class Degraded(MemoryNotifyAdapter):
    """The in-process adapter reporting a failed delivery self-check (ChecksDelivery)."""

    degraded = True
    degraded_reason: str | None = "no probe within 2 s"

    async def check_delivery(self) -> bool:
        return not self.degraded

    def watch_delivery(self, watcher: Callable[[bool, str | None], None]) -> Callable[[], None]:
        return lambda: None


async def test_a_degraded_notify_backend_polls_with_the_backoff_and_recovers_to_the_interval() -> None:
    notify = Degraded()
    async with Client(MemoryStateAdapter(), notify, types) as client:
        waits = Waits(client, until=6)
        chain_id = await started(client, waits)
        recorded = waits.__call__

        async def recovering(woken: asyncio.Event, seconds: float) -> bool:
            woke = await recorded(woken, seconds)
            if len(waits.requested) == 3:
                notify.degraded = False  # a self-check found delivery working again
            return woke

        client._wait_for_wake = recovering
        await wait_cancelled(client, chain_id)
        assert waits.requested == [0.05, 0.1, 0.2, 15.0, 15.0, 15.0]


class Degrading(Degraded):
    """Starts healthy; :meth:`degrade` is a self-check finding delivery lost (its watchers hear it)."""

    degraded = False
    degraded_reason = None

    def __init__(self) -> None:
        super().__init__()
        self.watchers: list[Callable[[bool, str | None], None]] = []

    def watch_delivery(self, watcher: Callable[[bool, str | None], None]) -> Callable[[], None]:
        self.watchers.append(watcher)
        return lambda: self.watchers.remove(watcher)

    def degrade(self) -> None:
        self.degraded, self.degraded_reason = True, "no probe within 2 s"
        for watcher in self.watchers:
            watcher(True, self.degraded_reason)


async def test_delivery_turning_degraded_wakes_a_wait_that_trusted_notifications() -> None:
    notify = Degrading()
    async with Client(MemoryStateAdapter(), notify, types) as client:
        waits = Waits(client, until=4)
        chain_id = await started(client, waits)
        recorded = waits.__call__

        woken_by_the_change: list[bool] = []

        async def degrading(woken: asyncio.Event, seconds: float) -> bool:
            if waits.requested:
                return await recorded(woken, seconds)
            waits.requested.append(seconds)
            notify.degrade()  # while the first wait trusts notifications: it must end now
            woken_by_the_change.append(woken.is_set())
            return woken.is_set()

        client._wait_for_wake = degrading
        await wait_cancelled(client, chain_id)
        assert woken_by_the_change == [True]
        assert waits.requested == [15.0, 0.05, 0.1, 0.2]
    assert notify.watchers == []  # the client stopped watching when it closed


async def test_the_wait_between_polls_ends_when_woken_or_when_its_time_is_up() -> None:
    woken = asyncio.Event()
    assert await wait_for_wake(woken, 0.001) is False
    woken.set()
    assert await wait_for_wake(woken, 3600) is True


def test_backoff_doubles_to_its_cap_and_starts_over_on_reset() -> None:
    backoff = Backoff(0.05, 1.0)
    assert [backoff.next() for _ in range(7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    backoff.reset()
    assert backoff.next() == 0.05
    assert [Backoff(0.05, 0.01).next() for _ in range(2)] == [0.01, 0.01]


# ---------------------------------------------------------------- the sync facade


class SyncWaits:
    """The sync facade's injected wait: records, returns at once, cancels at ``until``."""

    def __init__(self, until: int) -> None:
        self.until = until
        self.requested: list[float] = []
        self.cancel: Callable[[], None] = lambda: None

    def __call__(self, woken: threading.Event, seconds: float) -> bool:
        self.requested.append(seconds)
        if len(self.requested) == self.until:
            self.cancel()
        return woken.is_set()


@pytest.fixture
def sync_client() -> Iterator[object]:
    import jobchain.sync

    client = jobchain.sync.connect(f"memory://polling-{uuid.uuid4().hex}", notify="none", job_types=types)
    with client:
        yield client


def test_the_sync_facade_backs_off_from_10_ms_to_its_poll_interval(sync_client: object) -> None:
    from jobchain.sync import SyncClient

    assert isinstance(sync_client, SyncClient)
    with sync_client.transaction() as tx:
        chain_id = sync_client.start_chain(tx, item, Item(1)).id
    waits = SyncWaits(until=9)

    def cancel() -> None:
        with sync_client.transaction() as tx:
            sync_client.cancel_chain(tx, chain_id, reason="enough polls")

    waits.cancel = cancel
    sync_client._wait_for_wake = waits  # the facade's wait between polls (a seam for tests)
    with pytest.raises(ChainCancelledError):
        sync_client.await_chain(chain_id, timeout=20)
    assert waits.requested == [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0, 1.0]
