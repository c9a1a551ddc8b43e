"""The PostgreSQL adapters through the conformance suites, exactly as a third-party backend would.

The state suite runs whole in the default claim mode, ``skip-locked`` (FOR UPDATE SKIP LOCKED);
``atomic-update`` (the distributed-SQL claim) changes only the claim and reap statements, so it
runs the claim cases (``ClaimStateSuite``: every claim rule, lease, release, concurrent claim
and both models). Each test gets its own schema and channel prefix.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import ClassVar

import psycopg
import pytest

from jobchain.contracts import NotifyAdapter, StateAdapter, StateTx
from jobchain_conformance import ClaimStateSuite, NotifyAdapterSuite, StateAdapterSuite
from jobchain_conformance.suites._base import InterruptConnection, NotifyAdapterFactory
from jobchain_postgres import NotifyOptions, PostgresNotifyAdapter
from jobchain_postgres._tx import PostgresStateTx
from jobchain_postgres.options import Claim

from .conftest import notify_backend_pids, open_state, terminate_backends


async def poison(tx: StateTx) -> None:
    """Make ``tx`` fail every later statement until a savepoint rolls back (PostgreSQL semantics)."""
    assert isinstance(tx, PostgresStateTx)
    with contextlib.suppress(psycopg.errors.DivisionByZero):
        await tx.connection.execute("SELECT 1 / 0")


class _PostgresStateFixtures:
    claim: ClassVar[Claim] = "skip-locked"

    @pytest.fixture
    async def state_adapter(self, postgres_url: str, suite_schema: str) -> AsyncIterator[StateAdapter]:
        adapter = await open_state(postgres_url, suite_schema, self.claim)
        yield adapter
        await adapter.close()

    @pytest.fixture
    def poison_transaction(self) -> object:
        return poison


class TestPostgresState(_PostgresStateFixtures, StateAdapterSuite):
    pass


class TestPostgresStateAtomicClaim(_PostgresStateFixtures, ClaimStateSuite):
    claim: ClassVar[Claim] = "atomic-update"


class TestPostgresNotify(NotifyAdapterSuite):
    @pytest.fixture
    def notify_adapter_factory(self, postgres_url: str, channel_prefix: str) -> NotifyAdapterFactory:
        async def open_adapter() -> NotifyAdapter:
            return await PostgresNotifyAdapter.open(
                postgres_url, NotifyOptions(channel_prefix=channel_prefix)
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
    def interrupt_connection(self, postgres_url: str) -> InterruptConnection:
        async def interrupt(adapter: NotifyAdapter) -> None:
            assert isinstance(adapter, PostgresNotifyAdapter)
            await terminate_backends(postgres_url, notify_backend_pids(adapter))

        return interrupt
