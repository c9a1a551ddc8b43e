"""The SQLite adapter through the conformance suite, exactly as a third-party backend would."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobchain.contracts import StateAdapter
from jobchain_conformance import StateAdapterSuite
from jobchain_sqlite import SqliteOptions, SqliteStateAdapter


class TestSqliteState(StateAdapterSuite):
    @pytest.fixture
    async def state_adapter(self, tmp_path: Path) -> AsyncIterator[StateAdapter]:
        adapter = SqliteStateAdapter(SqliteOptions(path=str(tmp_path / "conformance.db")))
        await adapter.migrate()
        yield adapter
        await adapter.close()
