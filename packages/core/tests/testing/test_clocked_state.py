"""clocked_state: every operation's missing ``now`` comes from the clock, however the wrapped
object provides its operations (real methods, or a wrapper forwarding through ``__getattr__``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobchain.contracts import JobsAcquire, JobsCreate, NewJob, StateAdapter
from jobchain.entities import new_id
from jobchain.memory.state import MemoryStateAdapter
from jobchain.testing import FrozenClock, clocked_state

START = datetime(2031, 5, 6, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)


class _ForwardingTx:
    """A transaction wrapper that forwards every operation through ``__getattr__``."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _ForwardingState:
    """A state wrapper whose transactions forward through ``__getattr__`` (as test proxies do)."""

    def __init__(self, inner: MemoryStateAdapter) -> None:
        self._inner = inner

    @asynccontextmanager
    async def _transaction(self, **options: Any) -> AsyncIterator[_ForwardingTx]:
        async with self._inner.transaction(**options) as tx:
            yield _ForwardingTx(tx)

    def __getattr__(self, name: str) -> Any:
        if name == "transaction":
            return self._transaction
        return getattr(self._inner, name)


@pytest.mark.parametrize("wrapped", ["adapter", "forwarding wrapper"])
async def test_a_claim_and_a_creation_take_the_clocks_time(wrapped: str) -> None:
    memory = MemoryStateAdapter()
    inner: Any = memory if wrapped == "adapter" else _ForwardingState(memory)
    clock = FrozenClock(START)
    state: StateAdapter = clocked_state(inner, clock)
    job = NewJob(id=new_id(), type_name="t", chain_type_name="t")
    async with state.transaction() as tx:
        created = await tx.jobs_create(JobsCreate(jobs=[job]))
        clock.advance(5)
        claimed = await tx.jobs_acquire(JobsAcquire(type_names=["t"], worker_id="w", lease_for=LEASE))
    assert [c.job.created_at for c in created] == [START]
    assert [j.leased_until for j in claimed.jobs] == [START + timedelta(seconds=5) + LEASE]
    await memory.close()
