"""jobchain.sync on memory://: the conformance suite of jobchain's own transactions.

memory:// has no driver connection to join, so only ``SyncFacadeSuite`` applies. Its store is
not thread-safe, so the one case that completes a chain from another thread runs here with
the completion first and the wait second.
"""

from __future__ import annotations

import uuid

import pytest

from jobchain import JobStatus
from jobchain_conformance.suites.sync_facade import SyncFacadeSuite
from jobchain_conformance.suites.sync_facade_support import WAIT_TIMEOUT, Item, SyncEnv


class TestSyncFacadeOnMemory(SyncFacadeSuite):
    @pytest.fixture
    def sync_state_url(self) -> str:
        # A shared name: the client under test and the reading client see one store.
        return f"memory://sync-{uuid.uuid4().hex}"

    def test_await_chain_returns_once_another_thread_completes_the_chain(self, env: SyncEnv) -> None:
        with env.client.transaction() as tx:
            started = env.client.start_chain(tx, env.item, Item(1))

        async def finish(completion: object) -> None:
            await completion.complete(42)  # type: ignore[attr-defined]  # a Completion

        with env.other.transaction() as tx:
            env.other.complete_chain(tx, env.item, started.id, finish)
        chain = env.client.await_chain(started.id, timeout=WAIT_TIMEOUT)
        assert chain.status is JobStatus.COMPLETED
        assert chain.output == 42
