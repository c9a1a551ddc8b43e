"""Notify channels: job scheduled, chain completed, job ownership lost; listener lifecycle.

Delivery is awaited with a bounded wait. Non-delivery is never proven by sleeping: the
case first publishes the unwanted message, then a wanted one on the same channel, and
only once the wanted one has arrived does it assert that the unwanted one did not.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from jobchain.contracts import Listener, NotifyAdapter, Unsubscribe
from jobchain.errors import AdapterClosedError
from jobchain.transactions import TransactionHooks

DELIVERY_TIMEOUT = 5.0
"""Seconds a published notification may take to reach a live listener."""


class Inbox:
    """A listener that records what it receives and lets a case await it (bounded)."""

    def __init__(self) -> None:
        self.received: list[str] = []
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._changed = asyncio.Event()

    def __call__(self, name: str) -> None:
        # Adapters may call listeners from a driver thread; hop onto the case's loop.
        if threading.get_ident() == self._thread:
            self._record(name)
        else:
            self._loop.call_soon_threadsafe(self._record, name)

    def _record(self, name: str) -> None:
        self.received.append(name)
        self._changed.set()

    async def wait_for(self, name: str, count: int = 1, within: float | None = None) -> None:
        """Wait until ``name`` arrived ``count`` times; fail the case after ``within`` seconds
        (default :data:`DELIVERY_TIMEOUT`)."""
        within = DELIVERY_TIMEOUT if within is None else within
        if not await self.arrives(name, count, within):
            pytest.fail(
                f"{name!r} was not delivered {count} time(s) within {within} s; received {self.received!r}"
            )

    async def arrives(self, name: str, count: int, within: float) -> bool:
        """True once ``name`` arrived ``count`` times, False if it has not within ``within`` seconds."""

        async def arrived() -> None:
            while self.received.count(name) < count:
                self._changed.clear()
                await self._changed.wait()

        try:
            await asyncio.wait_for(arrived(), within)
        except TimeoutError:
            return False
        return True


@dataclass(frozen=True)
class Channel:
    """One notify channel seen through a uniform listen/publish pair."""

    label: str
    listen: Callable[[NotifyAdapter, str, Listener], Awaitable[Unsubscribe]]
    publish: Callable[[NotifyAdapter, str], Awaitable[None]]
    key_prefix: str

    def key(self) -> str:
        """A fresh key (type name, chain id or job id) unique to this case."""
        if self.key_prefix:
            return f"{self.key_prefix}{uuid.uuid4().hex[:12]}"
        return str(uuid.uuid4())


JOB_SCHEDULED = Channel(
    "job scheduled",
    lambda adapter, key, listener: adapter.listen_job_scheduled([key], listener),
    lambda adapter, key: adapter.publish_job_scheduled(key),
    "type-",
)
CHAIN_COMPLETED = Channel(
    "chain completed",
    lambda adapter, key, listener: adapter.listen_chain_completed(key, listener),
    lambda adapter, key: adapter.publish_chain_completed(key),
    "",
)
OWNERSHIP_LOST = Channel(
    "job ownership lost",
    lambda adapter, key, listener: adapter.listen_job_ownership_lost(key, listener),
    lambda adapter, key: adapter.publish_job_ownership_lost(key),
    "",
)
CHANNELS = (JOB_SCHEDULED, CHAIN_COMPLETED, OWNERSHIP_LOST)


async def settle(adapter: NotifyAdapter, channel: Channel, key: str) -> None:
    """Publish ``key`` to a fresh control listener and wait for it: earlier messages on the
    channel have then been dispatched, so their absence elsewhere is meaningful."""
    control = Inbox()
    unsubscribe = await channel.listen(adapter, key, control)
    try:
        await channel.publish(adapter, key)
        await control.wait_for(key)
    finally:
        await unsubscribe()


async def receives_a_matching_notification(adapter: NotifyAdapter, channel: Channel) -> None:
    key, inbox = channel.key(), Inbox()
    await channel.listen(adapter, key, inbox)
    await channel.publish(adapter, key)
    await inbox.wait_for(key)
    assert inbox.received == [key]


async def ignores_another_key(adapter: NotifyAdapter, channel: Channel) -> None:
    key, other, inbox = channel.key(), channel.key(), Inbox()
    await channel.listen(adapter, key, inbox)
    await channel.publish(adapter, other)
    await channel.publish(adapter, key)
    await inbox.wait_for(key)
    await settle(adapter, channel, key)
    assert other not in inbox.received


async def reaches_two_listeners_of_one_key(adapter: NotifyAdapter, channel: Channel) -> None:
    key, first, second = channel.key(), Inbox(), Inbox()
    await channel.listen(adapter, key, first)
    await channel.listen(adapter, key, second)
    await channel.publish(adapter, key)
    await first.wait_for(key)
    await second.wait_for(key)


async def stops_after_unsubscribe(adapter: NotifyAdapter, channel: Channel) -> None:
    key, inbox = channel.key(), Inbox()
    unsubscribe = await channel.listen(adapter, key, inbox)
    await unsubscribe()
    await settle(adapter, channel, key)
    assert inbox.received == []


class JobScheduledChannelTests:
    """publish_job_scheduled / listen_job_scheduled: wake-ups filtered by type name."""

    async def test_listener_receives_a_matching_type_name(self, notify_adapter: NotifyAdapter) -> None:
        await receives_a_matching_notification(notify_adapter, JOB_SCHEDULED)

    async def test_listener_does_not_receive_other_type_names(self, notify_adapter: NotifyAdapter) -> None:
        await ignores_another_key(notify_adapter, JOB_SCHEDULED)

    async def test_two_listeners_of_one_type_name_both_receive(self, notify_adapter: NotifyAdapter) -> None:
        await reaches_two_listeners_of_one_key(notify_adapter, JOB_SCHEDULED)

    async def test_unsubscribe_stops_job_scheduled_notifications(self, notify_adapter: NotifyAdapter) -> None:
        await stops_after_unsubscribe(notify_adapter, JOB_SCHEDULED)

    async def test_every_notification_reaches_the_listener(self, notify_adapter: NotifyAdapter) -> None:
        key, inbox = JOB_SCHEDULED.key(), Inbox()
        await notify_adapter.listen_job_scheduled([key], inbox)
        for _ in range(3):
            await notify_adapter.publish_job_scheduled(key)
        await inbox.wait_for(key, count=3)

    async def test_multi_type_listener_receives_each_listed_type(self, notify_adapter: NotifyAdapter) -> None:
        a, b, unlisted, inbox = JOB_SCHEDULED.key(), JOB_SCHEDULED.key(), JOB_SCHEDULED.key(), Inbox()
        await notify_adapter.listen_job_scheduled([a, b], inbox)
        await notify_adapter.publish_job_scheduled(unlisted)
        await notify_adapter.publish_job_scheduled(a)
        await notify_adapter.publish_job_scheduled(b)
        await inbox.wait_for(a)
        await inbox.wait_for(b)
        await settle(notify_adapter, JOB_SCHEDULED, a)
        assert unlisted not in inbox.received

    async def test_publish_without_listeners_does_not_fail(self, notify_adapter: NotifyAdapter) -> None:
        await notify_adapter.publish_job_scheduled(JOB_SCHEDULED.key())
        await settle(notify_adapter, JOB_SCHEDULED, JOB_SCHEDULED.key())


class ChainCompletedChannelTests:
    """publish_chain_completed / listen_chain_completed: signals for one chain id."""

    async def test_listener_receives_completion_of_its_chain(self, notify_adapter: NotifyAdapter) -> None:
        await receives_a_matching_notification(notify_adapter, CHAIN_COMPLETED)

    async def test_listener_does_not_receive_completion_of_another_chain(
        self, notify_adapter: NotifyAdapter
    ) -> None:
        await ignores_another_key(notify_adapter, CHAIN_COMPLETED)

    async def test_two_listeners_of_one_chain_both_receive(self, notify_adapter: NotifyAdapter) -> None:
        await reaches_two_listeners_of_one_key(notify_adapter, CHAIN_COMPLETED)

    async def test_unsubscribe_stops_chain_completed_notifications(
        self, notify_adapter: NotifyAdapter
    ) -> None:
        await stops_after_unsubscribe(notify_adapter, CHAIN_COMPLETED)

    async def test_a_commit_completing_many_chains_reaches_each_chains_listener(
        self, notify_adapter: NotifyAdapter
    ) -> None:
        # What a worker's group commit flushes: in one call where the adapter publishes in bulk
        # (PublishesChainsInBulk), else one publish per chain.
        keys = [CHAIN_COMPLETED.key() for _ in range(5)]
        inboxes = [Inbox() for _ in keys]
        for key, inbox in zip(keys, inboxes, strict=True):
            await CHAIN_COMPLETED.listen(notify_adapter, key, inbox)
        hooks = TransactionHooks(record_events=False)
        for key in keys:
            hooks.chain_completed(key)
        await hooks.flush(notify_adapter)
        for key, inbox in zip(keys, inboxes, strict=True):
            await inbox.wait_for(key)
            assert inbox.received == [key]


class OwnershipLostChannelTests:
    """publish_job_ownership_lost / listen_job_ownership_lost: signals for one job id."""

    async def test_listener_receives_ownership_loss_of_its_job(self, notify_adapter: NotifyAdapter) -> None:
        await receives_a_matching_notification(notify_adapter, OWNERSHIP_LOST)

    async def test_listener_does_not_receive_ownership_loss_of_another_job(
        self, notify_adapter: NotifyAdapter
    ) -> None:
        await ignores_another_key(notify_adapter, OWNERSHIP_LOST)

    async def test_two_listeners_of_one_job_both_receive(self, notify_adapter: NotifyAdapter) -> None:
        await reaches_two_listeners_of_one_key(notify_adapter, OWNERSHIP_LOST)

    async def test_unsubscribe_stops_ownership_lost_notifications(
        self, notify_adapter: NotifyAdapter
    ) -> None:
        await stops_after_unsubscribe(notify_adapter, OWNERSHIP_LOST)


class ListenerLifecycleTests:
    """Subscriptions: unsubscribe handles, resubscription, dispatch timing, fault isolation."""

    @pytest.mark.parametrize("channel", CHANNELS, ids=lambda c: c.label.replace(" ", "_"))
    async def test_listen_returns_an_async_unsubscribe_that_is_safe_to_call_twice(
        self, notify_adapter: NotifyAdapter, channel: Channel
    ) -> None:
        unsubscribe = await channel.listen(notify_adapter, channel.key(), Inbox())
        pending = unsubscribe()
        assert inspect.isawaitable(pending)
        await pending
        await unsubscribe()

    async def test_listener_can_resubscribe_after_unsubscribe(self, notify_adapter: NotifyAdapter) -> None:
        key, inbox = JOB_SCHEDULED.key(), Inbox()
        unsubscribe = await notify_adapter.listen_job_scheduled([key], inbox)
        await unsubscribe()
        await notify_adapter.listen_job_scheduled([key], inbox)
        await notify_adapter.publish_job_scheduled(key)
        await inbox.wait_for(key)
        await settle(notify_adapter, JOB_SCHEDULED, key)
        assert inbox.received == [key, key], "each publish must reach a resubscribed listener exactly once"

    async def test_unsubscribing_one_of_two_listeners_keeps_the_other(
        self, notify_adapter: NotifyAdapter
    ) -> None:
        key, gone, kept = JOB_SCHEDULED.key(), Inbox(), Inbox()
        unsubscribe = await notify_adapter.listen_job_scheduled([key], gone)
        await notify_adapter.listen_job_scheduled([key], kept)
        await unsubscribe()
        await notify_adapter.publish_job_scheduled(key)
        await kept.wait_for(key)
        await settle(notify_adapter, JOB_SCHEDULED, key)
        assert gone.received == []

    async def test_each_publish_is_delivered_without_waiting_for_later_ones(
        self, notify_adapter: NotifyAdapter
    ) -> None:
        key, inbox = JOB_SCHEDULED.key(), Inbox()
        await notify_adapter.listen_job_scheduled([key], inbox)
        for count in range(1, 4):
            await notify_adapter.publish_job_scheduled(key)
            # The next publish only happens once this one arrived: a batching adapter times out.
            await inbox.wait_for(key, count=count)

    async def test_throwing_listener_does_not_break_its_peer_or_the_publisher(
        self, notify_adapter: NotifyAdapter
    ) -> None:
        key, peer = JOB_SCHEDULED.key(), Inbox()

        def explode(name: str) -> None:
            raise RuntimeError(f"listener failure on {name} (expected by the case)")

        await notify_adapter.listen_job_scheduled([key], explode)
        await notify_adapter.listen_job_scheduled([key], peer)
        await notify_adapter.publish_job_scheduled(key)
        await peer.wait_for(key)
        await notify_adapter.publish_job_scheduled(key)
        await peer.wait_for(key, count=2)

    async def test_normal_cycle_leaves_no_unhandled_errors(self, notify_adapter: NotifyAdapter) -> None:
        loop = asyncio.get_running_loop()
        unhandled: list[dict[str, Any]] = []
        previous = loop.get_exception_handler()
        loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
        try:
            for channel in CHANNELS:
                key, inbox = channel.key(), Inbox()
                unsubscribe = await channel.listen(notify_adapter, key, inbox)
                await channel.publish(notify_adapter, key)
                await inbox.wait_for(key)
                await unsubscribe()
            gc.collect()  # "exception was never retrieved" is reported when a task is collected
            await asyncio.sleep(0)
        finally:
            loop.set_exception_handler(previous)
        assert unhandled == []


class NotifyLifecycleTests:
    """close(): idempotent, later calls raise AdapterClosedError, unsubscribes stay safe."""

    async def test_close_is_idempotent(self, notify_adapter: NotifyAdapter) -> None:
        await notify_adapter.close()
        await notify_adapter.close()

    @pytest.mark.parametrize(
        "call",
        [
            lambda a: a.publish_job_scheduled("t"),
            lambda a: a.listen_job_scheduled(["t"], Inbox()),
            lambda a: a.publish_chain_completed(str(uuid.uuid4())),
            lambda a: a.listen_chain_completed(str(uuid.uuid4()), Inbox()),
            lambda a: a.publish_job_ownership_lost(str(uuid.uuid4())),
            lambda a: a.listen_job_ownership_lost(str(uuid.uuid4()), Inbox()),
            lambda a: a.provide_wake_hint("t", 1),
            lambda a: a.consume_wake_hint("t"),
        ],
        ids=[
            "publish_job_scheduled",
            "listen_job_scheduled",
            "publish_chain_completed",
            "listen_chain_completed",
            "publish_job_ownership_lost",
            "listen_job_ownership_lost",
            "provide_wake_hint",
            "consume_wake_hint",
        ],
    )
    async def test_calls_after_close_raise_adapter_closed(
        self, notify_adapter: NotifyAdapter, call: Callable[[NotifyAdapter], Awaitable[Any]]
    ) -> None:
        await notify_adapter.close()
        with pytest.raises(AdapterClosedError):
            await call(notify_adapter)

    async def test_unsubscribes_returned_before_close_stay_safe(self, notify_adapter: NotifyAdapter) -> None:
        unsubscribes = [await channel.listen(notify_adapter, channel.key(), Inbox()) for channel in CHANNELS]
        await notify_adapter.close()
        for unsubscribe in unsubscribes:
            await unsubscribe()
            await unsubscribe()
