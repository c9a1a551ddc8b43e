"""Several adapters on one broker, and connections broken under a live adapter.

Two adapters (``notify_adapter`` and ``second_notify_adapter``: two connections to one broker
and prefix, as two processes have) show that a publish goes through the broker. An adapter
that hands publishes straight to its own listeners passes every single-adapter case and
fails these.

With the adopter's ``interrupt_connection`` hook (it breaks an adapter's connections from
the server side), the adapter must ride out the break by itself: publishing during it never
raises (the message may be lost), and once it has reconnected its listeners, old and new,
hear again. A case learns that the adapter reconnected by publishing until a delivery
arrives (bounded by :data:`RECONNECT_TIMEOUT`), never by sleeping a fixed time.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from jobchain.contracts import Capability, NotifyAdapter
from jobchain.errors import AdapterClosedError
from jobchain.transactions import TransactionHooks
from jobchain_conformance.capabilities import requires
from jobchain_conformance.suites._base import InterruptConnection, NotifyAdapterFactory
from jobchain_conformance.suites.notify_channels import (
    CHAIN_COMPLETED,
    CHANNELS,
    JOB_SCHEDULED,
    OWNERSHIP_LOST,
    Channel,
    Inbox,
)

RECONNECT_TIMEOUT = 60.0
"""Seconds an interrupted adapter may take to publish and hear again (a failure deadline)."""

POLL_INTERVAL = 0.25
"""Seconds a poll waits for its own publish to arrive before publishing again."""


def _type_name() -> str:
    return f"type-{uuid.uuid4().hex[:12]}"


def _hook(interrupt_connection: InterruptConnection | None) -> InterruptConnection:
    if interrupt_connection is None:
        pytest.skip("the adopter provides no interrupt_connection hook")
    return interrupt_connection


async def settle_across(listening: NotifyAdapter, publishing: NotifyAdapter, channel: Channel) -> None:
    """Publish a fresh key on ``publishing`` to a control listener on ``listening`` and wait for
    it: what ``publishing`` published earlier on the channel has then been dispatched."""
    key, control = channel.key(), Inbox()
    unsubscribe = await channel.listen(listening, key, control)
    try:
        await channel.publish(publishing, key)
        await control.wait_for(key)
    finally:
        await unsubscribe()


async def crosses_over(publishing: NotifyAdapter, listening: NotifyAdapter, channel: Channel) -> None:
    key, inbox = channel.key(), Inbox()
    await channel.listen(listening, key, inbox)
    await channel.publish(publishing, key)
    await inbox.wait_for(key)
    await settle_across(listening, publishing, channel)
    assert inbox.received == [key], "one publish must reach the other adapter's listener exactly once"


def reconnect_deadline() -> float:
    """The loop time by which an interrupted adapter must work again."""
    return asyncio.get_running_loop().time() + RECONNECT_TIMEOUT


async def until_delivered(
    publish: Callable[[], Awaitable[None]], inbox: Inbox, key: str, *, count: int, deadline: float
) -> None:
    """Publish until ``key`` has arrived ``count`` times: publishes made before the adapter
    reconnected may be lost, which the contract allows."""
    loop = asyncio.get_running_loop()
    while True:
        await publish()
        if await inbox.arrives(key, count, POLL_INTERVAL):
            return
        if loop.time() > deadline:
            pytest.fail(
                f"{key!r} was not delivered within {RECONNECT_TIMEOUT} s of the interruption "
                f"(publishing every {POLL_INTERVAL} s); received {inbox.received!r}"
            )


class SeveralInstancesTests:
    """Two adapters on one broker and prefix: every publish travels through the broker."""

    async def test_job_scheduled_published_on_one_adapter_reaches_a_listener_on_another(
        self, notify_adapter: NotifyAdapter, second_notify_adapter: NotifyAdapter
    ) -> None:
        await crosses_over(notify_adapter, second_notify_adapter, JOB_SCHEDULED)

    async def test_chain_completed_published_on_one_adapter_reaches_a_listener_on_another(
        self, notify_adapter: NotifyAdapter, second_notify_adapter: NotifyAdapter
    ) -> None:
        await crosses_over(notify_adapter, second_notify_adapter, CHAIN_COMPLETED)

    async def test_ownership_loss_published_on_one_adapter_reaches_a_listener_on_another(
        self, notify_adapter: NotifyAdapter, second_notify_adapter: NotifyAdapter
    ) -> None:
        await crosses_over(notify_adapter, second_notify_adapter, OWNERSHIP_LOST)

    @pytest.mark.parametrize("channel", CHANNELS, ids=lambda c: c.label.replace(" ", "_"))
    async def test_a_publish_reaches_listeners_on_both_adapters_once_each(
        self, notify_adapter: NotifyAdapter, second_notify_adapter: NotifyAdapter, channel: Channel
    ) -> None:
        # An adapter that delivers to its own listeners directly *and* through the broker
        # calls them twice.
        key, here, there = channel.key(), Inbox(), Inbox()
        await channel.listen(notify_adapter, key, here)
        await channel.listen(second_notify_adapter, key, there)
        await channel.publish(notify_adapter, key)
        await here.wait_for(key)
        await there.wait_for(key)
        await settle_across(notify_adapter, notify_adapter, channel)
        await settle_across(second_notify_adapter, notify_adapter, channel)
        assert (here.received, there.received) == ([key], [key])

    async def test_a_commit_completing_many_chains_reaches_listeners_on_another_adapter(
        self, notify_adapter: NotifyAdapter, second_notify_adapter: NotifyAdapter
    ) -> None:
        keys = [CHAIN_COMPLETED.key() for _ in range(5)]
        inboxes = [Inbox() for _ in keys]
        for key, inbox in zip(keys, inboxes, strict=True):
            await CHAIN_COMPLETED.listen(second_notify_adapter, key, inbox)
        hooks = TransactionHooks(record_events=False)
        for key in keys:
            hooks.chain_completed(key)
        await hooks.flush(notify_adapter)  # in bulk where the adapter publishes in bulk
        for key, inbox in zip(keys, inboxes, strict=True):
            await inbox.wait_for(key)
        await settle_across(second_notify_adapter, notify_adapter, CHAIN_COMPLETED)
        assert [inbox.received for inbox in inboxes] == [[key] for key in keys]

    async def test_unsubscribing_on_one_adapter_keeps_the_other_adapters_listener(
        self, notify_adapter: NotifyAdapter, second_notify_adapter: NotifyAdapter
    ) -> None:
        key, gone, kept = JOB_SCHEDULED.key(), Inbox(), Inbox()
        unsubscribe = await notify_adapter.listen_job_scheduled([key], gone)
        await second_notify_adapter.listen_job_scheduled([key], kept)
        await unsubscribe()
        await notify_adapter.publish_job_scheduled(key)
        await kept.wait_for(key)
        await settle_across(notify_adapter, notify_adapter, JOB_SCHEDULED)
        assert gone.received == []

    async def test_closing_one_adapter_keeps_the_other_adapters_listeners(
        self,
        notify_adapter: NotifyAdapter,
        second_notify_adapter: NotifyAdapter,
        notify_adapter_factory: NotifyAdapterFactory,
    ) -> None:
        keys = {channel.label: channel.key() for channel in CHANNELS}
        inboxes = {channel.label: Inbox() for channel in CHANNELS}
        for channel in CHANNELS:
            await channel.listen(notify_adapter, keys[channel.label], Inbox())
            await channel.listen(second_notify_adapter, keys[channel.label], inboxes[channel.label])
        await notify_adapter.close()
        third = await notify_adapter_factory()
        try:
            for channel in CHANNELS:
                await channel.publish(third, keys[channel.label])
                await inboxes[channel.label].wait_for(keys[channel.label])
        finally:
            await third.close()

    @requires(Capability.WAKE_HINTS)
    async def test_a_wake_hint_provided_on_one_adapter_is_consumed_on_another(
        self, notify_adapter: NotifyAdapter, second_notify_adapter: NotifyAdapter
    ) -> None:
        type_name = _type_name()
        await notify_adapter.provide_wake_hint(type_name, 2)
        claims = [
            await second_notify_adapter.consume_wake_hint(type_name),
            await notify_adapter.consume_wake_hint(type_name),
            await second_notify_adapter.consume_wake_hint(type_name),
        ]
        assert claims == [True, True, False], "two adapters on one broker share one wake budget"

    @requires(Capability.WAKE_HINTS)
    async def test_closing_the_adapter_that_provided_a_wake_hint_keeps_it_for_the_others(
        self, notify_adapter: NotifyAdapter, second_notify_adapter: NotifyAdapter
    ) -> None:
        type_name = _type_name()
        await notify_adapter.provide_wake_hint(type_name, 1)
        await notify_adapter.close()
        assert await second_notify_adapter.consume_wake_hint(type_name) is True
        assert await second_notify_adapter.consume_wake_hint(type_name) is False


class InterruptedConnectionTests:
    """After ``interrupt_connection(adapter)``: no raise, then publishing and listening again.

    Skipped unless the adopter overrides ``interrupt_connection``.
    """

    async def test_publishing_during_an_interruption_does_not_raise(
        self, notify_adapter: NotifyAdapter, interrupt_connection: InterruptConnection | None
    ) -> None:
        interrupt = _hook(interrupt_connection)
        # Open whatever connections the adapter opens: listening, publishing, wake hints.
        for channel in CHANNELS:
            key, inbox = channel.key(), Inbox()
            await channel.listen(notify_adapter, key, inbox)
            await channel.publish(notify_adapter, key)
            await inbox.wait_for(key)
        type_name = _type_name()
        await notify_adapter.provide_wake_hint(type_name, 1)
        await notify_adapter.consume_wake_hint(type_name)
        await interrupt(notify_adapter)

        async def publish_everything() -> None:
            for channel in CHANNELS:
                await channel.publish(notify_adapter, channel.key())
            hooks = TransactionHooks(record_events=False)
            hooks.chain_completed(CHAIN_COMPLETED.key())
            hooks.chain_completed(CHAIN_COMPLETED.key())
            await hooks.flush(notify_adapter)
            await notify_adapter.provide_wake_hint(type_name, 1)
            assert isinstance(await notify_adapter.consume_wake_hint(type_name), bool)

        try:
            await asyncio.wait_for(publish_everything(), RECONNECT_TIMEOUT)
        except TimeoutError:
            pytest.fail(f"publishing during an interruption did not return within {RECONNECT_TIMEOUT} s")

    async def test_listeners_hear_again_after_an_interruption(
        self,
        notify_adapter: NotifyAdapter,
        second_notify_adapter: NotifyAdapter,
        interrupt_connection: InterruptConnection | None,
    ) -> None:
        interrupt = _hook(interrupt_connection)
        keys = {channel.label: channel.key() for channel in CHANNELS}
        inboxes = {channel.label: Inbox() for channel in CHANNELS}
        for channel in CHANNELS:
            await channel.listen(notify_adapter, keys[channel.label], inboxes[channel.label])
            await channel.publish(second_notify_adapter, keys[channel.label])
            await inboxes[channel.label].wait_for(keys[channel.label])
        await interrupt(notify_adapter)
        deadline = reconnect_deadline()
        for channel in CHANNELS:
            key = keys[channel.label]
            await until_delivered(
                functools.partial(channel.publish, second_notify_adapter, key),
                inboxes[channel.label],
                key,
                count=2,
                deadline=deadline,
            )

    async def test_a_wake_up_after_reconnecting_reaches_a_listener_registered_before_exactly_once(
        self,
        notify_adapter: NotifyAdapter,
        second_notify_adapter: NotifyAdapter,
        interrupt_connection: InterruptConnection | None,
    ) -> None:
        interrupt = _hook(interrupt_connection)
        type_name, inbox = _type_name(), Inbox()
        await notify_adapter.listen_job_scheduled([type_name], inbox)
        await interrupt(notify_adapter)
        await until_delivered(
            lambda: second_notify_adapter.publish_job_scheduled(type_name),
            inbox,
            type_name,
            count=1,
            deadline=reconnect_deadline(),
        )
        # Reconnected. Let the poll's publishes still in flight arrive, then wake it once more.
        await settle_across(notify_adapter, second_notify_adapter, JOB_SCHEDULED)
        before = inbox.received.count(type_name)
        await second_notify_adapter.publish_job_scheduled(type_name)
        await inbox.wait_for(type_name, count=before + 1)
        await settle_across(notify_adapter, second_notify_adapter, JOB_SCHEDULED)
        assert inbox.received.count(type_name) == before + 1, (
            "one wake-up after the reconnection must reach the listener exactly once "
            f"(a subscription made twice delivers it twice); received {inbox.received!r}"
        )

    async def test_publishing_reaches_other_adapters_again_after_an_interruption(
        self,
        notify_adapter: NotifyAdapter,
        second_notify_adapter: NotifyAdapter,
        interrupt_connection: InterruptConnection | None,
    ) -> None:
        interrupt = _hook(interrupt_connection)
        key, inbox = JOB_SCHEDULED.key(), Inbox()
        await second_notify_adapter.listen_job_scheduled([key], inbox)
        await notify_adapter.publish_job_scheduled(key)
        await inbox.wait_for(key)
        await interrupt(notify_adapter)
        await until_delivered(
            lambda: notify_adapter.publish_job_scheduled(key),
            inbox,
            key,
            count=2,
            deadline=reconnect_deadline(),
        )

    async def test_a_listener_added_after_an_interruption_hears_once_reconnected(
        self,
        notify_adapter: NotifyAdapter,
        second_notify_adapter: NotifyAdapter,
        interrupt_connection: InterruptConnection | None,
    ) -> None:
        interrupt = _hook(interrupt_connection)
        await notify_adapter.listen_job_scheduled([_type_name()], Inbox())  # a live connection
        await interrupt(notify_adapter)
        late = {channel.label: (channel.key(), Inbox()) for channel in CHANNELS}
        for channel in CHANNELS:
            key, inbox = late[channel.label]
            await channel.listen(notify_adapter, key, inbox)
        deadline = reconnect_deadline()
        for channel in CHANNELS:
            key, inbox = late[channel.label]
            await until_delivered(
                functools.partial(channel.publish, second_notify_adapter, key),
                inbox,
                key,
                count=1,
                deadline=deadline,
            )

    @requires(Capability.WAKE_HINTS)
    async def test_wake_hints_are_tracked_again_after_an_interruption(
        self, notify_adapter: NotifyAdapter, interrupt_connection: InterruptConnection | None
    ) -> None:
        interrupt = _hook(interrupt_connection)
        await notify_adapter.provide_wake_hint(_type_name(), 1)
        await interrupt(notify_adapter)
        loop = asyncio.get_running_loop()
        deadline = reconnect_deadline()
        while True:
            # A fresh type each round: a provide lost to the outage leaves nothing behind.
            type_name = _type_name()
            await notify_adapter.provide_wake_hint(type_name, 1)
            assert await notify_adapter.consume_wake_hint(type_name) is True, "a claim or fail-open wake"
            if await notify_adapter.consume_wake_hint(type_name) is False:
                return
            if loop.time() > deadline:
                pytest.fail(f"wake hints were not tracked again within {RECONNECT_TIMEOUT} s")
            await asyncio.sleep(POLL_INTERVAL)  # pacing only: fail-open answers may never yield

    async def test_an_unsubscribe_during_an_interruption_holds_after_reconnecting(
        self,
        notify_adapter: NotifyAdapter,
        second_notify_adapter: NotifyAdapter,
        interrupt_connection: InterruptConnection | None,
    ) -> None:
        # An adapter that replays its registrations on reconnect must not bring back a
        # listener that unsubscribed while the connection was down.
        interrupt = _hook(interrupt_connection)
        gone_key, kept_key, gone, kept = _type_name(), _type_name(), Inbox(), Inbox()
        unsubscribe = await notify_adapter.listen_job_scheduled([gone_key], gone)
        await notify_adapter.listen_job_scheduled([kept_key], kept)
        await interrupt(notify_adapter)
        await unsubscribe()
        await until_delivered(
            lambda: second_notify_adapter.publish_job_scheduled(kept_key),
            kept,
            kept_key,
            count=1,
            deadline=reconnect_deadline(),
        )
        await second_notify_adapter.publish_job_scheduled(gone_key)
        await settle_across(notify_adapter, second_notify_adapter, JOB_SCHEDULED)
        assert gone.received == [], "a listener that unsubscribed during the break heard again"

    async def test_closing_during_an_interruption_does_not_raise_or_leave_errors_behind(
        self, notify_adapter: NotifyAdapter, interrupt_connection: InterruptConnection | None
    ) -> None:
        interrupt = _hook(interrupt_connection)
        loop = asyncio.get_running_loop()
        unhandled: list[dict[str, Any]] = []
        previous = loop.get_exception_handler()
        loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
        try:
            unsubscribes = []
            for channel in CHANNELS:
                key, inbox = channel.key(), Inbox()
                unsubscribes.append(await channel.listen(notify_adapter, key, inbox))
                await channel.publish(notify_adapter, key)
                await inbox.wait_for(key)
            await interrupt(notify_adapter)
            await JOB_SCHEDULED.publish(notify_adapter, JOB_SCHEDULED.key())  # may be lost; no raise
            try:
                await asyncio.wait_for(notify_adapter.close(), RECONNECT_TIMEOUT)
            except TimeoutError:
                pytest.fail(f"close() during an interruption did not return within {RECONNECT_TIMEOUT} s")
            for unsubscribe in unsubscribes:
                await unsubscribe()
            with pytest.raises(AdapterClosedError):
                await notify_adapter.publish_job_scheduled(_type_name())
            gc.collect()  # "exception was never retrieved" is reported when a task is collected
            await asyncio.sleep(0)
        finally:
            loop.set_exception_handler(previous)
        assert unhandled == []
