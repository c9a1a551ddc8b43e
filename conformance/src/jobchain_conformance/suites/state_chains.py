"""Chains and blockers: jobs_create with blockers, chain_get, job_get, job_blockers_get, unblocking."""

from __future__ import annotations

from datetime import datetime, timedelta

from jobchain.contracts import (
    Capability,
    ChainGet,
    JobComplete,
    JobCreated,
    JobGet,
    JobsCreate,
    StateAdapter,
    StateTx,
)
from jobchain.entities import Chain, Job, JobStatus, Schedule, new_id
from jobchain.errors import ChainNotFoundError
from jobchain_conformance.capabilities import requires
from jobchain_conformance.helpers import (
    acquire,
    assert_time,
    blockers_of,
    complete,
    continue_chain,
    create,
    create_one,
    find_chain,
    find_job,
    get_chain,
    get_job,
    ids,
    new_job,
    read_while_locked,
    refused,
    start,
    start_completed,
)


class JobsCreateBlockersTests:
    """jobs_create with ``blocker_chain_ids``: blocked or pending from the start."""

    async def test_job_with_an_incomplete_blocker_is_created_blocked(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        created = await create_one(state_adapter, new_job(blocker_chain_ids=[blocker.id]), now=now)
        assert created.job.status is JobStatus.BLOCKED
        assert created.incomplete_blocker_chain_ids == (blocker.id,)
        assert (await get_job(state_adapter, created.job.id)).status is JobStatus.BLOCKED

    async def test_job_whose_blockers_are_all_complete_is_created_pending(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        done = [await start_completed(state_adapter, now=now, type_name="blocker") for _ in range(2)]
        created = await create_one(state_adapter, new_job(blocker_chain_ids=ids(done)), now=now)
        assert created.job.status is JobStatus.PENDING
        assert created.incomplete_blocker_chain_ids == ()

    async def test_incomplete_blocker_chain_ids_keep_the_declared_order(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = await start(state_adapter, now=now, type_name="blocker")
        second = await start(state_adapter, now=now, type_name="blocker")
        done = await start_completed(state_adapter, now=now, type_name="blocker")
        job = new_job(blocker_chain_ids=[second.id, done.id, first.id])
        created = await create_one(state_adapter, job, now=now)
        assert created.incomplete_blocker_chain_ids == (second.id, first.id)

    async def test_blockers_are_added_to_several_jobs_in_one_batch(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        one = await start(state_adapter, now=now, type_name="blocker")
        two = await start(state_adapter, now=now, type_name="blocker")
        a, b = new_job(blocker_chain_ids=[one.id]), new_job(blocker_chain_ids=[one.id, two.id])
        created = await create(state_adapter, [a, b], now=now)
        assert [c.incomplete_blocker_chain_ids for c in created] == [(one.id,), (one.id, two.id)]
        assert ids(c.last for c in await blockers_of(state_adapter, a.id)) == [one.id]
        assert [c.id for c in await blockers_of(state_adapter, b.id)] == [one.id, two.id]

    async def test_one_batch_mixes_blocked_and_pending_jobs(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        open_chain = await start(state_adapter, now=now, type_name="blocker")
        done = await start_completed(state_adapter, now=now, type_name="blocker")
        batch = [new_job(blocker_chain_ids=[open_chain.id]), new_job(blocker_chain_ids=[done.id]), new_job()]
        created = await create(state_adapter, batch, now=now)
        assert [c.job.status for c in created] == [JobStatus.BLOCKED, JobStatus.PENDING, JobStatus.PENDING]
        assert [c.incomplete_blocker_chain_ids for c in created] == [(open_chain.id,), (), ()]

    async def test_blocker_whose_root_continued_but_last_job_is_open_still_blocks(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now, type_name="blocker")
        await continue_chain(state_adapter, root, now=now)
        await complete(state_adapter, root.id, now=now)
        created = await create_one(state_adapter, new_job(blocker_chain_ids=[root.id]), now=now)
        assert created.job.status is JobStatus.BLOCKED
        assert created.incomplete_blocker_chain_ids == (root.id,)

    async def test_continuation_with_an_incomplete_blocker_is_created_blocked(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        root = await start(state_adapter, now=now)
        step = await continue_chain(state_adapter, root, now=now, blocker_chain_ids=[blocker.id])
        assert step.status is JobStatus.BLOCKED
        assert [c.id for c in await blockers_of(state_adapter, step.id)] == [blocker.id]

    async def test_unknown_blocker_chain_raises_chain_not_found_and_writes_nothing(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        missing = new_id()
        batch = [new_job(), new_job(blocker_chain_ids=[missing])]

        async def op(tx: StateTx) -> list[JobCreated]:
            return await tx.jobs_create(JobsCreate(jobs=batch, now=now))

        error = await refused(state_adapter, ChainNotFoundError, op)
        assert error.chain_id == missing
        assert [await find_job(state_adapter, job.id) for job in batch] == [None, None]


class ChainGetTests:
    """chain_get: a chain is its root plus its current last job."""

    async def test_lone_root_is_both_root_and_last_of_its_chain(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now, chain_type_name="flow")
        chain = await get_chain(state_adapter, root.id)
        assert (chain.id, chain.type_name) == (root.id, "flow")
        assert chain.root == root
        assert chain.last == root

    async def test_chain_reports_its_root_and_latest_continuation(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now)
        first = await continue_chain(state_adapter, root, now=now)
        second = await continue_chain(state_adapter, first, now=now)
        chain = await get_chain(state_adapter, root.id)
        assert (chain.root.id, chain.last.id) == (root.id, second.id)
        assert chain.last.chain_index == 2

    async def test_chain_status_and_output_come_from_its_last_job(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now)
        step = await continue_chain(state_adapter, root, now=now)
        await complete(state_adapter, root.id, now=now, output="handed off")
        chain = await get_chain(state_adapter, root.id)
        assert (chain.root.status, chain.status, chain.output) == (
            JobStatus.COMPLETED,
            JobStatus.PENDING,
            None,
        )
        await complete(state_adapter, step.id, now=now, output={"result": 7})
        chain = await get_chain(state_adapter, root.id)
        assert (chain.status, chain.output) == (JobStatus.COMPLETED, {"result": 7})

    async def test_unknown_chain_id_returns_none(self, state_adapter: StateAdapter, now: datetime) -> None:
        await start(state_adapter, now=now)
        assert await find_chain(state_adapter, new_id()) is None

    async def test_continuation_job_id_is_not_a_chain_id(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now)
        step = await continue_chain(state_adapter, root, now=now)
        assert await find_chain(state_adapter, step.id) is None

    async def test_locked_chain_read_returns_the_chain(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now)
        step = await continue_chain(state_adapter, root, now=now)
        async with state_adapter.transaction() as tx:
            chain = await tx.chain_get(ChainGet(chain_id=root.id, lock=True))
        assert chain is not None
        assert (chain.root.id, chain.last.id) == (root.id, step.id)

    @requires(Capability.ROW_LOCKS)
    async def test_locked_chain_read_waits_until_the_holding_transaction_commits(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now)

        async def lock(tx: StateTx) -> Chain | None:
            return await tx.chain_get(ChainGet(chain_id=root.id, lock=True))

        async def finish(tx: StateTx) -> object:
            return await tx.job_complete(JobComplete(job_id=root.id, output="held", now=now))

        seen = await read_while_locked(state_adapter, lock=lock, change=finish, read=lock)
        assert seen is not None
        assert (seen.last.status, seen.output) == (JobStatus.COMPLETED, "held")


class JobGetTests:
    """job_get: read by id, optionally locked."""

    async def test_unknown_job_id_returns_none(self, state_adapter: StateAdapter, now: datetime) -> None:
        await start(state_adapter, now=now)
        assert await find_job(state_adapter, new_id()) is None

    async def test_locked_job_read_returns_the_job(self, state_adapter: StateAdapter, now: datetime) -> None:
        job = await start(state_adapter, now=now, input={"x": 1})
        async with state_adapter.transaction() as tx:
            assert await tx.job_get(JobGet(job_id=job.id, lock=True)) == job

    @requires(Capability.ROW_LOCKS)
    async def test_locked_job_read_waits_until_the_holding_transaction_commits(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now)

        async def lock(tx: StateTx) -> Job | None:
            return await tx.job_get(JobGet(job_id=job.id, lock=True))

        async def finish(tx: StateTx) -> object:
            return await tx.job_complete(JobComplete(job_id=job.id, output="held", now=now))

        seen = await read_while_locked(state_adapter, lock=lock, change=finish, read=lock)
        assert seen is not None
        assert (seen.status, seen.output) == (JobStatus.COMPLETED, "held")


class JobBlockersGetTests:
    """job_blockers_get: the declared blocker chains, in declared order."""

    async def test_blockers_come_back_in_declared_order(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        made = [await start(state_adapter, now=now, type_name=f"b{i}") for i in range(3)]
        declared = [made[2].id, made[0].id, made[1].id]
        job = await start(state_adapter, now=now, blocker_chain_ids=declared)
        assert [chain.id for chain in await blockers_of(state_adapter, job.id)] == declared

    async def test_multi_job_blocker_chain_is_returned_as_root_and_last(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now, type_name="blocker")
        step = await continue_chain(state_adapter, root, now=now)
        job = await start(state_adapter, now=now, blocker_chain_ids=[root.id])
        (chain,) = await blockers_of(state_adapter, job.id)
        assert (chain.root.id, chain.last.id) == (root.id, step.id)

    async def test_job_without_blockers_has_no_blocker_chains(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        other = await start(state_adapter, now=now, type_name="blocker")
        await start(state_adapter, now=now, blocker_chain_ids=[other.id])
        job = await start(state_adapter, now=now)
        assert await blockers_of(state_adapter, job.id) == []

    async def test_blocker_chains_carry_their_roots_trace_context(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        traces = [{"traceparent": f"00-{i:032x}-{i:016x}-01"} for i in (1, 2)]
        made = [await start(state_adapter, now=now, chain_trace_context=t) for t in traces]
        job = await start(state_adapter, now=now, blocker_chain_ids=[made[1].id, made[0].id])
        chains = await blockers_of(state_adapter, job.id)
        assert [c.root.chain_trace_context for c in chains] == [traces[1], traces[0]]

    async def test_blockers_stay_readable_after_the_job_is_unblocked(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        job = await start(state_adapter, now=now, blocker_chain_ids=[blocker.id])
        await complete(state_adapter, blocker.id, now=now, output="ready")
        (chain,) = await blockers_of(state_adapter, job.id)
        assert (chain.id, chain.status, chain.output) == (blocker.id, JobStatus.COMPLETED, "ready")


class JobCompleteUnblockingTests:
    """job_complete: chain completion and the blocked → pending transition it triggers."""

    async def test_chain_completes_when_no_continuation_exists(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now)
        assert (await complete(state_adapter, root.id, now=now)).chain_completed is True

    async def test_chain_does_not_complete_when_a_continuation_exists(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now)
        await continue_chain(state_adapter, root, now=now)
        assert (await complete(state_adapter, root.id, now=now)).chain_completed is False

    async def test_completing_the_only_blocker_moves_the_dependent_to_pending(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        job = await start(state_adapter, now=now, blocker_chain_ids=[blocker.id])
        done = await complete(state_adapter, blocker.id, now=now)
        assert ids(done.unblocked_jobs) == [job.id]
        assert done.unblocked_jobs[0].status is JobStatus.PENDING
        assert (await get_job(state_adapter, job.id)).status is JobStatus.PENDING

    async def test_dependent_stays_blocked_while_another_blocker_is_incomplete(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        one = await start(state_adapter, now=now, type_name="blocker")
        two = await start(state_adapter, now=now, type_name="blocker")
        job = await start(state_adapter, now=now, blocker_chain_ids=[one.id, two.id])
        done = await complete(state_adapter, one.id, now=now)
        assert done.unblocked_jobs == []
        assert (await get_job(state_adapter, job.id)).status is JobStatus.BLOCKED

    async def test_dependent_unblocks_when_its_last_incomplete_blocker_completes(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        one = await start(state_adapter, now=now, type_name="blocker")
        two = await start(state_adapter, now=now, type_name="blocker")
        job = await start(state_adapter, now=now, blocker_chain_ids=[one.id, two.id])
        await complete(state_adapter, two.id, now=now)
        done = await complete(state_adapter, one.id, now=now)
        assert ids(done.unblocked_jobs) == [job.id]

    async def test_completing_a_chain_nobody_waits_for_unblocks_nothing(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        other = await start(state_adapter, now=now, type_name="blocker")
        waiting = await start(state_adapter, now=now, blocker_chain_ids=[other.id])
        lone = await start(state_adapter, now=now)
        assert (await complete(state_adapter, lone.id, now=now)).unblocked_jobs == []
        assert (await get_job(state_adapter, waiting.id)).status is JobStatus.BLOCKED

    async def test_one_completion_unblocks_every_dependent(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        waiting = [await start(state_adapter, now=now, blocker_chain_ids=[blocker.id]) for _ in range(3)]
        done = await complete(state_adapter, blocker.id, now=now)
        assert sorted(ids(done.unblocked_jobs)) == sorted(ids(waiting))

    async def test_completing_a_job_that_continued_leaves_dependents_blocked(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now, type_name="blocker")
        job = await start(state_adapter, now=now, blocker_chain_ids=[root.id])
        await continue_chain(state_adapter, root, now=now)
        done = await complete(state_adapter, root.id, now=now)
        assert done.unblocked_jobs == []
        assert (await get_job(state_adapter, job.id)).status is JobStatus.BLOCKED

    async def test_completing_the_final_continuation_unblocks_dependents(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now, type_name="blocker")
        job = await start(state_adapter, now=now, blocker_chain_ids=[root.id])
        step = await continue_chain(state_adapter, root, now=now)
        await complete(state_adapter, root.id, now=now)
        done = await complete(state_adapter, step.id, now=now)
        assert done.chain_completed is True
        assert ids(done.unblocked_jobs) == [job.id]

    async def test_unblocking_raises_a_stale_scheduled_at_to_now(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        job = await start(state_adapter, now=now, blocker_chain_ids=[blocker.id])
        later = now + timedelta(minutes=10)
        (unblocked,) = (await complete(state_adapter, blocker.id, now=later)).unblocked_jobs
        assert_time(state_adapter, unblocked.scheduled_at, later)
        assert_time(state_adapter, (await get_job(state_adapter, job.id)).scheduled_at, later)

    async def test_unblocking_keeps_a_future_scheduled_at(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        at = now + timedelta(hours=1)
        job = await start(state_adapter, now=now, blocker_chain_ids=[blocker.id], schedule=Schedule(at=at))
        await complete(state_adapter, blocker.id, now=now + timedelta(minutes=10))
        stored = await get_job(state_adapter, job.id)
        assert stored.status is JobStatus.PENDING
        assert_time(state_adapter, stored.scheduled_at, at)

    async def test_unblocked_job_does_not_jump_ahead_of_already_eligible_jobs(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        await start(state_adapter, now=now, blocker_chain_ids=[blocker.id])
        ready = await start(state_adapter, now=now + timedelta(seconds=5))
        later = now + timedelta(seconds=10)
        await complete(state_adapter, blocker.id, now=later)
        assert ids((await acquire(state_adapter, now=later)).jobs) == [ready.id]
