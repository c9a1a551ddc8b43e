"""The Redis notify adapter through the conformance suite, exactly as a third party would."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from jobchain.contracts import NotifyAdapter
from jobchain_conformance import NotifyAdapterSuite
from jobchain_redis import RedisNotifyAdapter, RedisNotifyOptions


class TestRedisNotify(NotifyAdapterSuite):
    @pytest.fixture
    async def notify_adapter(self, redis_url: str, unique_prefix: str) -> AsyncIterator[NotifyAdapter]:
        adapter = await RedisNotifyAdapter.connect(
            redis_url, options=RedisNotifyOptions(prefix=unique_prefix)
        )
        yield adapter
        await adapter.close()
