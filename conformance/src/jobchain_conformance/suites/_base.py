"""Abstract fixtures every suite class builds on. Adopters override them in their Test… class."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest

from jobchain.contracts import NotifyAdapter, StateAdapter, StateTx
from jobchain_conformance.capabilities import skip_unless

PoisonTransaction = Callable[[StateTx], Awaitable[None]]

NotifyAdapterFactory = Callable[[], Awaitable[NotifyAdapter]]
"""Opens one more notify adapter on the same broker and prefix as ``notify_adapter``."""

InterruptConnection = Callable[[NotifyAdapter], Awaitable[None]]
"""Breaks the given adapter's connection(s) to its broker from the server side."""


def base_time() -> datetime:
    """A fixed, whole-millisecond UTC time a little in the past, so every precision round-trips."""
    now = datetime.now(UTC).replace(microsecond=0)
    return now - timedelta(hours=1)


class StateSuiteBase:
    """Fixtures of the state-adapter suite.

    Override ``state_adapter`` (an async fixture yielding a fresh, empty, migrated adapter).
    Optionally override ``poison_transaction`` to return an async callable that makes the
    given transaction fail every later statement until a savepoint rolls back.
    """

    pytestmark = [pytest.mark.conformance]

    @pytest.fixture
    async def state_adapter(self) -> AsyncIterator[StateAdapter]:
        raise NotImplementedError("override state_adapter in your Test… class")
        yield  # pragma: no cover

    @pytest.fixture
    def poison_transaction(self) -> PoisonTransaction | None:
        return None

    @pytest.fixture
    def now(self) -> datetime:
        return base_time()

    @pytest.fixture(autouse=True)
    def _skip_on_capabilities(self, request: pytest.FixtureRequest) -> None:
        # Autouse only inside suite classes; it never reaches tests outside them.
        if request.node.get_closest_marker("requires") is None:
            return
        adapter = request.getfixturevalue("state_adapter")
        skip_unless(request, adapter.capabilities)


class NotifySuiteBase:
    """Fixtures of the notify-adapter suite.

    Override ``notify_adapter`` (a fresh adapter with its own prefix per test) and
    ``notify_adapter_factory`` (an async callable opening another adapter, over another
    connection, on the same broker and prefix as ``notify_adapter``: a second process's).
    Optionally override ``interrupt_connection`` to return an async callable that breaks an
    adapter's connection(s) from the server side; the reconnection cases skip without it.
    """

    pytestmark = [pytest.mark.conformance]

    @pytest.fixture
    async def notify_adapter(self) -> AsyncIterator[NotifyAdapter]:
        raise NotImplementedError("override notify_adapter in your Test… class")
        yield  # pragma: no cover

    @pytest.fixture
    def notify_adapter_factory(self) -> NotifyAdapterFactory:
        raise NotImplementedError(
            "override notify_adapter_factory in your Test… class: return an async callable that opens "
            "another adapter on notify_adapter's broker and prefix (its own connection)"
        )

    @pytest.fixture
    async def second_notify_adapter(
        self, notify_adapter: NotifyAdapter, notify_adapter_factory: NotifyAdapterFactory
    ) -> AsyncIterator[NotifyAdapter]:
        """Another adapter on ``notify_adapter``'s broker and prefix, closed after the case."""
        adapter = await notify_adapter_factory()
        yield adapter
        await adapter.close()

    @pytest.fixture
    def interrupt_connection(self) -> InterruptConnection | None:
        return None

    @pytest.fixture(autouse=True)
    def _skip_on_capabilities(self, request: pytest.FixtureRequest) -> None:
        if request.node.get_closest_marker("requires") is None:
            return
        adapter = request.getfixturevalue("notify_adapter")
        skip_unless(request, adapter.capabilities)
