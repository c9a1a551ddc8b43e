"""The memory adapters through the conformance suites, exactly as a third-party backend would."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from jobchain.contracts import NotifyAdapter, StateAdapter
from jobchain.memory.notify import MemoryNotifyAdapter
from jobchain.memory.state import MemoryStateAdapter, poison_memory_transaction
from jobchain_conformance import NotifyAdapterSuite, StateAdapterSuite
from jobchain_conformance.suites._base import PoisonTransaction


class TestMemoryState(StateAdapterSuite):
    @pytest.fixture
    async def state_adapter(self) -> AsyncIterator[StateAdapter]:
        adapter = MemoryStateAdapter()
        yield adapter
        await adapter.close()

    @pytest.fixture
    def poison_transaction(self) -> PoisonTransaction | None:
        return poison_memory_transaction


class TestMemoryNotify(NotifyAdapterSuite):
    @pytest.fixture
    async def notify_adapter(self) -> AsyncIterator[NotifyAdapter]:
        adapter = MemoryNotifyAdapter()
        yield adapter
        await adapter.close()
