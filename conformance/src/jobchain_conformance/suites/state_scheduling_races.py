"""Claim-time rules against transactions that read first, and against claims made together.

A backend that decides on a snapshot taken when its transaction first read (``REPEATABLE
READ``, or a consistent read beside locking ones) counts the running jobs, the rate window,
the pause or a key's last chain as they were at that read, not as the transactions that
committed since left them. A backend whose claims of a limited type do not serialize lets
two claims each see room. Neither shows when every transaction's first statement is its
claim, which is how the ``overlap`` cases of ``state_scheduling_limits`` run. Two shapes here:

* *committed since the read*: a transaction opens and lists the pending jobs; another
  transaction claims (pauses, creates) and commits; then the first one acts, and must see
  what committed;
* *released together*: several transactions open and read, then all act at once; each one
  commits as soon as its call has returned, which lets a call waiting for it go on; together
  they never break the rule.

Both need ``CONCURRENT_TRANSACTIONS``: a single-writer backend never has two open. Deadlines
here only fail a case (a deadlock, a lost wake-up); no step waits for time to pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Generic, TypeVar

import pytest

from jobchain.contracts import Capability, JobsCreate, JobsList, StateAdapter, StateTx
from jobchain.contracts.state import JobCreated
from jobchain.entities import JobStatus, RateLimit
from jobchain_conformance.capabilities import requires
from jobchain_conformance.helpers import TYPE, create_one, get_job, ids, new_job, pause
from jobchain_conformance.suites.state_scheduling_limits import claim, max_running, pending, rate
from jobchain_conformance.suites.state_scheduling_support import DEADLINE, jobs_in

T = TypeVar("T")

SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)
KEY = "tenant-7"
Act = Callable[[StateTx], Awaitable[T]]


async def first_read(tx: StateTx) -> None:
    """What a transaction does before it acts: list the pending jobs (a snapshot is taken here)."""
    await tx.jobs_list(JobsList(statuses=[JobStatus.PENDING.value], limit=10))


@dataclass(slots=True)
class _Party(Generic[T]):
    """One of the transactions released together, and the points it has reached."""

    act: Act[T]
    read: asyncio.Event = field(default_factory=asyncio.Event)
    go: asyncio.Event = field(default_factory=asyncio.Event)
    returned: asyncio.Event = field(default_factory=asyncio.Event)
    commit: asyncio.Event = field(default_factory=asyncio.Event)
    result: list[T] = field(default_factory=list)


async def _take_part(adapter: StateAdapter, party: _Party[T]) -> None:
    async with adapter.transaction() as tx:
        await first_read(tx)
        party.read.set()
        await party.go.wait()
        party.result.append(await party.act(tx))
        party.returned.set()
        await party.commit.wait()


async def _next(events: Sequence[asyncio.Event], tasks: Sequence[asyncio.Task[None]]) -> None:
    """Wait until one of ``events`` is set; a transaction that fails first surfaces its error."""
    waiters = [asyncio.create_task(event.wait()) for event in events]
    try:
        await asyncio.wait({*waiters, *tasks}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    for task in tasks:
        if task.done():
            task.result()  # a party ends only once told to commit: this one failed
    assert any(event.is_set() for event in events)


async def together(adapter: StateAdapter, acts: Sequence[Act[T]]) -> list[T]:
    """Open one transaction per act, let each read, then release every act at once; commit
    each transaction once its act has returned. The acts' results, in the order given."""
    parties = [_Party(act) for act in acts]
    tasks = [asyncio.create_task(_take_part(adapter, party)) for party in parties]
    try:
        async with asyncio.timeout(DEADLINE):
            for party in parties:
                await _next([party.read], tasks)
            for party in parties:
                party.go.set()
            waiting = list(range(len(parties)))
            while waiting:
                await _next([parties[n].returned for n in waiting], [tasks[n] for n in waiting])
                for n in [n for n in waiting if parties[n].returned.is_set()]:
                    parties[n].commit.set()
                    await tasks[n]
                    waiting.remove(n)
    except TimeoutError:
        pytest.fail(f"transactions released together did not all commit within {DEADLINE} s (deadlock?)")
    finally:
        for task in tasks:
            task.cancel()  # only the ones still running: a failed case leaves nothing behind
        await asyncio.gather(*tasks, return_exceptions=True)
    return [party.result[0] for party in parties]


async def _keyed(tx: StateTx, *, now: datetime) -> JobCreated:
    (created,) = await tx.jobs_create(JobsCreate(jobs=[new_job(ordering_key=KEY)], now=now))
    return created


class ClaimRaceTests:
    """Claims, pauses and keyed creations beside transactions that read first or act together."""

    @requires(Capability.CONCURRENT_TRANSACTIONS)
    async def test_a_claim_counts_the_jobs_claimed_since_its_transaction_read(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await pending(state_adapter, 3, now=now)
        limits = max_running(1)
        async with asyncio.timeout(DEADLINE), state_adapter.transaction() as tx:
            await first_read(tx)
            async with state_adapter.transaction() as other:
                elsewhere = await other.jobs_acquire(claim(now + SECOND, limits, worker_id="elsewhere"))
            mine = await tx.jobs_acquire(claim(now + SECOND, limits))
        assert len(elsewhere.jobs) == 1
        assert mine.jobs == [], (
            "a claim counted the running jobs as its transaction first read them: "
            f"{1 + len(mine.jobs)} jobs running for max_running=1"
        )
        assert len(await jobs_in(state_adapter, status=JobStatus.RUNNING)) == 1

    @requires(Capability.CONCURRENT_TRANSACTIONS)
    async def test_a_claim_counts_the_rate_window_as_claims_since_its_read_left_it(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        window = RateLimit(limit=2, per=MINUTE).window_start(now)
        await pending(state_adapter, 5, now=window - MINUTE)
        at = window + SECOND
        async with asyncio.timeout(DEADLINE), state_adapter.transaction() as tx:
            await first_read(tx)
            async with state_adapter.transaction() as other:
                elsewhere = await other.jobs_acquire(claim(at, rate(2), worker_id="elsewhere"))
            mine = await tx.jobs_acquire(claim(at, rate(2)))
        assert len(elsewhere.jobs) == 2
        assert mine.jobs == [], (
            f"a claim read the rate window as its transaction first saw it: {2 + len(mine.jobs)} "
            "starts in a window of limit 2"
        )

    @requires(Capability.CONCURRENT_TRANSACTIONS)
    async def test_a_pause_committed_since_the_claims_read_holds_the_claim(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await pending(state_adapter, 2, now=now)
        async with asyncio.timeout(DEADLINE), state_adapter.transaction() as tx:
            await first_read(tx)
            await pause(state_adapter, [TYPE], now=now)
            mine = await tx.jobs_acquire(claim(now + SECOND, {}))
        assert mine.jobs == [], "a claim took jobs of a type paused (and committed) before it ran"

    @requires(Capability.CONCURRENT_TRANSACTIONS)
    async def test_a_resume_committed_since_the_claims_read_lets_the_claim_take_jobs(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        started = await pending(state_adapter, 2, now=now)
        await pause(state_adapter, [TYPE], now=now)
        async with asyncio.timeout(DEADLINE), state_adapter.transaction() as tx:
            await first_read(tx)
            await pause(state_adapter, [TYPE], now=now, paused=False)
            mine = await tx.jobs_acquire(claim(now + SECOND, {}))
        assert sorted(ids(mine.jobs)) == sorted(started), "a claim still saw a type resumed before it ran"

    @requires(Capability.CONCURRENT_TRANSACTIONS)
    async def test_a_creation_orders_after_the_chain_of_its_key_committed_since_its_read(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        async with asyncio.timeout(DEADLINE), state_adapter.transaction() as tx:
            await first_read(tx)
            earlier = await create_one(state_adapter, new_job(ordering_key=KEY), now=now)
            mine = await _keyed(tx, now=now + SECOND)
        assert mine.ordered_after == earlier.job.id, (
            "a creation took the key's last chain as its transaction first read it: "
            f"ordered after {mine.ordered_after!r}, not {earlier.job.id!r}"
        )
        assert (await get_job(state_adapter, mine.job.id)).status is JobStatus.BLOCKED

    @requires(Capability.CONCURRENT_TRANSACTIONS)
    async def test_claims_released_together_never_exceed_max_running(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await pending(state_adapter, 10, now=now)
        limits = max_running(3)

        def claimer(worker: int) -> Act[list[str]]:
            async def act(tx: StateTx) -> list[str]:
                params = claim(now + SECOND, limits, limit=2, worker_id=f"w{worker}")
                return ids((await tx.jobs_acquire(params)).jobs)

            return act

        batches = await together(state_adapter, [claimer(worker) for worker in range(4)])
        claimed = [job_id for batch in batches for job_id in batch]
        assert len(claimed) == len(set(claimed)) == 3, f"claims released together took {batches}"
        assert len(await jobs_in(state_adapter, status=JobStatus.RUNNING)) == 3

    @requires(Capability.CONCURRENT_TRANSACTIONS)
    async def test_claims_released_together_share_one_rate_window(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        window = RateLimit(limit=3, per=MINUTE).window_start(now)
        await pending(state_adapter, 10, now=window - MINUTE)

        def claimer(worker: int) -> Act[list[str]]:
            async def act(tx: StateTx) -> list[str]:
                params = claim(window + SECOND, rate(3), limit=2, worker_id=f"w{worker}")
                return ids((await tx.jobs_acquire(params)).jobs)

            return act

        batches = await together(state_adapter, [claimer(worker) for worker in range(4)])
        claimed = [job_id for batch in batches for job_id in batch]
        assert len(claimed) == len(set(claimed)) == 3, f"a window of limit 3 started {batches}"

    @requires(Capability.CONCURRENT_TRANSACTIONS)
    async def test_creations_of_a_key_released_together_line_up(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        def creator(offset: int) -> Act[JobCreated]:
            async def act(tx: StateTx) -> JobCreated:
                return await _keyed(tx, now=now + offset * SECOND)

            return act

        created = await together(state_adapter, [creator(offset) for offset in range(3)])
        after = {item.job.id: item.ordered_after for item in created}
        heads = [job_id for job_id, previous in after.items() if previous is None]
        assert len(heads) == 1, f"{len(heads)} chains of one key start unordered: {after}"
        line, successor = [heads[0]], {previous: job_id for job_id, previous in after.items()}
        while line[-1] in successor:
            line.append(successor[line[-1]])
        assert sorted(line) == sorted(after), f"the chains of one key do not form one line: {after}"
        statuses = [(await get_job(state_adapter, job_id)).status for job_id in line]
        assert statuses == [JobStatus.PENDING, JobStatus.BLOCKED, JobStatus.BLOCKED]
