"""The whole state conformance suite through the synchronous adapter, every call driven.

The suite is written against async adapters; :class:`DrivenAdapter` presents the synchronous
adapter to it with every coroutine run by ``jobchain.sync.drive.drive`` before the suite awaits
the (already finished) result. So each contract method, migrate and close run exactly as
``jobchain.sync`` runs them, and any await that suspended would raise SyncWiringError.

Capabilities that need two transactions to make progress side by side (one waiting for the
other's lock or snapshot) are not declared: a driven call blocks the only thread, so such a case
would wait for itself. The async adapter's run of the suite covers them with the same SQL.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any

import psycopg
import pytest

from jobchain.contracts import StateAdapter, StateTx
from jobchain.contracts.capabilities import Capability
from jobchain.sync.drive import drive
from jobchain_conformance import StateAdapterSuite
from jobchain_postgres import StateOptions
from jobchain_postgres.sync import SyncPostgresStateAdapter

from .conftest import with_query

_SIDE_BY_SIDE = frozenset({Capability.CONCURRENT_TRANSACTIONS, Capability.ROW_LOCKS})

WAITS_FOR_ITSELF = frozenset(
    {
        # One of the case's transactions waits for a lock another of them holds: in one thread
        # the holder never gets to commit (the lock timeout below ends it; LockNotAvailable).
        "test_a_claim_beside_a_rolled_back_claim_gets_the_slot",
        "test_a_claim_beside_an_uncommitted_claim_at_the_limit_gets_nothing",
        "test_a_claim_beside_an_uncommitted_claim_shares_its_rate_window",
        "test_a_creation_beside_a_rolled_back_creation_orders_after_the_committed_chain",
        "test_a_creation_waits_for_an_uncommitted_creation_of_the_key",
        "test_a_rolled_back_claim_gives_its_rate_back",
        "test_batches_sharing_keys_in_another_order_collapse_without_deadlock",
        "test_chain_blocked_by_a_concurrently_completing_chain_is_not_stranded",
        "test_explicit_id_of_a_rolled_back_start_is_free_again",
        "test_explicit_id_taken_by_an_uncommitted_start_raises_once_it_commits",
        "test_locked_chain_get_does_not_observe_an_uncommitted_continuation",
        "test_second_start_creates_its_own_chain_when_the_first_rolls_back",
        "test_second_start_of_a_key_whose_earlier_chain_completed_waits_too",
        "test_second_start_waits_and_returns_the_first_chain_once_it_commits",
    }
)
"""Cases that need two of their transactions to progress side by side; the async adapter's
run of the suite (test_conformance.py) covers them with the same SQL."""


async def _driven(coroutine: Coroutine[Any, Any, Any]) -> Any:
    # Driven when the suite awaits it, so errors surface where the suite expects them.
    return drive(coroutine)


def _driven_callable(method: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        result = method(*args, **kwargs)
        if inspect.iscoroutine(result):
            return _driven(result)
        if isinstance(result, AbstractAsyncContextManager):
            return _DrivenBlock(result)
        return result

    return call


class _Driven:
    """Forwards attributes; calls returning coroutines or ``async with`` blocks are driven."""

    def __init__(self, target: object) -> None:
        self._target = target

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        return _driven_callable(value) if callable(value) else value


class _DrivenBlock:
    def __init__(self, block: AbstractAsyncContextManager[Any]) -> None:
        self._block = block

    async def __aenter__(self) -> Any:
        return _Driven(drive(self._block.__aenter__()))

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return drive(self._block.__aexit__(exc_type, exc, tb))


class DrivenAdapter(_Driven):
    """The synchronous adapter as the async suite sees it (see the module docstring)."""

    def __init__(self, adapter: SyncPostgresStateAdapter) -> None:
        super().__init__(adapter)
        self.capabilities = adapter.capabilities - _SIDE_BY_SIDE
        self.time_precision = adapter.time_precision


async def _poison(tx: StateTx) -> None:
    with contextlib.suppress(psycopg.errors.DivisionByZero):
        await tx.connection.execute("SELECT 1 / 0")  # type: ignore[attr-defined]


class TestSyncPostgresState(StateAdapterSuite):
    @pytest.fixture
    async def state_adapter(self, postgres_url: str, suite_schema: str) -> AsyncIterator[StateAdapter]:
        # A case that waits for another of its own transactions would wait for itself (one
        # thread): a lock timeout makes it fail fast instead of hanging.
        url = with_query(postgres_url, options="-c lock_timeout=3000")
        adapter = SyncPostgresStateAdapter.open_sync(url, StateOptions(schema=suite_schema, pool_min_size=0))
        drive(adapter.migrate())
        driven: Any = DrivenAdapter(adapter)
        yield driven
        drive(adapter.close())

    @pytest.fixture
    def poison_transaction(self) -> object:
        return _poison

    @pytest.fixture(autouse=True)
    def _skip_cases_that_wait_for_themselves(self, request: pytest.FixtureRequest) -> None:
        if getattr(request.node, "originalname", request.node.name) in WAITS_FOR_ITSELF:
            pytest.skip("needs two transactions side by side; one thread would wait for itself")
