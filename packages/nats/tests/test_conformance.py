"""The NATS notify adapter through the conformance suite, exactly as a third party would.

Twice: with a JetStream KV bucket (WAKE_HINTS declared) and without one (hints degrade to
"always wake", so the suite skips the budget cases by capability). Each test gets its own
subject prefix; its second adapter shares it. Every adapter connects through a TCP proxy of
its own (``tcp_proxy``), which the interruption hook uses to break that adapter's connection
while the shared nats-server stays up.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from jobchain.contracts import NotifyAdapter
from jobchain.url import BackendURL
from jobchain_conformance import NotifyAdapterSuite
from jobchain_conformance.suites._base import InterruptConnection, NotifyAdapterFactory
from jobchain_nats import NatsNotifyAdapter, NatsNotifyOptions

from .tcp_proxy import TcpProxy


class ProxiedAdapters:
    """Opens adapters, each through a proxy of its own, and breaks one adapter's connection."""

    def __init__(self, nats_url: str) -> None:
        server = BackendURL.parse(nats_url)
        self._host = server.host or "127.0.0.1"
        self._port = server.port or 4222
        self._proxies: list[tuple[NotifyAdapter, TcpProxy]] = []

    async def open(self, options: NatsNotifyOptions) -> NotifyAdapter:
        proxy = TcpProxy(self._host, self._port)
        await proxy.start()
        try:
            adapter = await NatsNotifyAdapter.connect(f"nats://127.0.0.1:{proxy.port}", options=options)
        except BaseException:
            await proxy.close()
            raise
        self._proxies.append((adapter, proxy))
        return adapter

    async def interrupt(self, adapter: NotifyAdapter) -> None:
        [proxy] = [proxy for opened, proxy in self._proxies if opened is adapter]
        assert proxy.drop() > 0, "the adapter has no connection to break"

    async def close(self) -> None:
        for _, proxy in self._proxies:
            await proxy.close()


@pytest.fixture
async def proxied(nats_url: str) -> AsyncIterator[ProxiedAdapters]:
    adapters = ProxiedAdapters(nats_url)
    yield adapters
    await adapters.close()  # after the suite's fixtures closed the adapters


class ProxiedNatsSuite(NotifyAdapterSuite):
    @pytest.fixture
    async def notify_adapter(
        self, notify_adapter_factory: NotifyAdapterFactory
    ) -> AsyncIterator[NotifyAdapter]:
        adapter = await notify_adapter_factory()
        yield adapter
        await adapter.close()

    @pytest.fixture
    def interrupt_connection(self, proxied: ProxiedAdapters) -> InterruptConnection:
        return proxied.interrupt


class TestNatsNotifyWithKvBucket(ProxiedNatsSuite):
    @pytest.fixture
    def notify_adapter_factory(
        self, proxied: ProxiedAdapters, unique_prefix: str, kv_bucket: str
    ) -> NotifyAdapterFactory:
        options = NatsNotifyOptions(prefix=unique_prefix, kv_bucket=kv_bucket, kv_create=True)
        return lambda: proxied.open(options)


class TestNatsNotifyWithoutKvBucket(ProxiedNatsSuite):
    @pytest.fixture
    def notify_adapter_factory(self, proxied: ProxiedAdapters, unique_prefix: str) -> NotifyAdapterFactory:
        options = NatsNotifyOptions(prefix=unique_prefix)
        return lambda: proxied.open(options)
