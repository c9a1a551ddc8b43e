"""Client + worker over the SQLite adapter, through the integration suite.

Two pairs, as a third-party backend would run them: (sqlite, memory notify) and (sqlite,
no notify), the second proving every behaviour also holds when workers only poll.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobchain.contracts import NotifyAdapter, StateAdapter
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain_conformance import IntegrationSuite
from jobchain_sqlite import SqliteOptions, SqliteStateAdapter


class _SqliteState:
    @pytest.fixture
    async def state_adapter(self, tmp_path: Path) -> AsyncIterator[StateAdapter]:
        adapter = SqliteStateAdapter(SqliteOptions(path=str(tmp_path / "integration.db")))
        await adapter.migrate()
        yield adapter
        await adapter.close()


class TestSqliteMemoryNotify(_SqliteState, IntegrationSuite):
    @pytest.fixture
    async def notify_adapter(self) -> AsyncIterator[NotifyAdapter | None]:
        adapter = MemoryNotifyAdapter()
        yield adapter
        await adapter.close()


class TestSqliteNoNotify(_SqliteState, IntegrationSuite):
    @pytest.fixture
    async def notify_adapter(self) -> AsyncIterator[NotifyAdapter | None]:
        yield None
