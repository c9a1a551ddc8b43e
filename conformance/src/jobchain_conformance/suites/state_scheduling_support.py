"""Shared arrange helpers of the ``state_scheduling_*`` suite modules."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

import pytest

from jobchain.contracts import JobsList, StateAdapter, StateTx
from jobchain.entities import Job, JobStatus
from jobchain_conformance.suites.state_transactions import RollbackError

T = TypeVar("T")
U = TypeVar("U")

GRACE = 0.3
"""Seconds the second transaction is given to reach (or wrongly pass) its wait."""
DEADLINE = 30.0
"""Seconds after which a transaction that should end is declared stuck."""

Outcome = Literal["commit", "rollback"]


@dataclass(frozen=True, slots=True)
class Race(Generic[T, U]):
    """What two overlapping transactions returned, and whether the second ended early."""

    first: T
    second: U
    second_ended_while_first_open: bool


async def overlap(
    adapter: StateAdapter,
    first: Callable[[StateTx], Awaitable[T]],
    second: Callable[[StateTx], Awaitable[U]],
    *,
    outcome: Outcome = "commit",
    grace: float = GRACE,
) -> Race[T, U]:
    """T1 runs ``first`` and stays open; T2 runs ``second``; after a grace period T1 ends with
    ``outcome``; both results are returned (T1's even when it rolled back).

    Whether T2 waited is recorded, not asserted: backends that cannot see T1's rows may
    answer at once as long as the answer is right, and single-writer backends always wait.
    A case expecting T2 not to wait passes a long ``grace``: T1 is released as soon as T2
    ends, so only a backend that wrongly waits spends it.
    """
    written, release = asyncio.Event(), asyncio.Event()
    first_result: list[T] = []

    async def t1() -> None:
        async with adapter.transaction() as tx:
            first_result.append(await first(tx))
            written.set()
            await release.wait()
            if outcome == "rollback":
                raise RollbackError

    async def t2() -> U:
        async with adapter.transaction() as tx:
            return await second(tx)

    holder = asyncio.create_task(t1())
    contender: asyncio.Task[U] | None = None
    try:
        waiting = asyncio.create_task(written.wait())
        await asyncio.wait({holder, waiting}, timeout=DEADLINE, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if holder.done():
            holder.result()  # surfaces the first transaction's own error
        assert written.is_set(), f"the first transaction did not write within {DEADLINE} s"
        contender = asyncio.create_task(t2())
        done, _ = await asyncio.wait({contender}, timeout=grace)
        early = contender in done
        release.set()
        with suppress(RollbackError):
            await asyncio.wait_for(holder, DEADLINE)
        try:
            answer = await asyncio.wait_for(contender, DEADLINE)
        except TimeoutError:
            pytest.fail(f"the second transaction still waits {DEADLINE} s after the first one ended")
    finally:
        release.set()
        for task in (holder, contender):
            if task is not None and not task.done():
                task.cancel()
    return Race(first=first_result[0], second=answer, second_ended_while_first_open=early)


async def jobs_in(adapter: StateAdapter, *, status: JobStatus, type_name: str | None = None) -> list[Job]:
    """Every job in ``status`` (of ``type_name`` if given), committed state."""
    params = JobsList(
        statuses=[status.value], type_names=[type_name] if type_name else [], order="asc", limit=500
    )
    async with adapter.transaction(read_only=True) as tx:
        return (await tx.jobs_list(params)).items
