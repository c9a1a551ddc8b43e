"""Redis-specific behaviour beyond the suite: shared subscriptions, key layout, scripts, bad input."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.crc import key_slot

from jobchain.connect_backends import open_notify
from jobchain.errors import AdapterClosedError, BackendUnreachableError, InvalidArgumentError, InvalidURLError
from jobchain.plugins import get_registry
from jobchain_redis import MAX_PAYLOAD_BYTES, RedisNotifyAdapter, RedisNotifyOptions
from jobchain_redis.options import parse_url


@pytest.fixture
async def adapter(redis_url: str, unique_prefix: str) -> AsyncIterator[RedisNotifyAdapter]:
    opened = await RedisNotifyAdapter.connect(redis_url, options=RedisNotifyOptions(prefix=unique_prefix))
    yield opened
    await opened.close()


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


async def numsub(redis: Redis, channel: str) -> int:
    [(_, count)] = await redis.pubsub_numsub(channel)
    return int(count)


async def eventually(check: object, within: float = 5.0) -> None:
    """Poll an async predicate until true (bounded); for effects Redis applies asynchronously."""
    assert callable(check)
    deadline = asyncio.get_running_loop().time() + within
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"condition {check.__name__} not met within {within} s")
        await asyncio.sleep(0.01)


class TestSharedSubscriptions:
    async def test_listen_returns_once_redis_has_the_subscription(
        self, adapter: RedisNotifyAdapter, redis: Redis
    ) -> None:
        channel = adapter.options.channel_scheduled
        assert await numsub(redis, channel) == 0
        await adapter.listen_job_scheduled(["a"], lambda _: None)
        assert await numsub(redis, channel) == 1

    async def test_many_listeners_share_one_subscription_per_channel(
        self, adapter: RedisNotifyAdapter, redis: Redis
    ) -> None:
        unsubscribes = []
        for i in range(5):
            unsubscribes.append(await adapter.listen_job_scheduled([f"t{i}"], lambda _: None))
            unsubscribes.append(await adapter.listen_chain_completed(str(uuid.uuid4()), lambda _: None))
            unsubscribes.append(await adapter.listen_job_ownership_lost(str(uuid.uuid4()), lambda _: None))
        opts = adapter.options
        for channel in (opts.channel_scheduled, opts.channel_chain_completed, opts.channel_ownership_lost):
            assert await numsub(redis, channel) == 1

    async def test_subscription_stops_after_the_last_listener_leaves(
        self, adapter: RedisNotifyAdapter, redis: Redis
    ) -> None:
        channel = adapter.options.channel_chain_completed
        first = await adapter.listen_chain_completed(str(uuid.uuid4()), lambda _: None)
        second = await adapter.listen_chain_completed(str(uuid.uuid4()), lambda _: None)
        await first()
        assert await numsub(redis, channel) == 1

        await second()

        async def unsubscribed() -> bool:
            return await numsub(redis, channel) == 0

        await eventually(unsubscribed)

    async def test_uses_one_command_and_one_subscription_connection(
        self, adapter: RedisNotifyAdapter, redis: Redis, unique_prefix: str
    ) -> None:
        for channel in ("a", "b", "c"):
            await adapter.listen_job_scheduled([channel], lambda _: None)
        await adapter.listen_chain_completed(str(uuid.uuid4()), lambda _: None)
        await adapter.publish_job_scheduled("a")
        await adapter.consume_wake_hint("a")
        clients = await redis.client_list()
        names = sorted(c["name"] for c in clients if c["name"].startswith(f"jobchain:{unique_prefix}"))
        assert names == [f"jobchain:{unique_prefix}:commands", f"jobchain:{unique_prefix}:subscriptions"]

    async def test_concurrent_listens_on_a_new_channel_subscribe_once(
        self, adapter: RedisNotifyAdapter, redis: Redis
    ) -> None:
        received: list[str] = []
        await asyncio.gather(*(adapter.listen_job_scheduled(["x"], received.append) for _ in range(10)))
        assert await numsub(redis, adapter.options.channel_scheduled) == 1
        await adapter.publish_job_scheduled("x")

        async def all_delivered() -> bool:
            return len(received) == 10

        await eventually(all_delivered)


class TestWakeHintKeys:
    async def test_hint_key_uses_the_type_name_as_cluster_hash_tag(self, unique_prefix: str) -> None:
        options = RedisNotifyOptions(prefix=unique_prefix)
        key = options.hint_key("send-email")
        assert key == f"{unique_prefix}:hint:{{send-email}}"
        # Redis Cluster hashes only the part inside the first {...}: the slot is the type's.
        assert key_slot(key.encode()) == key_slot(b"send-email")

    async def test_provide_sets_the_ttl_and_consume_keeps_it(
        self, redis_url: str, unique_prefix: str, redis: Redis
    ) -> None:
        options = RedisNotifyOptions(prefix=unique_prefix, hint_ttl=timedelta(seconds=30))
        adapter = await RedisNotifyAdapter.connect(redis_url, options=options)
        try:
            key = options.hint_key("t")
            await adapter.provide_wake_hint("t", 3)
            assert int(await redis.get(key)) == 3
            assert 0 < await redis.ttl(key) <= 30
            await redis.expire(key, 5)
            assert await adapter.consume_wake_hint("t") is True
            assert 0 < await redis.ttl(key) <= 5, "consume must not refresh the TTL"
            await adapter.provide_wake_hint("t", 1)
            assert 5 < await redis.ttl(key) <= 30, "provide refreshes the TTL"
            assert int(await redis.get(key)) == 3
        finally:
            await adapter.close()

    async def test_expired_budget_means_wake(self, adapter: RedisNotifyAdapter, redis: Redis) -> None:
        await adapter.provide_wake_hint("t", 1)
        assert await adapter.consume_wake_hint("t") is True
        assert await adapter.consume_wake_hint("t") is False
        await redis.delete(adapter.options.hint_key("t"))  # what the TTL does after hint_ttl
        assert await adapter.consume_wake_hint("t") is True

    async def test_a_value_that_is_not_a_number_counts_as_no_budget(
        self, adapter: RedisNotifyAdapter, redis: Redis
    ) -> None:
        await redis.set(adapter.options.hint_key("t"), "garbage")
        assert await adapter.consume_wake_hint("t") is True
        await adapter.provide_wake_hint("t", 2)
        assert int(await redis.get(adapter.options.hint_key("t"))) == 2

    async def test_concurrent_consumers_never_claim_more_than_the_budget(
        self, redis_url: str, unique_prefix: str
    ) -> None:
        options = RedisNotifyOptions(prefix=unique_prefix)
        workers = [await RedisNotifyAdapter.connect(redis_url, options=options) for _ in range(8)]
        try:
            await workers[0].provide_wake_hint("t", 5)
            await workers[1].provide_wake_hint("t", 5)
            claims = await asyncio.gather(*(w.consume_wake_hint("t") for w in workers for _ in range(3)))
            assert claims.count(True) == 10
        finally:
            for worker in workers:
                await worker.close()

    async def test_scripts_are_reloaded_after_script_flush(
        self, adapter: RedisNotifyAdapter, redis: Redis
    ) -> None:
        await redis.script_flush()
        await adapter.provide_wake_hint("t", 1)
        assert await adapter.consume_wake_hint("t") is True
        assert await adapter.consume_wake_hint("t") is False


class TestBadInput:
    @pytest.mark.parametrize(
        ("url", "names"),
        [
            ("redis://127.0.0.1:99999/0", "port"),
            ("redis://127.0.0.1:6379/zero", "database"),
            ("redis://127.0.0.1:6379/0?prefx=a", "prefx"),
            ("redis://127.0.0.1:6379/0?prefix=a%7Bb%7D", "prefix"),
            ("redis://127.0.0.1:6379/0?prefix=", "prefix"),
            ("redis://127.0.0.1:6379/0?hint_ttl=soon", "hint_ttl"),
            ("redis://127.0.0.1:6379/0?connect_attempts=0", "connect_attempts"),
            ("redis+hiredis://127.0.0.1:6379/0", "driver"),
            ("nats://127.0.0.1:4222", "not a Redis URL"),
        ],
    )
    def test_malformed_url_raises_invalid_url_naming_the_part(self, url: str, names: str) -> None:
        with pytest.raises(InvalidURLError, match=names):
            parse_url(url)

    def test_url_query_sets_options_and_passes_driver_options_through(self) -> None:
        driver_url, options = parse_url(
            "rediss://u:pw@cache:6380/2?prefix=app:jobs&hint_ttl=30&connect_attempts=3&health_check_interval=10"
        )
        assert options.prefix == "app:jobs"
        assert options.hint_ttl == timedelta(seconds=30)
        assert options.connect_attempts == 3
        assert driver_url.render(hide_password=False) == "rediss://u:pw@cache:6380/2?health_check_interval=10"

    @pytest.mark.parametrize("prefix", ["", "has space", "tag{x}", "a" * 101, "ünï"])
    def test_prefix_with_illegal_characters_is_rejected(self, prefix: str) -> None:
        with pytest.raises(InvalidArgumentError, match="prefix"):
            RedisNotifyOptions(prefix=prefix)

    async def test_unreachable_redis_at_start_names_host_and_port(self) -> None:
        port = _closed_port()
        with pytest.raises(BackendUnreachableError, match=f"127.0.0.1:{port}.*2 attempt"):
            await RedisNotifyAdapter.connect(
                f"redis://default:hunter2@127.0.0.1:{port}/0?connect_attempts=2&connect_retry_delay=0.01"
            )

    async def test_unreachable_error_never_shows_the_password(self) -> None:
        with pytest.raises(BackendUnreachableError) as caught:
            await RedisNotifyAdapter.connect(f"redis://user:hunter2@127.0.0.1:{_closed_port()}/0")
        assert "hunter2" not in str(caught.value)
        assert "***" in str(caught.value)

    @pytest.mark.parametrize("value", ["", "x" * (MAX_PAYLOAD_BYTES + 1), "é" * (MAX_PAYLOAD_BYTES // 2 + 1)])
    async def test_overlong_or_empty_payload_raises_invalid_argument(
        self, adapter: RedisNotifyAdapter, value: str
    ) -> None:
        with pytest.raises(InvalidArgumentError, match="type name"):
            await adapter.publish_job_scheduled(value)
        with pytest.raises(InvalidArgumentError, match="chain id"):
            await adapter.listen_chain_completed(value, lambda _: None)
        with pytest.raises(InvalidArgumentError, match="type name"):
            await adapter.consume_wake_hint(value)

    async def test_payload_at_the_limit_is_delivered(self, adapter: RedisNotifyAdapter) -> None:
        name = "x" * MAX_PAYLOAD_BYTES
        got: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        await adapter.listen_job_scheduled([name], got.set_result)
        await adapter.publish_job_scheduled(name)
        assert await asyncio.wait_for(got, 5) == name

    async def test_type_names_given_as_one_string_are_rejected(self, adapter: RedisNotifyAdapter) -> None:
        with pytest.raises(InvalidArgumentError, match="sequence"):
            await adapter.listen_job_scheduled("send-email", lambda _: None)

    @pytest.mark.parametrize("count", [-1, 1.5, True, "2"])
    async def test_invalid_hint_count_is_rejected(self, adapter: RedisNotifyAdapter, count: object) -> None:
        with pytest.raises(InvalidArgumentError, match="count"):
            await adapter.provide_wake_hint("t", count)  # type: ignore[arg-type]

    async def test_closed_adapter_rejects_calls(self, adapter: RedisNotifyAdapter) -> None:
        await adapter.close()
        with pytest.raises(AdapterClosedError):
            await adapter.publish_job_scheduled("t")


class TestClose:
    """close() leaves no connection behind, whatever was in flight when it was called."""

    async def _connections(self, redis: Redis, prefix: str) -> list[str]:
        clients = await redis.client_list()
        return sorted(c["name"] for c in clients if c["name"].startswith(f"jobchain:{prefix}:"))

    async def test_calls_in_flight_finish_and_no_connection_outlives_close(
        self, redis_url: str, redis: Redis, unique_prefix: str
    ) -> None:
        # Many callers share the one command connection, so most of these wait for it when
        # close() runs. Before the fix, close() released the connection under them and the next
        # waiter opened a fresh one on the closed client: a connection nobody closed, reported
        # later as "Unclosed Redis client" when the garbage collector found it.
        options = RedisNotifyOptions(prefix=unique_prefix)
        adapter = await RedisNotifyAdapter.connect(redis_url, options=options)
        await adapter.listen_job_scheduled(["t"], lambda _: None)
        calls: list[asyncio.Task[Any]] = []
        for i in range(20):
            calls.append(asyncio.create_task(adapter.provide_wake_hint("t", 1)))
            calls.append(asyncio.create_task(adapter.publish_job_scheduled("t")))
            calls.append(asyncio.create_task(adapter.consume_wake_hint("t")))
            calls.append(asyncio.create_task(adapter.publish_chains_completed([f"c{i}", f"d{i}"])))
        await asyncio.sleep(0)  # every call is past its open check and waits for the connection
        await adapter.close()
        assert all(call.done() for call in calls), "close() returned before the calls it accepted"
        failures = [call.exception() for call in calls if call.exception() is not None]
        assert failures == []
        prefix = unique_prefix

        async def no_connection_left() -> bool:
            return await self._connections(redis, prefix) == []

        await eventually(no_connection_left)

    async def test_close_cancelled_while_waiting_still_closes_the_connections(
        self, redis_url: str, redis: Redis, unique_prefix: str
    ) -> None:
        options = RedisNotifyOptions(prefix=unique_prefix)
        adapter = await RedisNotifyAdapter.connect(redis_url, options=options)
        await adapter.listen_job_scheduled(["t"], lambda _: None)
        calls = [asyncio.create_task(adapter.publish_job_scheduled("t")) for _ in range(20)]
        await asyncio.sleep(0)
        closing = asyncio.create_task(adapter.close())
        await asyncio.sleep(0)
        closing.cancel()
        await asyncio.gather(closing, *calls, return_exceptions=True)
        prefix = unique_prefix

        async def no_connection_left() -> bool:
            return await self._connections(redis, prefix) == []

        await eventually(no_connection_left)
        with pytest.raises(AdapterClosedError):
            await adapter.publish_job_scheduled("t")


class TestPlugin:
    def test_entry_point_declares_redis_and_rediss_for_notify(self) -> None:
        for scheme in ("redis", "rediss"):
            spec = get_registry().lookup(scheme, "notify")
            assert spec.distribution == "jobchain-redis"
            assert spec.factory == "jobchain_redis.notify:open_notify_adapter"

    def test_plugin_module_imports_no_driver(self) -> None:
        code = "import sys, jobchain_redis.plugin; assert 'redis' not in sys.modules, 'redis imported'"
        subprocess.run([sys.executable, "-c", code], check=True)

    async def test_notify_url_opens_the_adapter_through_the_registry(
        self, redis_url: str, unique_prefix: str
    ) -> None:
        adapter = await open_notify(f"{redis_url}?prefix={unique_prefix}")
        try:
            assert isinstance(adapter, RedisNotifyAdapter)
            assert adapter.options.prefix == unique_prefix
            got: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            await adapter.listen_job_scheduled(["t"], got.set_result)
            await adapter.publish_job_scheduled("t")
            assert await asyncio.wait_for(got, 5) == "t"
        finally:
            await adapter.close()


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class TestApplicationClient:
    async def test_from_client_leaves_the_applications_client_open(
        self, redis: Redis, unique_prefix: str
    ) -> None:
        adapter = await RedisNotifyAdapter.from_client(
            redis, options=RedisNotifyOptions(prefix=unique_prefix)
        )
        got: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        await adapter.listen_chain_completed("c", got.set_result)
        await adapter.publish_chain_completed("c")
        assert await asyncio.wait_for(got, 5) == "c"
        await adapter.provide_wake_hint("t", 1)
        assert [await adapter.consume_wake_hint("t") for _ in range(2)] == [True, False]
        await adapter.close()
        assert await redis.ping() is True
