"""Client + worker over the PostgreSQL state adapter, through the integration suite.

Pairs: (postgres, postgres LISTEN/NOTIFY) and (postgres, no notify: workers poll) in the default
claim mode, and (postgres, LISTEN/NOTIFY) in the ``atomic-update`` claim mode. An in-process
notify beside PostgreSQL state would run the same state code as the LISTEN/NOTIFY pair with a
notify no deployment uses, and the polling pair in the second claim mode the same claim
statement as its LISTEN/NOTIFY pair: neither is run. Every test gets its own schema and
channel prefix.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import ClassVar

import pytest

from jobchain.contracts import NotifyAdapter, StateAdapter
from jobchain_conformance import IntegrationSuite
from jobchain_postgres import NotifyOptions, PostgresNotifyAdapter
from jobchain_postgres.options import Claim

from .conftest import open_state

# A worker's pool, the client's, LISTEN and publishing connections: 5-6 at once, 7 in a few
# runs, measured (the suite's multi-worker cases reserve more, see SUITE_NEEDS in conftest.py).
pytestmark = pytest.mark.pg_connections(7)


class _PostgresState:
    claim: ClassVar[Claim] = "skip-locked"

    @pytest.fixture
    async def state_adapter(self, postgres_url: str, suite_schema: str) -> AsyncIterator[StateAdapter]:
        adapter = await open_state(postgres_url, suite_schema, self.claim)
        yield adapter
        await adapter.close()


class _PostgresNotify:
    @pytest.fixture
    async def notify_adapter(
        self, postgres_url: str, channel_prefix: str
    ) -> AsyncIterator[NotifyAdapter | None]:
        adapter = await PostgresNotifyAdapter.open(postgres_url, NotifyOptions(channel_prefix=channel_prefix))
        yield adapter
        await adapter.close()


class _NoNotify:
    @pytest.fixture
    async def notify_adapter(self) -> AsyncIterator[NotifyAdapter | None]:
        yield None


class TestPostgresPostgresNotify(_PostgresNotify, _PostgresState, IntegrationSuite):
    pass


class TestPostgresNoNotify(_NoNotify, _PostgresState, IntegrationSuite):
    pass


class TestPostgresPostgresNotifyAtomicClaim(TestPostgresPostgresNotify):
    claim: ClassVar[Claim] = "atomic-update"
