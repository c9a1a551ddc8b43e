"""NATS-specific behaviour beyond the suite: shared subscriptions, KV budgets and CAS, bad input."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import nats
import pytest
from nats.js.kv import KeyValue

from jobchain.connect_backends import open_notify
from jobchain.contracts import Capability
from jobchain.errors import AdapterClosedError, BackendUnreachableError, InvalidArgumentError, InvalidURLError
from jobchain.plugins import get_registry
from jobchain_nats import MAX_PAYLOAD_BYTES, NatsNotifyAdapter, NatsNotifyOptions
from jobchain_nats.options import parse_url
from jobchain_nats.wake_hints import KvWakeHints, encode_key_token


@pytest.fixture
async def adapter(nats_url: str, unique_prefix: str, kv_bucket: str) -> AsyncIterator[NatsNotifyAdapter]:
    options = NatsNotifyOptions(prefix=unique_prefix, kv_bucket=kv_bucket, kv_create=True)
    opened = await NatsNotifyAdapter.connect(nats_url, options=options)
    yield opened
    await opened.close()


@pytest.fixture
async def raw(nats_url: str) -> AsyncIterator[nats.aio.client.Client]:
    nc = await nats.connect(nats_url)
    yield nc
    await nc.close()


async def eventually(check: Any, within: float = 5.0) -> None:
    """Poll a predicate until true (bounded); for effects the server applies asynchronously."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not check():
        if loop.time() > deadline:
            pytest.fail(f"condition {check.__name__} not met within {within} s")
        await asyncio.sleep(0.01)


def subscribed_subjects(server: Any) -> list[str]:
    """Subjects of every subscription the private server holds, across its connections."""
    return sorted(
        sub
        for conn in server.connz()["connections"]
        for sub in conn.get("subscriptions_list", [])
        if not sub.startswith("_INBOX.")
    )


class TestSharedSubscriptions:
    async def test_many_listeners_share_one_subscription_per_subject_on_one_connection(
        self, private_nats: Any
    ) -> None:
        adapter = await NatsNotifyAdapter.connect(private_nats.url, options=NatsNotifyOptions(prefix="app"))
        try:
            for i in range(5):
                await adapter.listen_job_scheduled([f"t{i}"], lambda _: None)
                await adapter.listen_chain_completed(str(uuid.uuid4()), lambda _: None)
                await adapter.listen_job_ownership_lost(str(uuid.uuid4()), lambda _: None)
            # listen_* returned after a flush round trip, so the server already has them all.
            assert subscribed_subjects(private_nats) == ["app.chainc", "app.owls", "app.sched"]
            assert private_nats.connz()["num_connections"] == 1
        finally:
            await adapter.close()

    async def test_subscription_stops_after_the_last_listener_leaves(self, private_nats: Any) -> None:
        adapter = await NatsNotifyAdapter.connect(private_nats.url, options=NatsNotifyOptions(prefix="app"))
        try:
            first = await adapter.listen_job_scheduled(["a"], lambda _: None)
            second = await adapter.listen_job_scheduled(["b"], lambda _: None)
            await first()
            assert subscribed_subjects(private_nats) == ["app.sched"]
            await second()

            def unsubscribed() -> bool:
                return subscribed_subjects(private_nats) == []

            await eventually(unsubscribed)
        finally:
            await adapter.close()


class TestKvWakeHints:
    async def test_created_bucket_has_the_configured_ttl_and_one_revision_per_key(
        self, nats_url: str, unique_prefix: str, kv_bucket: str, raw: Any
    ) -> None:
        options = NatsNotifyOptions(
            prefix=unique_prefix, kv_bucket=kv_bucket, kv_create=True, kv_ttl=timedelta(seconds=42)
        )
        adapter = await NatsNotifyAdapter.connect(nats_url, options=options)
        await adapter.close()
        info = await raw.jetstream().stream_info(f"KV_{kv_bucket}")
        assert info.config.max_age == 42
        assert info.config.max_msgs_per_subject == 1

    async def test_existing_bucket_is_bound_without_kv_create(
        self, nats_url: str, unique_prefix: str, kv_bucket: str, raw: Any
    ) -> None:
        await raw.jetstream().create_key_value(bucket=kv_bucket, history=1, ttl=60)
        adapter = await NatsNotifyAdapter.connect(
            nats_url, options=NatsNotifyOptions(prefix=unique_prefix, kv_bucket=kv_bucket)
        )
        try:
            assert adapter.capabilities == frozenset({Capability.WAKE_HINTS})
            await adapter.provide_wake_hint("t", 1)
            assert await adapter.consume_wake_hint("t") is True
            assert await adapter.consume_wake_hint("t") is False
        finally:
            await adapter.close()

    async def test_missing_bucket_without_kv_create_says_what_to_change(self, nats_url: str) -> None:
        options = NatsNotifyOptions(kv_bucket=f"missing_{uuid.uuid4().hex[:8]}")
        with pytest.raises(InvalidArgumentError, match=r"does not exist.*kv_create=true"):
            await NatsNotifyAdapter.connect(nats_url, options=options)

    async def test_without_a_bucket_hints_degrade_to_always_wake(
        self, nats_url: str, unique_prefix: str
    ) -> None:
        adapter = await NatsNotifyAdapter.connect(nats_url, options=NatsNotifyOptions(prefix=unique_prefix))
        try:
            assert Capability.WAKE_HINTS not in adapter.capabilities
            await adapter.provide_wake_hint("t", 1)
            assert [await adapter.consume_wake_hint("t") for _ in range(3)] == [True, True, True]
        finally:
            await adapter.close()

    async def test_concurrent_consumers_never_claim_more_than_the_budget(
        self, nats_url: str, unique_prefix: str, kv_bucket: str
    ) -> None:
        options = NatsNotifyOptions(prefix=unique_prefix, kv_bucket=kv_bucket, kv_create=True)
        workers = [await NatsNotifyAdapter.connect(nats_url, options=options) for _ in range(6)]
        try:
            await workers[0].provide_wake_hint("t", 4)
            claims = await asyncio.gather(*(w.consume_wake_hint("t") for w in workers for _ in range(2)))
            kv = workers[0]._hints
            assert isinstance(kv, KvWakeHints)
            left = int((await kv._kv.get(kv.key("t"))).value or b"0")
            # CAS: a slot is claimed at most once; a consumer that loses 5 races says False.
            assert claims.count(True) + left == 4
        finally:
            for worker in workers:
                await worker.close()

    async def test_type_names_with_any_characters_get_their_own_budget(
        self, adapter: NatsNotifyAdapter
    ) -> None:
        names = ["a.b", "a=2Eb", "a b", "a/b", "ä*>", "a_b"]
        for name in names:
            await adapter.provide_wake_hint(name, 1)
        for name in names:
            assert await adapter.consume_wake_hint(name) is True, name
            assert await adapter.consume_wake_hint(name) is False, name

    def test_key_encoding_is_injective_and_uses_only_kv_key_characters(self) -> None:
        names = ["a.b", "a=2Eb", "a b", "a/b", "ä*>", "a_b", "a-b", "=", "=3D"]
        encoded = [encode_key_token(name) for name in names]
        assert len(set(encoded)) == len(names)
        allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-=")
        assert all(set(token) <= allowed for token in encoded)


class _Racing:
    """A real bucket whose key is rewritten by another writer between every read and write."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    async def get(self, key: str) -> Any:
        entry = await self._kv.get(key)
        await self._kv.put(key, entry.value or b"0")  # new revision: the caller's CAS must fail
        return entry

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kv, name)


class TestCasExhaustion:
    @pytest.fixture
    async def bucket(self, nats_url: str, kv_bucket: str) -> AsyncIterator[KeyValue]:
        nc = await nats.connect(nats_url)
        kv = await nc.jetstream().create_key_value(bucket=kv_bucket, history=1, ttl=60)
        yield kv
        await nc.close()

    async def test_consume_that_keeps_losing_the_race_returns_false(self, bucket: KeyValue) -> None:
        await bucket.put("p.hint.t", b"3")
        hints = KvWakeHints(_Racing(bucket), "p", attempts=5)  # type: ignore[arg-type]
        assert await hints.consume("t") is False
        assert (await bucket.get("p.hint.t")).value == b"3", "no slot was taken"

    async def test_provide_that_keeps_losing_the_race_deletes_the_budget_so_everyone_wakes(
        self, bucket: KeyValue
    ) -> None:
        await bucket.put("p.hint.t", b"0")
        assert await KvWakeHints(_Racing(bucket), "p", attempts=5).provide("t", 2) is False  # type: ignore[arg-type]
        assert await KvWakeHints(bucket, "p").consume("t") is True, "no budget tracked means wake"


class TestBadInput:
    @pytest.mark.parametrize(
        ("url", "names"),
        [
            ("nats://127.0.0.1:99999", "port"),
            ("nats://127.0.0.1:4222/db", "path"),
            ("nats://127.0.0.1:4222?kv_buckt=x", "kv_buckt"),
            ("nats://127.0.0.1:4222?prefix=a%20b", "prefix"),
            ("nats://127.0.0.1:4222?prefix=a.*", "prefix"),
            ("nats://127.0.0.1:4222?prefix=a..b", "prefix"),
            ("nats://127.0.0.1:4222?kv_bucket=a.b", "kv_bucket"),
            ("nats://127.0.0.1:4222?kv_create=true", "kv_create needs kv_bucket"),
            ("nats://127.0.0.1:4222?kv_bucket=x&kv_create=maybe", "kv_create"),
            ("nats://127.0.0.1:4222?kv_bucket=x&kv_ttl=0", "kv_ttl"),
            ("nats+ws://127.0.0.1:4222", "driver"),
            ("redis://127.0.0.1:6379/0", "not a NATS URL"),
        ],
    )
    def test_malformed_url_raises_invalid_url_naming_the_part(self, url: str, names: str) -> None:
        with pytest.raises(InvalidURLError, match=names):
            parse_url(url)

    def test_url_query_sets_options(self) -> None:
        server, options = parse_url(
            "nats://u:pw@mq:4223?prefix=app.jobs&kv_bucket=hints&kv_create=true&kv_ttl=30&connect_attempts=3"
        )
        assert server.render(hide_password=False) == "nats://u:pw@mq:4223"
        assert options.prefix == "app.jobs"
        assert options.kv_bucket == "hints"
        assert options.kv_create is True
        assert options.kv_ttl == timedelta(seconds=30)
        assert options.connect_attempts == 3
        assert options.subject_scheduled == "app.jobs.sched"

    @pytest.mark.parametrize("prefix", ["", "a b", "a.*", "a.>", ".a", "a.", "a..b", "a" * 101, "ü"])
    def test_prefix_illegal_in_a_subject_is_rejected(self, prefix: str) -> None:
        with pytest.raises(InvalidArgumentError, match="prefix"):
            NatsNotifyOptions(prefix=prefix)

    async def test_unreachable_nats_at_start_names_host_and_port(self) -> None:
        port = _closed_port()
        with pytest.raises(BackendUnreachableError, match=f"127.0.0.1:{port}.*2 attempt"):
            await NatsNotifyAdapter.connect(
                f"nats://u:hunter2@127.0.0.1:{port}?connect_attempts=2&connect_retry_delay=0.01"
            )

    async def test_unreachable_error_never_shows_the_password(self) -> None:
        with pytest.raises(BackendUnreachableError) as caught:
            await NatsNotifyAdapter.connect(f"nats://user:hunter2@127.0.0.1:{_closed_port()}")
        assert "hunter2" not in str(caught.value)

    async def test_kv_bucket_on_a_server_without_jetstream_says_what_to_change(
        self, private_nats: Any
    ) -> None:
        private_nats.kill()
        private_nats.jetstream = False
        private_nats.start()
        with pytest.raises(InvalidArgumentError, match="JetStream is not enabled"):
            await NatsNotifyAdapter.connect(private_nats.url, options=NatsNotifyOptions(kv_bucket="hints"))

    @pytest.mark.parametrize("value", ["", "x" * (MAX_PAYLOAD_BYTES + 1), "é" * (MAX_PAYLOAD_BYTES // 2 + 1)])
    async def test_overlong_or_empty_payload_raises_invalid_argument(
        self, adapter: NatsNotifyAdapter, value: str
    ) -> None:
        with pytest.raises(InvalidArgumentError, match="type name"):
            await adapter.publish_job_scheduled(value)
        with pytest.raises(InvalidArgumentError, match="job id"):
            await adapter.listen_job_ownership_lost(value, lambda _: None)
        with pytest.raises(InvalidArgumentError, match="type name"):
            await adapter.provide_wake_hint(value, 1)

    async def test_payload_at_the_limit_is_delivered_and_hinted(self, adapter: NatsNotifyAdapter) -> None:
        name = "é" * (MAX_PAYLOAD_BYTES // 2)
        got: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        await adapter.listen_job_scheduled([name], got.set_result)
        await adapter.publish_job_scheduled(name)
        assert await asyncio.wait_for(got, 5) == name
        await adapter.provide_wake_hint(name, 1)
        assert [await adapter.consume_wake_hint(name) for _ in range(2)] == [True, False]

    @pytest.mark.parametrize("count", [-1, 1.5, True, "2"])
    async def test_invalid_hint_count_is_rejected(self, adapter: NatsNotifyAdapter, count: object) -> None:
        with pytest.raises(InvalidArgumentError, match="count"):
            await adapter.provide_wake_hint("t", count)  # type: ignore[arg-type]

    async def test_closed_adapter_rejects_calls(self, adapter: NatsNotifyAdapter) -> None:
        await adapter.close()
        with pytest.raises(AdapterClosedError):
            await adapter.consume_wake_hint("t")


class TestApplicationConnection:
    async def test_from_connection_leaves_the_applications_connection_open(
        self, raw: Any, unique_prefix: str
    ) -> None:
        adapter = await NatsNotifyAdapter.from_connection(
            raw, options=NatsNotifyOptions(prefix=unique_prefix)
        )
        got: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        await adapter.listen_chain_completed("c", got.set_result)
        await adapter.publish_chain_completed("c")
        assert await asyncio.wait_for(got, 5) == "c"
        await adapter.close()
        assert raw.is_connected


class TestPlugin:
    def test_entry_point_declares_nats_for_notify(self) -> None:
        spec = get_registry().lookup("nats", "notify")
        assert spec.distribution == "jobchain-nats"
        assert spec.factory == "jobchain_nats.notify:open_notify_adapter"

    def test_plugin_module_imports_no_driver(self) -> None:
        code = "import sys, jobchain_nats.plugin; assert 'nats' not in sys.modules, 'nats imported'"
        subprocess.run([sys.executable, "-c", code], check=True)

    async def test_notify_url_opens_the_adapter_through_the_registry(
        self, nats_url: str, unique_prefix: str, kv_bucket: str
    ) -> None:
        adapter = await open_notify(f"{nats_url}?prefix={unique_prefix}&kv_bucket={kv_bucket}&kv_create=true")
        try:
            assert isinstance(adapter, NatsNotifyAdapter)
            assert adapter.capabilities == frozenset({Capability.WAKE_HINTS})
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
