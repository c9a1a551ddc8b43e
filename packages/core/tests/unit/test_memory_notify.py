"""MemoryNotifyAdapter: channels, multiplexing, fault isolation, unsubscribe, close, wake hints,
and adapters sharing one MemoryNotifyHub (a broker), interrupted and reconnecting."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from jobchain.contracts.capabilities import Capability
from jobchain.contracts.notify import NotifyAdapter
from jobchain.errors import AdapterClosedError, InvalidArgumentError
from jobchain.memory.notify import WAKE_HINT_TTL, MemoryNotifyAdapter, MemoryNotifyHub


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = datetime(2030, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def adapter(clock: ManualClock) -> AsyncIterator[MemoryNotifyAdapter]:
    notify = MemoryNotifyAdapter(clock)
    yield notify
    await notify.close()


def test_implements_the_notify_contract(adapter: MemoryNotifyAdapter) -> None:
    assert isinstance(adapter, NotifyAdapter)
    assert adapter.capabilities == frozenset({Capability.WAKE_HINTS})


class TestJobScheduled:
    async def test_matching_type_reaches_listener(self, adapter: MemoryNotifyAdapter) -> None:
        seen: list[str] = []
        await adapter.listen_job_scheduled(["email"], seen.append)
        await adapter.publish_job_scheduled("email")
        await adapter.publish_job_scheduled("email")
        assert seen == ["email", "email"]

    async def test_other_types_do_not(self, adapter: MemoryNotifyAdapter) -> None:
        seen: list[str] = []
        await adapter.listen_job_scheduled(["email"], seen.append)
        await adapter.publish_job_scheduled("sms")
        assert seen == []

    async def test_multi_type_listener_gets_each_matching_type_once(
        self, adapter: MemoryNotifyAdapter
    ) -> None:
        seen: list[str] = []
        await adapter.listen_job_scheduled(["email", "sms", "email"], seen.append)
        for name in ("email", "push", "sms"):
            await adapter.publish_job_scheduled(name)
        assert seen == ["email", "sms"]

    async def test_publish_without_listeners_is_fine(self, adapter: MemoryNotifyAdapter) -> None:
        await adapter.publish_job_scheduled("nobody-listens")

    async def test_a_single_string_is_refused(self, adapter: MemoryNotifyAdapter) -> None:
        with pytest.raises(InvalidArgumentError, match="not one string"):
            await adapter.listen_job_scheduled("email", lambda _: None)

    async def test_unsubscribe_stops_delivery(self, adapter: MemoryNotifyAdapter) -> None:
        seen: list[str] = []
        unsubscribe = await adapter.listen_job_scheduled(["email", "sms"], seen.append)
        await unsubscribe()
        await adapter.publish_job_scheduled("email")
        await adapter.publish_job_scheduled("sms")
        assert seen == []


class TestChainCompletedAndOwnershipLost:
    async def test_chain_completed_is_keyed_by_chain_id(self, adapter: MemoryNotifyAdapter) -> None:
        first: list[str] = []
        second: list[str] = []
        other: list[str] = []
        await adapter.listen_chain_completed("c1", first.append)
        await adapter.listen_chain_completed("c1", second.append)
        await adapter.listen_chain_completed("c2", other.append)
        await adapter.publish_chain_completed("c1")
        assert (first, second, other) == (["c1"], ["c1"], [])

    async def test_ownership_lost_is_keyed_by_job_id(self, adapter: MemoryNotifyAdapter) -> None:
        seen: list[str] = []
        unsubscribe = await adapter.listen_job_ownership_lost("j1", seen.append)
        await adapter.publish_job_ownership_lost("j2")
        await adapter.publish_job_ownership_lost("j1")
        await unsubscribe()
        await adapter.publish_job_ownership_lost("j1")
        assert seen == ["j1"]

    async def test_channels_are_separate(self, adapter: MemoryNotifyAdapter) -> None:
        seen: list[str] = []
        await adapter.listen_chain_completed("x", seen.append)
        await adapter.publish_job_ownership_lost("x")
        await adapter.publish_job_scheduled("x")
        assert seen == []


class TestSubscriptions:
    async def test_delivery_happens_during_each_publish(self, adapter: MemoryNotifyAdapter) -> None:
        seen: list[str] = []
        await adapter.listen_job_scheduled(["a"], seen.append)
        for expected in range(1, 4):
            await adapter.publish_job_scheduled("a")
            assert len(seen) == expected  # not batched until later

    async def test_unsubscribing_one_of_two_keeps_the_other(self, adapter: MemoryNotifyAdapter) -> None:
        kept: list[str] = []
        dropped: list[str] = []
        await adapter.listen_chain_completed("c", kept.append)
        unsubscribe = await adapter.listen_chain_completed("c", dropped.append)
        await unsubscribe()
        await adapter.publish_chain_completed("c")
        assert (kept, dropped) == (["c"], [])

    async def test_same_listener_twice_is_two_subscriptions(self, adapter: MemoryNotifyAdapter) -> None:
        seen: list[str] = []
        first = await adapter.listen_chain_completed("c", seen.append)
        await adapter.listen_chain_completed("c", seen.append)
        await first()
        await adapter.publish_chain_completed("c")
        assert seen == ["c"]

    async def test_unsubscribe_is_idempotent_and_resubscribe_works(
        self, adapter: MemoryNotifyAdapter
    ) -> None:
        seen: list[str] = []
        unsubscribe = await adapter.listen_job_scheduled(["a"], seen.append)
        await unsubscribe()
        await unsubscribe()
        await adapter.listen_job_scheduled(["a"], seen.append)
        await adapter.publish_job_scheduled("a")
        assert seen == ["a"]


class TestFaultIsolation:
    async def test_throwing_listener_does_not_reach_peers_or_publisher(
        self, adapter: MemoryNotifyAdapter, caplog: pytest.LogCaptureFixture
    ) -> None:
        before: list[str] = []
        after: list[str] = []

        def broken(_: str) -> None:
            raise RuntimeError("listener bug")

        await adapter.listen_chain_completed("c", before.append)
        await adapter.listen_chain_completed("c", broken)
        await adapter.listen_chain_completed("c", after.append)
        with caplog.at_level(logging.ERROR, logger="jobchain.memory.notify"):
            await adapter.publish_chain_completed("c")
        assert (before, after) == (["c"], ["c"])
        failures = [r for r in caplog.records if r.exc_info and isinstance(r.exc_info[1], RuntimeError)]
        assert len(failures) == 1  # logged once, by the adapter
        assert "chain_completed" in failures[0].getMessage()


class TestWakeHints:
    async def test_no_budget_means_wake(self, adapter: MemoryNotifyAdapter) -> None:
        assert await adapter.consume_wake_hint("email") is True
        assert await adapter.consume_wake_hint("email") is True

    async def test_claims_up_to_the_budget(self, adapter: MemoryNotifyAdapter) -> None:
        await adapter.provide_wake_hint("email", 2)
        results = [await adapter.consume_wake_hint("email") for _ in range(3)]
        assert results == [True, True, False]
        assert await adapter.consume_wake_hint("sms") is True  # budgets are per type

    async def test_provide_is_additive(self, adapter: MemoryNotifyAdapter) -> None:
        await adapter.provide_wake_hint("email", 1)
        await adapter.provide_wake_hint("email", 2)
        results = [await adapter.consume_wake_hint("email") for _ in range(4)]
        assert results == [True, True, True, False]

    async def test_budget_expires_after_ttl(self, adapter: MemoryNotifyAdapter, clock: ManualClock) -> None:
        await adapter.provide_wake_hint("email", 1)
        assert await adapter.consume_wake_hint("email") is True
        assert await adapter.consume_wake_hint("email") is False
        clock.advance(WAKE_HINT_TTL)
        assert await adapter.consume_wake_hint("email") is True  # expired: no budget tracked

    async def test_provide_refreshes_ttl(self, adapter: MemoryNotifyAdapter, clock: ManualClock) -> None:
        await adapter.provide_wake_hint("email", 1)
        clock.advance(WAKE_HINT_TTL - timedelta(seconds=1))
        await adapter.provide_wake_hint("email", 1)
        clock.advance(WAKE_HINT_TTL - timedelta(seconds=1))
        # Still live (refreshed), and both units were kept.
        assert [await adapter.consume_wake_hint("email") for _ in range(3)] == [True, True, False]

    async def test_provide_after_expiry_starts_from_zero(
        self, adapter: MemoryNotifyAdapter, clock: ManualClock
    ) -> None:
        await adapter.provide_wake_hint("email", 5)
        clock.advance(WAKE_HINT_TTL + timedelta(seconds=1))
        await adapter.provide_wake_hint("email", 1)
        assert [await adapter.consume_wake_hint("email") for _ in range(2)] == [True, False]

    @pytest.mark.parametrize("count", [0, -1, True, 1.5])
    async def test_count_must_be_a_positive_integer(
        self, adapter: MemoryNotifyAdapter, count: object
    ) -> None:
        with pytest.raises(InvalidArgumentError):
            await adapter.provide_wake_hint("email", count)  # type: ignore[arg-type]  # bad on purpose

    def test_ttl_must_be_positive(self) -> None:
        with pytest.raises(InvalidArgumentError):
            MemoryNotifyAdapter(hint_ttl=timedelta(0))


class TestClose:
    async def test_close_is_idempotent_and_rejects_later_calls(self) -> None:
        adapter = MemoryNotifyAdapter()
        seen: list[str] = []
        unsubscribe = await adapter.listen_job_scheduled(["a"], seen.append)
        await adapter.close()
        await adapter.close()
        assert adapter.closed
        with pytest.raises(AdapterClosedError):
            await adapter.publish_job_scheduled("a")
        with pytest.raises(AdapterClosedError):
            await adapter.listen_chain_completed("c", seen.append)
        with pytest.raises(AdapterClosedError):
            await adapter.provide_wake_hint("a", 1)
        with pytest.raises(AdapterClosedError):
            await adapter.consume_wake_hint("a")
        await unsubscribe()  # still safe
        await unsubscribe()
        assert seen == []


class TestSharedHub:
    async def test_adapters_without_a_hub_do_not_hear_each_other(self) -> None:
        first, second = MemoryNotifyAdapter(), MemoryNotifyAdapter()
        seen: list[str] = []
        await second.listen_job_scheduled(["a"], seen.append)
        await first.publish_job_scheduled("a")
        await first.provide_wake_hint("a", 1)
        assert seen == []
        assert [await second.consume_wake_hint("a") for _ in range(2)] == [True, True]
        assert first.hub is not second.hub

    async def test_a_publish_reaches_every_adapter_of_the_hub_during_the_call(self) -> None:
        hub = MemoryNotifyHub()
        first, second = MemoryNotifyAdapter(hub=hub), MemoryNotifyAdapter(hub=hub)
        here: list[str] = []
        there: list[str] = []
        await first.listen_chain_completed("c", here.append)
        await second.listen_chain_completed("c", there.append)
        await second.listen_chain_completed("c", there.append)
        await first.publish_chain_completed("c")
        assert (here, there) == (["c"], ["c", "c"])  # once per listener, never per adapter twice

    async def test_one_hub_subscription_per_key_and_adapter(self) -> None:
        hub = MemoryNotifyHub()
        adapter = MemoryNotifyAdapter(hub=hub)
        first = await adapter.listen_job_scheduled(["a"], lambda _: None)
        second = await adapter.listen_job_scheduled(["a", "b"], lambda _: None)
        assert hub._subscribers["job_scheduled"] == {"a": {adapter: None}, "b": {adapter: None}}
        await first()
        assert set(hub._subscribers["job_scheduled"]) == {"a", "b"}
        await second()
        assert hub._subscribers["job_scheduled"] == {}

    async def test_budgets_are_shared_and_outlive_the_adapter_that_provided_them(self) -> None:
        hub = MemoryNotifyHub()
        first, second = MemoryNotifyAdapter(hub=hub), MemoryNotifyAdapter(hub=hub)
        await first.provide_wake_hint("a", 2)
        assert await second.consume_wake_hint("a") is True
        await first.close()
        assert [await second.consume_wake_hint("a") for _ in range(2)] == [True, False]

    async def test_a_closed_adapter_leaves_the_hub(self) -> None:
        hub = MemoryNotifyHub()
        first, second = MemoryNotifyAdapter(hub=hub), MemoryNotifyAdapter(hub=hub)
        seen: list[str] = []
        await first.listen_job_ownership_lost("j", seen.append)
        await first.close()
        await second.publish_job_ownership_lost("j")
        assert seen == []
        assert hub._subscribers["job_ownership_lost"] == {}

    def test_hub_must_be_a_hub(self) -> None:
        with pytest.raises(InvalidArgumentError, match="MemoryNotifyHub"):
            MemoryNotifyAdapter(hub=object())  # type: ignore[arg-type]  # bad on purpose


class TestInterrupt:
    async def test_an_interrupted_adapter_subscribes_again_at_once(self) -> None:
        hub = MemoryNotifyHub()
        first, second = MemoryNotifyAdapter(hub=hub), MemoryNotifyAdapter(hub=hub)
        seen: list[str] = []
        await first.listen_job_scheduled(["a"], seen.append)
        await first.listen_chain_completed("c", seen.append)
        hub.interrupt(first)
        await second.publish_job_scheduled("a")
        await second.publish_chain_completed("c")
        assert seen == ["a", "c"]

    async def test_the_hub_drops_only_the_interrupted_adapters_subscriptions(self) -> None:
        class NeverResubscribes(MemoryNotifyAdapter):
            def _connection_lost(self) -> None:
                pass

        hub = MemoryNotifyHub()
        dropped, kept = NeverResubscribes(hub=hub), MemoryNotifyAdapter(hub=hub)
        lost: list[str] = []
        heard: list[str] = []
        await dropped.listen_job_scheduled(["a"], lost.append)
        await kept.listen_job_scheduled(["a"], heard.append)
        await dropped.provide_wake_hint("a", 1)
        hub.interrupt(dropped)
        await kept.publish_job_scheduled("a")
        assert (lost, heard) == ([], ["a"])
        assert [await kept.consume_wake_hint("a") for _ in range(2)] == [True, False]  # budget kept

    async def test_interrupting_a_closed_adapter_changes_nothing(self) -> None:
        hub = MemoryNotifyHub()
        adapter = MemoryNotifyAdapter(hub=hub)
        await adapter.listen_job_scheduled(["a"], lambda _: None)
        await adapter.close()
        hub.interrupt(adapter)
        assert hub._subscribers["job_scheduled"] == {}
