"""Client + worker over the Redis notify adapter, paired with the in-process state adapter.

The integration suite runs through the pytest plugin exactly as a third party would. One pair
is enough for a notify backend: the in-process state runs every case (it can poison a
transaction, so the resilience cases run too), and a second state under the same notify
adapter would repeat the notify code paths while testing a state backend that its own
package already runs through the suite.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from jobchain.contracts import NotifyAdapter, StateAdapter
from jobchain.memory.state import MemoryStateAdapter, poison_memory_transaction
from jobchain_conformance import IntegrationSuite
from jobchain_conformance.suites._base import PoisonTransaction
from jobchain_redis import RedisNotifyAdapter, RedisNotifyOptions


class _RedisNotify:
    @pytest.fixture
    async def notify_adapter(self, redis_url: str, unique_prefix: str) -> AsyncIterator[NotifyAdapter]:
        adapter = await RedisNotifyAdapter.connect(
            redis_url, options=RedisNotifyOptions(prefix=unique_prefix)
        )
        yield adapter
        await adapter.close()


class TestRedisNotifyWithMemoryState(_RedisNotify, IntegrationSuite):
    @pytest.fixture
    async def state_adapter(self) -> AsyncIterator[StateAdapter]:
        adapter = MemoryStateAdapter()
        yield adapter
        await adapter.close()

    @pytest.fixture
    def poison_transaction(self) -> PoisonTransaction | None:
        return poison_memory_transaction
