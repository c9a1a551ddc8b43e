"""chains_delete: whole chains, all-or-nothing blocker-reference refusal, cascade.

A chain that still blocks a job outside the deletion set is refused: nothing is deleted
and the result reports the ``blocker_references`` (the client raises from them).
``cascade=True`` first adds every chain that blocks a job of the set, recursively,
following blockers declared by any job of a chain (continuations included), then applies
the same check.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import pytest

from jobchain.contracts import BlockedJobsList, ChainsDelete, ChainsDeleted, StateAdapter
from jobchain.entities import Job, JobStatus
from jobchain.errors import BlockerReference
from jobchain_conformance.helpers import (
    acquire,
    acquire_job,
    complete,
    continuation_of,
    continue_chain,
    create_one,
    find_chain,
    find_job,
    ids,
    start,
)


async def delete(adapter: StateAdapter, chain_ids: Sequence[str], *, cascade: bool = False) -> ChainsDeleted:
    """Delete chains in one committed transaction."""
    async with adapter.transaction() as tx:
        return await tx.chains_delete(ChainsDelete(chain_ids=chain_ids, cascade=cascade))


async def delete_refused(
    adapter: StateAdapter, chain_ids: Sequence[str], *, cascade: bool = False
) -> set[tuple[str, str]]:
    """Require the deletion to be refused (no chains deleted, references reported) and
    return the references as (blocker chain id, referencing job id) pairs."""
    result = await delete(adapter, chain_ids, cascade=cascade)
    assert result.chains == [], "a refused deletion must delete nothing"
    assert result.running_job_ids == []
    assert all(isinstance(reference, BlockerReference) for reference in result.blocker_references)
    return {(reference.chain_id, reference.referenced_by_job_id) for reference in result.blocker_references}


async def assert_present(adapter: StateAdapter, *jobs: Job) -> None:
    for job in jobs:
        assert await find_job(adapter, job.id) is not None, f"job {job.id} was deleted"


async def assert_absent(adapter: StateAdapter, *jobs: Job) -> None:
    for job in jobs:
        assert await find_job(adapter, job.id) is None, f"job {job.id} survived the deletion"
        assert await find_chain(adapter, job.chain_id) is None, f"chain {job.chain_id} survived"


def deleted_ids(result: ChainsDeleted) -> list[str]:
    return sorted(chain.id for chain in result.chains)


class ChainsDeleteTests:
    """StateTx.chains_delete()."""

    async def test_deletes_every_job_of_the_chain(self, state_adapter: StateAdapter, now: datetime) -> None:
        root = await start(state_adapter, now=now)
        last = await continue_chain(state_adapter, root, now=now)
        await complete(state_adapter, root.id, now=now)
        result = await delete(state_adapter, [root.id])
        assert deleted_ids(result) == [root.id]
        await assert_absent(state_adapter, root, last)

    async def test_returns_deleted_chains_as_they_were(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        root = await start(state_adapter, now=now, input={"n": 1})
        last = await continue_chain(state_adapter, root, now=now)
        await complete(state_adapter, root.id, now=now)
        [chain] = (await delete(state_adapter, [root.id])).chains
        assert (chain.root.id, chain.last.id) == (root.id, last.id)
        assert chain.root.input == {"n": 1}
        assert chain.root.status is JobStatus.COMPLETED
        assert chain.status is JobStatus.PENDING

    async def test_does_not_delete_other_chains(self, state_adapter: StateAdapter, now: datetime) -> None:
        doomed = await start(state_adapter, now=now)
        kept = await start(state_adapter, now=now)
        kept_next = await continue_chain(state_adapter, kept, now=now)
        await complete(state_adapter, kept.id, now=now)
        await delete(state_adapter, [doomed.id])
        await assert_present(state_adapter, kept, kept_next)
        assert ids((await acquire(state_adapter, now=now, limit=5)).jobs) == [kept_next.id]

    async def test_skips_missing_chain_ids(self, state_adapter: StateAdapter, now: datetime) -> None:
        job = await start(state_adapter, now=now)
        missing = (await start(state_adapter, now=now)).id
        await delete(state_adapter, [missing])
        assert deleted_ids(await delete(state_adapter, [missing, job.id])) == [job.id]

    async def test_deleting_again_deletes_nothing(self, state_adapter: StateAdapter, now: datetime) -> None:
        job = await start(state_adapter, now=now)
        await delete(state_adapter, [job.id])
        result = await delete(state_adapter, [job.id])
        assert (result.chains, result.running_job_ids, result.blocker_references) == ([], [], [])

    async def test_reports_jobs_that_were_running(self, state_adapter: StateAdapter, now: datetime) -> None:
        running = await start(state_adapter, now=now)
        idle = await start(state_adapter, now=now, type_name="idle")
        await acquire_job(state_adapter, running, now=now)
        result = await delete(state_adapter, [running.id, idle.id])
        assert deleted_ids(result) == sorted([running.id, idle.id])
        assert result.running_job_ids == [running.id]

    async def test_refuses_a_chain_that_blocks_another_job_and_deletes_nothing(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        other = await start(state_adapter, now=now, type_name="other")
        dependent = await start(state_adapter, now=now, blocker_chain_ids=[blocker.id])
        references = await delete_refused(state_adapter, [blocker.id, other.id])
        assert references == {(blocker.id, dependent.id)}
        await assert_present(state_adapter, blocker, other, dependent)

    async def test_refusal_counts_blockers_declared_by_continuations(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        root = await start(state_adapter, now=now)
        follower = await continue_chain(state_adapter, root, now=now, blocker_chain_ids=[blocker.id])
        assert await delete_refused(state_adapter, [blocker.id]) == {(blocker.id, follower.id)}
        await assert_present(state_adapter, blocker, root, follower)

    async def test_deleting_the_dependent_too_makes_deletion_legal(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        dependent = await start(state_adapter, now=now, blocker_chain_ids=[blocker.id])
        result = await delete(state_adapter, [blocker.id, dependent.id])
        assert deleted_ids(result) == sorted([blocker.id, dependent.id])
        await assert_absent(state_adapter, blocker, dependent)

    async def test_deleting_a_dependent_forgets_its_blocker_rows(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        dependent = await start(state_adapter, now=now, blocker_chain_ids=[blocker.id])
        await delete(state_adapter, [dependent.id])
        async with state_adapter.transaction(read_only=True) as tx:
            page = await tx.blocked_jobs_list(BlockedJobsList(blocker_chain_id=blocker.id))
        assert page.items == []
        assert deleted_ids(await delete(state_adapter, [blocker.id])) == [blocker.id]

    async def test_cascade_deletes_the_chains_blockers(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        dependent = await start(state_adapter, now=now, blocker_chain_ids=[blocker.id])
        result = await delete(state_adapter, [dependent.id], cascade=True)
        assert deleted_ids(result) == sorted([blocker.id, dependent.id])
        await assert_absent(state_adapter, blocker, dependent)

    async def test_cascade_refuses_a_blocker_shared_with_an_outside_job(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        dependent = await start(state_adapter, now=now, blocker_chain_ids=[blocker.id])
        outsider = await start(state_adapter, now=now, blocker_chain_ids=[blocker.id])
        references = await delete_refused(state_adapter, [dependent.id], cascade=True)
        assert references == {(blocker.id, outsider.id)}
        await assert_present(state_adapter, blocker, dependent, outsider)

    async def test_cascade_follows_blockers_transitively(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        deepest = await start(state_adapter, now=now, type_name="deepest")
        middle = await start(state_adapter, now=now, type_name="middle", blocker_chain_ids=[deepest.id])
        top = await start(state_adapter, now=now, blocker_chain_ids=[middle.id])
        result = await delete(state_adapter, [top.id], cascade=True)
        assert deleted_ids(result) == sorted([deepest.id, middle.id, top.id])
        await assert_absent(state_adapter, deepest, middle, top)

    async def test_cascade_deletes_a_diamond_once(self, state_adapter: StateAdapter, now: datetime) -> None:
        base = await start(state_adapter, now=now, type_name="base")
        left = await start(state_adapter, now=now, type_name="left", blocker_chain_ids=[base.id])
        right = await start(state_adapter, now=now, type_name="right", blocker_chain_ids=[base.id])
        top = await start(state_adapter, now=now, blocker_chain_ids=[left.id, right.id])
        result = await delete(state_adapter, [top.id], cascade=True)
        assert [chain.id for chain in result.chains].count(base.id) == 1
        assert deleted_ids(result) == sorted([base.id, left.id, right.id, top.id])

    async def test_cascade_without_blockers_deletes_only_the_given_chains(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        doomed = await start(state_adapter, now=now)
        kept = await start(state_adapter, now=now)
        result = await delete(state_adapter, [doomed.id], cascade=True)
        assert deleted_ids(result) == [doomed.id]
        await assert_present(state_adapter, kept)

    async def test_cascade_follows_blockers_declared_by_continuations(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        root = await start(state_adapter, now=now)
        created = await create_one(
            state_adapter, continuation_of(root, blocker_chain_ids=[blocker.id]), now=now
        )
        await complete(state_adapter, root.id, now=now)
        result = await delete(state_adapter, [root.id], cascade=True)
        assert deleted_ids(result) == sorted([blocker.id, root.id])
        await assert_absent(state_adapter, blocker, root, created.job)

    async def test_cascade_reports_running_jobs_of_added_blockers(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        blocker = await start(state_adapter, now=now, type_name="blocker")
        dependent = await start(state_adapter, now=now, blocker_chain_ids=[blocker.id])
        await acquire_job(state_adapter, blocker, now=now)
        result = await delete(state_adapter, [dependent.id], cascade=True)
        assert result.running_job_ids == [blocker.id]

    async def test_deleted_jobs_are_no_longer_acquirable(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = await start(state_adapter, now=now)
        second = await start(state_adapter, now=now)
        await delete(state_adapter, [first.id])
        claimed = await acquire(state_adapter, now=now, limit=5)
        assert ids(claimed.jobs) == [second.id]
        assert claimed.has_more is False

    @pytest.mark.parametrize("cascade", [False, True], ids=["plain", "cascade"])
    async def test_empty_id_list_deletes_nothing(
        self, state_adapter: StateAdapter, now: datetime, cascade: bool
    ) -> None:
        job = await start(state_adapter, now=now)
        result = await delete(state_adapter, [], cascade=cascade)
        assert result.chains == []
        await assert_present(state_adapter, job)
