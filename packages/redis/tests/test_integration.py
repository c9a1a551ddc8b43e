"""Client + worker over the Redis notify adapter, paired with the in-process and the SQLite state adapters.

The integration suite runs through the pytest plugin exactly as a third party would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobchain.contracts import NotifyAdapter, StateAdapter
from jobchain.memory.state import MemoryStateAdapter, poison_memory_transaction
from jobchain_conformance import IntegrationSuite
from jobchain_conformance.suites._base import PoisonTransaction
from jobchain_redis import RedisNotifyAdapter, RedisNotifyOptions
from jobchain_sqlite import SqliteOptions, SqliteStateAdapter


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


class TestRedisNotifyWithSqliteState(_RedisNotify, IntegrationSuite):
    @pytest.fixture
    async def state_adapter(self, tmp_path: Path) -> AsyncIterator[StateAdapter]:
        adapter = SqliteStateAdapter(SqliteOptions(path=str(tmp_path / "integration.db")))
        await adapter.migrate()
        yield adapter
        await adapter.close()
