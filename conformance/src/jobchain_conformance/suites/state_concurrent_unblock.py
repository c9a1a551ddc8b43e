"""Concurrent unblocking: a job's last two blocker chains, completed in two transactions open
at the same time, release it exactly once.

An adapter that decides on a snapshot taken when the transaction began (REPEATABLE READ)
fails here: each completion still sees the other blocker open, neither releases the
dependent, and it stays ``blocked`` forever. A correct adapter serializes the two decisions
(a row lock on the dependent, a counter updated under it) or lets the second see the first.

How a case runs, with failure deadlines only (no step waits for a time to pass):

1. Both transactions open and read the dependent (``blocked``). Adapters that take one
   snapshot per transaction take it here, before either completion.
2. The first transaction completes its blocker chain's last job; its call returns.
3. The second transaction starts its completion. The case goes on once that call has
   suspended: it has run, or waits (a row-locking adapter makes it wait for the first
   transaction), or has at least sent its statement to a server.
4. Commits: if the second completion already returned, the second transaction commits first
   (an order only adapters that do not wait can produce); otherwise the first commits, which
   lets the second completion finish, and then the second commits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import pytest

from jobchain.contracts import (
    Capability,
    CompletesJobsInBatches,
    JobComplete,
    JobCompleted,
    JobGet,
    StateAdapter,
    StateTx,
)
from jobchain.entities import Job, JobStatus
from jobchain_conformance.capabilities import requires
from jobchain_conformance.helpers import (
    WORKER,
    acquire,
    complete,
    continue_chain,
    get_job,
    ids,
    start,
)

DEADLINE = 30.0
"""Seconds after which a case is declared stuck (a deadlock or a lost wake-up): failure only."""
BLOCKER = "blocker"
DEPENDENT = "dependent"
LONE = "lone"

Completion = Callable[[StateTx], Awaitable[list[JobCompleted]]]
ORDERS = pytest.mark.parametrize(
    "first",
    [
        pytest.param(0, id="declared-first-completes-first"),
        pytest.param(1, id="declared-last-completes-first"),
    ],
)


@dataclass(frozen=True, slots=True)
class Scene:
    """A dependent blocked by two chains whose last jobs run under WORKER's lease."""

    dependent: Job
    lasts: tuple[Job, Job]  # the running last job of each blocker chain, in declared order
    lones: tuple[Job, Job]  # unrelated pending jobs, completed alongside in the group cases


async def _scene(adapter: StateAdapter, now: datetime) -> Scene:
    # Chain one has a continuation (its root completes first without releasing anything); chain
    # two is a single job. The dependent waits for both.
    one = await start(adapter, now=now, type_name=BLOCKER)
    step = await continue_chain(adapter, one, now=now)
    two = await start(adapter, now=now, type_name=BLOCKER)
    dependent = await start(adapter, now=now, type_name=DEPENDENT, blocker_chain_ids=[one.id, two.id])
    assert dependent.status is JobStatus.BLOCKED
    assert (await complete(adapter, one.id, now=now)).unblocked_jobs == []
    running = {job.id: job for job in (await acquire(adapter, now=now, type_names=[BLOCKER], limit=2)).jobs}
    assert sorted(running) == sorted([step.id, two.id]), "could not claim both blockers' last jobs"
    lones = (await start(adapter, now=now, type_name=LONE), await start(adapter, now=now, type_name=LONE))
    return Scene(dependent=dependent, lasts=(running[step.id], running[two.id]), lones=lones)


def _completion_of(job: Job, now: datetime) -> JobComplete:
    return JobComplete(job_id=job.id, worker_id=WORKER, lease_generation=job.lease_generation, now=now)


def _alone(job: Job, now: datetime) -> Completion:
    async def run(tx: StateTx) -> list[JobCompleted]:
        return [await tx.job_complete(_completion_of(job, now))]

    return run


def _in_group(job: Job, lone: Job, now: datetime) -> Completion:
    async def run(tx: StateTx) -> list[JobCompleted]:
        assert isinstance(tx, CompletesJobsInBatches)
        results = await tx.jobs_complete([_completion_of(job, now), JobComplete(job_id=lone.id, now=now)])
        refusals = [result for result in results if not isinstance(result, JobCompleted)]
        assert not refusals, f"jobs_complete refused a completion it owns: {refusals!r}"
        return [result for result in results if isinstance(result, JobCompleted)]

    return run


async def _skip_unless_batches(adapter: StateAdapter) -> None:
    async with adapter.transaction() as tx:
        batches = isinstance(tx, CompletesJobsInBatches)
    if not batches:
        pytest.skip("adapter transactions do not offer jobs_complete (CompletesJobsInBatches)")


@dataclass(slots=True)
class _Side:
    """One of the two completing transactions and the points it has reached."""

    complete: Completion
    read: asyncio.Event = field(default_factory=asyncio.Event)
    go: asyncio.Event = field(default_factory=asyncio.Event)
    issued: asyncio.Event = field(default_factory=asyncio.Event)
    returned: asyncio.Event = field(default_factory=asyncio.Event)
    commit: asyncio.Event = field(default_factory=asyncio.Event)
    results: list[JobCompleted] = field(default_factory=list)


async def _run_side(adapter: StateAdapter, side: _Side, dependent: Job) -> None:
    async with adapter.transaction() as tx:
        seen = await tx.job_get(JobGet(job_id=dependent.id))
        assert seen is not None
        assert seen.status is JobStatus.BLOCKED
        side.read.set()
        await side.go.wait()
        side.issued.set()  # no await between this and the call: the call is under way when seen
        side.results = await side.complete(tx)
        side.returned.set()
        await side.commit.wait()


async def _reached(event: asyncio.Event, tasks: Sequence[asyncio.Task[None]], what: str) -> None:
    """Wait for ``event``; a transaction that fails or ends first surfaces its own error."""
    waiter = asyncio.create_task(event.wait())
    try:
        done, _ = await asyncio.wait({waiter, *tasks}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    for task in tasks:
        if task in done:
            task.result()
    assert event.is_set(), f"a transaction ended before {what}"


async def _race(
    adapter: StateAdapter, dependent: Job, first: Completion, second: Completion
) -> list[JobCompleted]:
    """Run ``first`` and ``second`` in two transactions open at once (see the module docstring);
    return every completion result, first transaction's first."""
    sides = (_Side(first), _Side(second))
    tasks = [asyncio.create_task(_run_side(adapter, side, dependent)) for side in sides]
    try:
        async with asyncio.timeout(DEADLINE):
            for side in sides:
                await _reached(side.read, tasks, "both transactions had read the dependent")
            sides[0].go.set()
            await _reached(sides[0].returned, tasks, "the first completion returned")
            sides[1].go.set()
            await _reached(sides[1].issued, tasks, "the second completion started")
            # The second completion has run, or waits for the first transaction to end.
            order = (1, 0) if sides[1].returned.is_set() else (0, 1)
            for position in order:
                sides[position].commit.set()
                await tasks[position]
    except TimeoutError:
        pytest.fail(f"the two completing transactions did not both commit within {DEADLINE} s (deadlock?)")
    finally:
        for task in tasks:
            task.cancel()  # only the ones still running: a failed case leaves nothing behind
        await asyncio.gather(*tasks, return_exceptions=True)
    return [*sides[0].results, *sides[1].results]


async def _assert_released_once(
    adapter: StateAdapter, scene: Scene, results: list[JobCompleted], now: datetime
) -> None:
    for last in scene.lasts:
        (done,) = [result for result in results if result.job.id == last.id]
        assert done.job.status is JobStatus.COMPLETED
        assert done.chain_completed is True, "completing a blocker chain's last job completes the chain"
    stored = await get_job(adapter, scene.dependent.id)
    assert stored.status is JobStatus.PENDING, (
        f"the dependent is {stored.status.value} after both of its blocker chains completed in "
        "concurrent transactions (a completion decided with the other one's chain still open)"
    )
    reported = [job for result in results for job in result.unblocked_jobs if job.id == scene.dependent.id]
    assert len(reported) == 1, f"the dependent was reported unblocked {len(reported)} times, not once"
    assert reported[0].status is JobStatus.PENDING
    claimed = await acquire(adapter, now=now, type_names=[DEPENDENT], limit=2)
    assert ids(claimed.jobs) == [scene.dependent.id]
    assert (await acquire(adapter, now=now, type_names=[DEPENDENT], limit=2)).jobs == []


class ConcurrentUnblockTests:
    """job_complete / jobs_complete: the last two blockers of a job, completed concurrently."""

    @requires(Capability.CONCURRENT_TRANSACTIONS)
    @ORDERS
    async def test_last_two_blockers_completed_in_concurrent_transactions_release_the_dependent_once(
        self, state_adapter: StateAdapter, now: datetime, first: int
    ) -> None:
        scene = await _scene(state_adapter, now)
        completions = [_alone(last, now) for last in scene.lasts]
        results = await _race(state_adapter, scene.dependent, completions[first], completions[1 - first])
        await _assert_released_once(state_adapter, scene, results, now)

    @requires(Capability.CONCURRENT_TRANSACTIONS)
    @ORDERS
    async def test_last_two_blockers_completed_by_concurrent_groups_release_the_dependent_once(
        self, state_adapter: StateAdapter, now: datetime, first: int
    ) -> None:
        await _skip_unless_batches(state_adapter)
        scene = await _scene(state_adapter, now)
        groups = [_in_group(last, lone, now) for last, lone in zip(scene.lasts, scene.lones, strict=True)]
        results = await _race(state_adapter, scene.dependent, groups[first], groups[1 - first])
        await _assert_released_once(state_adapter, scene, results, now)
        for lone in scene.lones:
            assert (await get_job(state_adapter, lone.id)).status is JobStatus.COMPLETED
