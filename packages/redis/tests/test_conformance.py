"""The Redis notify adapter through the conformance suite, exactly as a third party would.

Each test gets its own key/channel prefix; the second adapter of a test shares it. The
interruption hook kills the test's connections server side (``CLIENT KILL``) on the shared
Redis, which stays up: only this test's clients, found by their names, are cut.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from jobchain.contracts import NotifyAdapter
from jobchain_conformance import NotifyAdapterSuite
from jobchain_conformance.suites._base import InterruptConnection, NotifyAdapterFactory
from jobchain_redis import RedisNotifyAdapter, RedisNotifyOptions

from .conftest import kill_clients


class TestRedisNotify(NotifyAdapterSuite):
    @pytest.fixture
    def notify_adapter_factory(self, redis_url: str, unique_prefix: str) -> NotifyAdapterFactory:
        async def open_adapter() -> NotifyAdapter:
            return await RedisNotifyAdapter.connect(
                redis_url, options=RedisNotifyOptions(prefix=unique_prefix)
            )

        return open_adapter

    @pytest.fixture
    async def notify_adapter(
        self, notify_adapter_factory: NotifyAdapterFactory
    ) -> AsyncIterator[NotifyAdapter]:
        adapter = await notify_adapter_factory()
        yield adapter
        await adapter.close()

    @pytest.fixture
    def interrupt_connection(self, redis_url: str) -> InterruptConnection:
        async def interrupt(adapter: NotifyAdapter) -> None:
            assert isinstance(adapter, RedisNotifyAdapter)
            # The adapter names its connections jobchain:<prefix>:commands|subscriptions; every
            # adapter of the test shares the prefix, so all of them are cut at once.
            killed = await kill_clients(redis_url, name_prefix=f"jobchain:{adapter.options.prefix}:")
            assert killed, "the adapter has no named connection to kill"

        return interrupt
