"""Ordered keys (``NewJob.ordering_key``): a new root gets the key's previous chain as an
implicit blocker, resolved by any terminal status of that chain.

So the chains of a key run one at a time, in creation order; a failed or cancelled
predecessor unblocks its successor instead of failing it; chains of other keys are not held;
a deduplicated start takes no place in the order; continuations do not carry the key.
Concurrent creators of one key serialize (the second waits for the first to commit or roll
back); creators of different keys do not wait for each other where the backend runs write
transactions concurrently.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import pairwise
from typing import Literal

import pytest

from jobchain.contracts import (
    Capability,
    ChainsDelete,
    ChainsPrune,
    JobCreated,
    JobsCreate,
    NewJob,
    StateAdapter,
    StateTx,
)
from jobchain.entities import Deduplication, Job, JobStatus
from jobchain_conformance.capabilities import requires
from jobchain_conformance.helpers import (
    LEASE,
    WORKER,
    acquire,
    acquire_job,
    blockers_of,
    cancel,
    complete,
    continue_chain,
    create,
    create_one,
    fail,
    get_job,
    ids,
    in_transaction,
    new_job,
    prune,
    run_and_complete,
    start,
)
from jobchain_conformance.suites.state_lifecycle_propagation import assert_failed_by
from jobchain_conformance.suites.state_scheduling_support import DEADLINE, overlap

SECOND = timedelta(seconds=1)
KEY = "customer-42"

Ending = Literal["completed", "failed", "cancelled"]


async def keyed(adapter: StateAdapter, *, now: datetime, key: str = KEY, **fields: object) -> JobCreated:
    """Start a chain with ordering key ``key``; its :class:`JobCreated`."""
    return await create_one(adapter, new_job(ordering_key=key, **fields), now=now)  # type: ignore[arg-type]


async def end(adapter: StateAdapter, job: Job, how: Ending, *, now: datetime) -> None:
    """End ``job``'s chain as ``how`` (its only job), without a worker."""
    if how == "completed":
        await complete(adapter, job.id, now=now)
    elif how == "failed":
        await fail(adapter, job.id, now=now)
    else:
        await cancel(adapter, [job.chain_id], now=now)


class OrderingKeyTests:
    """The chains of a key run one at a time, in creation order."""

    async def test_the_first_chain_of_a_key_is_not_held(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        created = await keyed(state_adapter, now=now)
        assert (created.ordered_after, created.incomplete_blocker_chain_ids) == (None, ())
        stored = await get_job(state_adapter, created.job.id)
        assert (stored.status, stored.ordering_key) == (JobStatus.PENDING, KEY)

    async def test_the_next_chain_of_the_key_waits_for_the_previous_one(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = (await keyed(state_adapter, now=now)).job
        second = await keyed(state_adapter, now=now + SECOND)
        assert (second.ordered_after, second.incomplete_blocker_chain_ids) == (first.id, (first.id,))
        assert second.job.status is JobStatus.BLOCKED
        assert [chain.id for chain in await blockers_of(state_adapter, second.job.id)] == [first.id]

    async def test_completing_the_previous_chain_unblocks_the_next(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = (await keyed(state_adapter, now=now)).job
        second = (await keyed(state_adapter, now=now)).job
        done = await run_and_complete(state_adapter, first, now=now + SECOND)
        assert ids(done.unblocked_jobs) == [second.id]
        assert (await get_job(state_adapter, second.id)).status is JobStatus.PENDING

    async def test_chains_of_a_key_are_claimed_one_at_a_time_in_creation_order(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        chain = [(await keyed(state_adapter, now=now + n * SECOND)).job for n in range(3)]
        other = (await keyed(state_adapter, now=now + 3 * SECOND, key="another")).job
        later = now + 10 * SECOND
        first = await acquire(state_adapter, now=later, limit=5)
        assert sorted(ids(first.jobs)) == sorted([chain[0].id, other.id])
        for previous, current in pairwise(chain):
            await complete(state_adapter, previous.id, now=later, worker_id=WORKER)
            assert ids((await acquire(state_adapter, now=later, limit=5)).jobs) == [current.id]

    async def test_a_third_chain_waits_for_the_second_not_the_first(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = (await keyed(state_adapter, now=now)).job
        second = (await keyed(state_adapter, now=now)).job
        third = await keyed(state_adapter, now=now)
        assert third.ordered_after == second.id
        await complete(state_adapter, first.id, now=now + SECOND)
        assert (await get_job(state_adapter, third.job.id)).status is JobStatus.BLOCKED
        await complete(state_adapter, second.id, now=now + 2 * SECOND)
        assert (await get_job(state_adapter, third.job.id)).status is JobStatus.PENDING

    @pytest.mark.parametrize("how", ["failed", "cancelled"])
    async def test_a_failed_or_cancelled_predecessor_unblocks_its_successor(
        self, state_adapter: StateAdapter, now: datetime, how: Ending
    ) -> None:
        first = (await keyed(state_adapter, now=now)).job
        second = (await keyed(state_adapter, now=now)).job
        if how == "failed":
            failed = await fail(state_adapter, first.id, now=now + SECOND)
            assert (ids(failed.failed_jobs), ids(failed.unblocked_jobs)) == ([], [second.id])
        else:
            cancelled = await cancel(state_adapter, [first.id], now=now + SECOND)
            assert (ids(cancelled.failed_jobs), ids(cancelled.unblocked_jobs)) == ([], [second.id])
        stored = await get_job(state_adapter, second.id)
        assert (stored.status, stored.failed_by_chain_id, stored.failed_at) == (JobStatus.PENDING, None, None)

    @pytest.mark.parametrize("how", ["completed", "failed", "cancelled"])
    async def test_a_predecessor_already_ended_orders_without_holding(
        self, state_adapter: StateAdapter, now: datetime, how: Ending
    ) -> None:
        first = (await keyed(state_adapter, now=now)).job
        await end(state_adapter, first, how, now=now)
        second = await keyed(state_adapter, now=now + SECOND)
        assert (second.ordered_after, second.incomplete_blocker_chain_ids) == (first.id, ())
        assert second.job.status is JobStatus.PENDING

    async def test_chains_of_other_keys_and_without_a_key_are_not_held(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await keyed(state_adapter, now=now)
        other = await keyed(state_adapter, now=now, key="customer-43")
        plain = await create_one(state_adapter, new_job(), now=now)
        assert (other.ordered_after, other.job.status) == (None, JobStatus.PENDING)
        assert (plain.ordered_after, plain.job.status, plain.job.ordering_key) == (
            None,
            JobStatus.PENDING,
            None,
        )

    async def test_declared_blockers_come_first_then_the_key_predecessor(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        declared = await start(state_adapter, now=now, type_name="declared")
        first = (await keyed(state_adapter, now=now)).job
        second = await keyed(state_adapter, now=now, blocker_chain_ids=[declared.id])
        assert sorted(second.incomplete_blocker_chain_ids) == sorted([declared.id, first.id])
        assert [chain.id for chain in await blockers_of(state_adapter, second.job.id)] == [
            declared.id,
            first.id,
        ]

    async def test_a_failed_declared_blocker_still_fails_a_keyed_chain(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        # Only the implicit blocker is resolved by a failure; the declared one is not.
        declared = await start(state_adapter, now=now, type_name="declared")
        first = (await keyed(state_adapter, now=now)).job
        second = (await keyed(state_adapter, now=now, blocker_chain_ids=[declared.id])).job
        failed = await fail(state_adapter, declared.id, now=now + SECOND)
        assert ids(failed.failed_jobs) == [second.id]
        assert_failed_by(state_adapter, await get_job(state_adapter, second.id), declared, now + SECOND)
        assert (await get_job(state_adapter, first.id)).status is JobStatus.PENDING

    async def test_a_deduplicated_start_takes_no_place_in_the_order(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        dedup = Deduplication(key="once")
        original = (await keyed(state_adapter, now=now, deduplication=dedup)).job
        middle = (await keyed(state_adapter, now=now + SECOND)).job
        again = await keyed(state_adapter, now=now + 2 * SECOND, deduplication=dedup)
        assert (again.deduplicated, again.job.id) == (True, original.id)
        last = await keyed(state_adapter, now=now + 3 * SECOND)
        assert last.ordered_after == middle.id
        assert [chain.id for chain in await blockers_of(state_adapter, original.id)] == []

    async def test_roots_of_one_batch_are_ordered_in_input_order(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        jobs = [new_job(ordering_key=KEY, input=n) for n in range(3)]
        created = await create(state_adapter, jobs, now=now)
        assert [item.ordered_after for item in created] == [None, jobs[0].id, jobs[1].id]
        assert [item.job.status for item in created] == [
            JobStatus.PENDING,
            JobStatus.BLOCKED,
            JobStatus.BLOCKED,
        ]

    async def test_continuations_do_not_carry_the_key_and_the_whole_chain_holds_it(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = (await keyed(state_adapter, now=now)).job
        running = await acquire_job(state_adapter, first, now=now)
        follow = await continue_chain(state_adapter, running, now=now)
        assert (follow.ordering_key, follow.status) == (None, JobStatus.PENDING)
        second = (await keyed(state_adapter, now=now)).job
        await complete(
            state_adapter, first.id, now=now, worker_id=WORKER, lease_generation=running.lease_generation
        )
        assert (await get_job(state_adapter, second.id)).status is JobStatus.BLOCKED
        done = await complete(state_adapter, follow.id, now=now + SECOND)
        assert ids(done.unblocked_jobs) == [second.id]

    async def test_deleting_the_only_chain_of_a_key_frees_the_key(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = (await keyed(state_adapter, now=now)).job
        await in_transaction(state_adapter, lambda tx: tx.chains_delete(ChainsDelete(chain_ids=[first.id])))
        second = await keyed(state_adapter, now=now + SECOND)
        assert (second.ordered_after, second.job.status) == (None, JobStatus.PENDING)

    async def test_the_running_chain_of_a_key_holds_the_next_one(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = (await keyed(state_adapter, now=now)).job
        await acquire(state_adapter, now=now, lease_for=LEASE)
        second = await keyed(state_adapter, now=now)
        assert (second.ordered_after, second.job.status) == (first.id, JobStatus.BLOCKED)
        assert (await acquire(state_adapter, now=now + SECOND, limit=5)).jobs == []


async def _create_keyed(tx: StateTx, job: NewJob, *, now: datetime) -> JobCreated:
    (created,) = await tx.jobs_create(JobsCreate(jobs=[job], now=now))
    return created


class ConcurrentOrderingTests:
    """Creators of one key serialize: the later transaction is ordered after the earlier one."""

    async def test_a_creation_waits_for_an_uncommitted_creation_of_the_key(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        earlier = (await keyed(state_adapter, now=now)).job
        first, second = new_job(ordering_key=KEY), new_job(ordering_key=KEY)
        race = await overlap(
            state_adapter,
            lambda tx: _create_keyed(tx, first, now=now),
            lambda tx: _create_keyed(tx, second, now=now),
        )
        assert not race.second_ended_while_first_open, (
            "a creation of the key finished while another transaction held an uncommitted creation of it"
        )
        assert race.first.ordered_after == earlier.id
        assert (race.second.ordered_after, race.second.job.status) == (first.id, JobStatus.BLOCKED)
        assert [chain.id for chain in await blockers_of(state_adapter, second.id)] == [first.id]

    async def test_a_creation_beside_a_rolled_back_creation_orders_after_the_committed_chain(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        earlier = (await keyed(state_adapter, now=now)).job
        first, second = new_job(ordering_key=KEY), new_job(ordering_key=KEY)
        race = await overlap(
            state_adapter,
            lambda tx: _create_keyed(tx, first, now=now),
            lambda tx: _create_keyed(tx, second, now=now),
            outcome="rollback",
        )
        assert race.second.ordered_after == earlier.id
        assert [chain.id for chain in await blockers_of(state_adapter, second.id)] == [earlier.id]
        third = await keyed(state_adapter, now=now)
        assert third.ordered_after == second.id

    @requires(Capability.CONCURRENT_TRANSACTIONS)
    async def test_a_creation_does_not_wait_for_another_keys_creation(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first, second = new_job(ordering_key="k1"), new_job(ordering_key="k2")
        race = await overlap(
            state_adapter,
            lambda tx: _create_keyed(tx, first, now=now),
            lambda tx: _create_keyed(tx, second, now=now),
            grace=DEADLINE,  # only a backend that wrongly waits spends it; a busy machine never does
        )
        assert race.second_ended_while_first_open, "a creation waited for another key's open creation"
        assert (race.first.ordered_after, race.second.ordered_after) == (None, None)


class OrderingRetentionTests:
    """Retention and the key bookkeeping (``ChainsPrune.locks_before``, ``locks_deleted``)."""

    async def test_a_locks_prune_keeps_a_key_whose_last_chain_exists(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = (await keyed(state_adapter, now=now)).job
        await run_and_complete(state_adapter, first, now=now)
        pruned = await prune(state_adapter, ChainsPrune(locks_before=now + timedelta(days=1)))
        assert (pruned.chains, pruned.locks_deleted) == ([], 0)
        second = await keyed(state_adapter, now=now + SECOND)
        assert second.ordered_after == first.id

    async def test_pruning_the_last_chain_of_a_key_frees_the_key(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        first = (await keyed(state_adapter, now=now)).job
        await complete(state_adapter, first.id, now=now)
        cutoff = now + SECOND
        pruned = await prune(state_adapter, ChainsPrune(completed_before=cutoff, locks_before=cutoff))
        assert [chain.id for chain in pruned.chains] == [first.id]
        again = await prune(state_adapter, ChainsPrune(locks_before=cutoff))
        assert pruned.locks_deleted + again.locks_deleted <= 1
        assert (await prune(state_adapter, ChainsPrune(locks_before=cutoff))).locks_deleted == 0
        second = await keyed(state_adapter, now=now + 2 * SECOND)
        assert (second.ordered_after, second.job.status) == (None, JobStatus.PENDING)

    async def test_an_ended_predecessor_is_pruned_though_the_next_chain_of_the_key_names_it(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        # ChainsPrune: a reference through a resolves_on_any_end blocker never holds a chain
        # back, or a key that keeps getting chains would never lose its history.
        first = (await keyed(state_adapter, now=now)).job
        await complete(state_adapter, first.id, now=now)
        second = (await keyed(state_adapter, now=now + SECOND)).job
        declared = await start(state_adapter, now=now, type_name="declared")
        await complete(state_adapter, declared.id, now=now)
        third = (await keyed(state_adapter, now=now + SECOND, blocker_chain_ids=[declared.id])).job
        pruned = await prune(state_adapter, ChainsPrune(completed_before=now + SECOND))
        assert sorted(chain.id for chain in pruned.chains) == [first.id]
        assert (await get_job(state_adapter, second.id)).status is JobStatus.PENDING
        assert await blockers_of(state_adapter, second.id) == []
        assert [chain.id for chain in await blockers_of(state_adapter, third.id)] == [declared.id, second.id]
        assert (await keyed(state_adapter, now=now + 2 * SECOND)).ordered_after == third.id

    async def test_locks_deleted_is_at_most_the_limit(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        roots = [(await keyed(state_adapter, now=now, key=f"k{n}")).job for n in range(3)]
        for root in roots:
            await complete(state_adapter, root.id, now=now)
        cutoff = now + SECOND
        everything = ChainsPrune(completed_before=cutoff, locks_before=cutoff, limit=2)
        counts = [(await prune(state_adapter, everything)).locks_deleted for _ in range(4)]
        assert all(0 <= count <= 2 for count in counts), counts
        assert sum(counts) <= 3
        assert counts[-1] == 0
        for n in range(3):
            assert (await keyed(state_adapter, now=cutoff, key=f"k{n}")).ordered_after is None
