"""The memory adapters through the conformance suites, exactly as a third-party backend would."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from jobchain.contracts import NotifyAdapter, StateAdapter
from jobchain.memory.notify import MemoryNotifyAdapter, MemoryNotifyHub
from jobchain.memory.state import MemoryStateAdapter, poison_memory_transaction
from jobchain_conformance import NotifyAdapterSuite, StateAdapterSuite
from jobchain_conformance.suites._base import InterruptConnection, NotifyAdapterFactory, PoisonTransaction


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
    """Adapters of one test share a hub, as connections to one broker do."""

    @pytest.fixture
    def hub(self) -> MemoryNotifyHub:
        return MemoryNotifyHub()

    @pytest.fixture
    def notify_adapter_factory(self, hub: MemoryNotifyHub) -> NotifyAdapterFactory:
        async def open_adapter() -> NotifyAdapter:
            return MemoryNotifyAdapter(hub=hub)

        return open_adapter

    @pytest.fixture
    async def notify_adapter(
        self, notify_adapter_factory: NotifyAdapterFactory
    ) -> AsyncIterator[NotifyAdapter]:
        adapter = await notify_adapter_factory()
        yield adapter
        await adapter.close()

    @pytest.fixture
    def interrupt_connection(self, hub: MemoryNotifyHub) -> InterruptConnection:
        async def interrupt(adapter: NotifyAdapter) -> None:
            assert isinstance(adapter, MemoryNotifyAdapter)
            hub.interrupt(adapter)

        return interrupt
