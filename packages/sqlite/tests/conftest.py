"""Fixtures shared by the SQLite tests: a fresh, migrated adapter on a temporary file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobchain_sqlite import SqliteOptions, SqliteStateAdapter


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "jobchain.db"


@pytest.fixture
async def adapter(db_path: Path) -> AsyncIterator[SqliteStateAdapter]:
    state = SqliteStateAdapter(SqliteOptions(path=str(db_path)))
    await state.migrate()
    yield state
    await state.close()
