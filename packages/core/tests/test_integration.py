"""Client + worker over the in-process adapters, through the integration suite.

Core runs the suite for (memory state, memory notify) and (memory state, no notify): the
second pair proves every behaviour also holds when workers and waiters only poll.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from jobchain.contracts import NotifyAdapter, StateAdapter
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter, poison_memory_transaction
from jobchain_conformance import IntegrationSuite
from jobchain_conformance.suites._base import PoisonTransaction


class _MemoryState:
    @pytest.fixture
    async def state_adapter(self) -> AsyncIterator[StateAdapter]:
        adapter = MemoryStateAdapter()
        yield adapter
        await adapter.close()

    @pytest.fixture
    def poison_transaction(self) -> PoisonTransaction | None:
        return poison_memory_transaction


class TestMemoryMemory(_MemoryState, IntegrationSuite):
    @pytest.fixture
    async def notify_adapter(self) -> AsyncIterator[NotifyAdapter | None]:
        adapter = MemoryNotifyAdapter()
        yield adapter
        await adapter.close()


class TestMemoryNone(_MemoryState, IntegrationSuite):
    @pytest.fixture
    async def notify_adapter(self) -> AsyncIterator[NotifyAdapter | None]:
        yield None
