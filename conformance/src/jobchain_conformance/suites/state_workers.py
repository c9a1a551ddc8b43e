"""The worker registry: worker_heartbeat (upsert, was_dead, dead marking, prune,
next_lease_expiry) and workers_list (reported state, order, filter).

What a heartbeat does to the *jobs* of dead workers is in ``state_rescue``. Every case
passes ``now``; times stay whole seconds apart from every boundary they are compared with.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from jobchain.contracts import StateAdapter, StateTx, WorkerHeartbeat, WorkerHeartbeatResult, WorkersList
from jobchain.entities import WorkerInfo, WorkerState
from jobchain_conformance.helpers import LEASE, TYPE, acquire_job, assert_duration, assert_time, start
from jobchain_conformance.suites.state_isolation import open_writer, read
from jobchain_conformance.suites.state_transactions import RollbackError, rolls_back

ALIVE = timedelta(seconds=10)
"""Default ``alive_for`` of the heartbeat shortcut."""
A, B, C, D = "worker-a", "worker-b", "worker-c", "worker-d"
"""Worker ids of the cases (A and B are also the job shortcuts' WORKER and OTHER_WORKER)."""


def beat(
    worker_id: str,
    *,
    now: datetime,
    alive_for: timedelta = ALIVE,
    release_dead: bool = False,
    prune_after: timedelta = timedelta(hours=1),
    state: WorkerState = WorkerState.RUNNING,
    type_names: Sequence[str] = (TYPE,),
    name: str | None = None,
    host: str = "host-1",
    pid: int = 4242,
    version: str = "1.2.3",
    concurrency: int = 4,
    inflight: int = 0,
    buffered: int = 0,
    committing: int = 0,
    capacity: int = 0,
    incarnation: int = 0,
) -> WorkerHeartbeat:
    """A :class:`WorkerHeartbeat` with plausible defaults (``name`` defaults to the id)."""
    return WorkerHeartbeat(
        worker_id=worker_id,
        name=name or worker_id,
        host=host,
        pid=pid,
        version=version,
        type_names=tuple(type_names),
        concurrency=concurrency,
        inflight=inflight,
        buffered=buffered,
        committing=committing,
        capacity=capacity,
        state=state,
        alive_for=alive_for,
        release_dead=release_dead,
        prune_after=prune_after,
        incarnation=incarnation,
        now=now,
    )


async def heartbeat(adapter: StateAdapter, params: WorkerHeartbeat) -> WorkerHeartbeatResult:
    """Run one heartbeat in its own committed transaction."""
    async with adapter.transaction() as tx:
        return await tx.worker_heartbeat(params)


async def workers(adapter: StateAdapter, *, now: datetime, states: Sequence[str] = ()) -> list[WorkerInfo]:
    """The registry as ``workers_list`` reports it at ``now`` (committed state)."""
    async with adapter.transaction(read_only=True) as tx:
        return await tx.workers_list(WorkersList(states=states, now=now))


async def worker(adapter: StateAdapter, worker_id: str, *, now: datetime) -> WorkerInfo | None:
    """One registry row as reported at ``now``, or None."""
    return next((row for row in await workers(adapter, now=now) if row.id == worker_id), None)


async def state_of(adapter: StateAdapter, worker_id: str, *, now: datetime) -> WorkerState | None:
    row = await worker(adapter, worker_id, now=now)
    return None if row is None else row.state


def ids_of(rows: Sequence[WorkerInfo]) -> list[str]:
    return [row.id for row in rows]


class WorkerHeartbeatTests:
    """worker_heartbeat: the caller's own row, and what it learns about itself."""

    async def test_first_heartbeat_registers_every_reported_field(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        params = beat(
            A,
            now=now,
            name="billing-1",
            host="box-7",
            pid=31337,
            version="9.8.7",
            type_names=["b", "a"],
            concurrency=16,
            inflight=3,
            buffered=2,
            committing=5,
            capacity=20,
            state=WorkerState.DRAINING,
        )
        await heartbeat(state_adapter, params)
        row = await worker(state_adapter, A, now=now)
        assert row is not None, "the first heartbeat did not register the worker"
        assert (row.name, row.host, row.pid, row.version) == ("billing-1", "box-7", 31337, "9.8.7")
        assert (row.type_names, row.concurrency, row.inflight, row.state) == (
            ("b", "a"),
            16,
            3,
            WorkerState.DRAINING,
        )
        assert (row.buffered, row.committing, row.capacity) == (2, 5, 20), (
            "the load is not stored as reported"
        )
        assert (row.running, row.held) == (1, 8)
        assert_time(state_adapter, row.started_at, now)
        assert_time(state_adapter, row.last_seen_at, now)
        assert_time(state_adapter, row.alive_until, now + ALIVE)

    async def test_first_heartbeat_finds_nothing(self, state_adapter: StateAdapter, now: datetime) -> None:
        result = await heartbeat(state_adapter, beat(A, now=now, release_dead=True))
        assert (result.was_dead, result.released_jobs, result.dead_worker_ids) == (False, [], [])
        assert result.next_lease_expiry is None

    async def test_later_heartbeat_keeps_started_at_and_moves_last_seen_and_alive_until(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(A, now=now))
        later = now + timedelta(seconds=7)
        await heartbeat(state_adapter, beat(A, now=later, alive_for=timedelta(seconds=20)))
        row = await worker(state_adapter, A, now=later)
        assert row is not None
        assert_time(state_adapter, row.started_at, now)
        assert_time(state_adapter, row.last_seen_at, later)
        assert_time(state_adapter, row.alive_until, later + timedelta(seconds=20))

    async def test_later_heartbeat_updates_every_reported_field(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(A, now=now))
        later = now + timedelta(seconds=3)
        await heartbeat(
            state_adapter,
            beat(
                A,
                now=later,
                name="renamed",
                host="box-9",
                pid=7,
                version="2.0.0",
                type_names=["x"],
                concurrency=1,
                inflight=1,
                buffered=1,
                committing=2,
                capacity=3,
                state=WorkerState.STOPPED,
            ),
        )
        row = await worker(state_adapter, A, now=later)
        assert row is not None
        assert (row.name, row.host, row.pid, row.version, row.type_names) == (
            "renamed",
            "box-9",
            7,
            "2.0.0",
            ("x",),
        )
        assert (row.concurrency, row.inflight, row.state) == (1, 1, WorkerState.STOPPED)
        assert (row.buffered, row.committing, row.capacity) == (1, 2, 3)
        assert len(await workers(state_adapter, now=later)) == 1

    async def test_heartbeat_of_a_worker_marked_dead_reports_was_dead_and_a_rejoin_revives_it(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        # The dead incarnation is fenced (state_worker_incarnation); the next one rejoins.
        await heartbeat(state_adapter, beat(A, now=now))
        lapsed = now + ALIVE + timedelta(seconds=5)
        assert (await heartbeat(state_adapter, beat(B, now=lapsed, release_dead=True))).dead_worker_ids == [A]
        back = lapsed + timedelta(seconds=1)
        assert (await heartbeat(state_adapter, beat(A, now=back))).was_dead is True
        assert (await heartbeat(state_adapter, beat(A, now=back, incarnation=1))).was_dead is False
        row = await worker(state_adapter, A, now=back)
        assert row is not None
        assert row.state is WorkerState.RUNNING
        assert_time(state_adapter, row.alive_until, back + ALIVE)

    async def test_was_dead_is_reported_until_the_worker_rejoins(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(A, now=now))
        lapsed = now + ALIVE + timedelta(seconds=5)
        await heartbeat(state_adapter, beat(B, now=lapsed, release_dead=True))
        assert (await heartbeat(state_adapter, beat(A, now=lapsed + timedelta(seconds=1)))).was_dead is True
        await heartbeat(state_adapter, beat(A, now=lapsed + timedelta(seconds=1), incarnation=1))
        again = await heartbeat(state_adapter, beat(A, now=lapsed + timedelta(seconds=2), incarnation=1))
        assert again.was_dead is False

    async def test_lapsed_row_nobody_marked_dead_is_not_was_dead(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(A, now=now))
        late = now + ALIVE + timedelta(seconds=30)
        assert (await heartbeat(state_adapter, beat(A, now=late))).was_dead is False

    async def test_rolled_back_first_heartbeat_registers_nothing(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        with rolls_back():
            async with state_adapter.transaction() as tx:
                await tx.worker_heartbeat(beat(A, now=now))
                assert ids_of(await tx.workers_list(WorkersList(now=now))) == [A]
                raise RollbackError
        assert await workers(state_adapter, now=now) == []

    async def test_workers_list_does_not_observe_an_uncommitted_heartbeat(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(A, now=now, inflight=1))

        async def write(tx: StateTx) -> None:
            await tx.worker_heartbeat(beat(A, now=now + timedelta(seconds=1), inflight=2))
            await tx.worker_heartbeat(beat(B, now=now + timedelta(seconds=1)))

        async with open_writer(state_adapter, write):
            seen = await read(state_adapter, lambda tx: tx.workers_list(WorkersList(now=now)))
        assert [(row.id, row.inflight) for row in seen] == [(A, 1)]


class WorkerDeathTests:
    """worker_heartbeat(release_dead=True): which other workers it marks dead."""

    async def test_lapsed_running_and_draining_workers_are_marked_dead(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(A, now=now))
        await heartbeat(state_adapter, beat(B, now=now, state=WorkerState.DRAINING))
        lapsed = now + ALIVE + timedelta(seconds=5)
        result = await heartbeat(state_adapter, beat(C, now=lapsed, release_dead=True))
        assert sorted(result.dead_worker_ids) == [A, B]
        assert await state_of(state_adapter, A, now=lapsed) is WorkerState.DEAD
        assert await state_of(state_adapter, B, now=lapsed) is WorkerState.DEAD
        assert await state_of(state_adapter, C, now=lapsed) is WorkerState.RUNNING

    async def test_a_stopped_worker_is_never_marked_dead(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(A, now=now, state=WorkerState.STOPPED))
        lapsed = now + ALIVE + timedelta(minutes=5)
        result = await heartbeat(state_adapter, beat(C, now=lapsed, release_dead=True))
        assert result.dead_worker_ids == []
        assert await state_of(state_adapter, A, now=lapsed) is WorkerState.STOPPED
        assert (await heartbeat(state_adapter, beat(A, now=lapsed))).was_dead is False

    async def test_a_live_worker_is_never_marked_dead(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(A, now=now, alive_for=timedelta(minutes=1)))
        at = now + timedelta(seconds=59)
        result = await heartbeat(state_adapter, beat(C, now=at, release_dead=True))
        assert result.dead_worker_ids == []
        assert await state_of(state_adapter, A, now=at) is WorkerState.RUNNING
        assert (await heartbeat(state_adapter, beat(A, now=at))).was_dead is False

    async def test_a_worker_is_not_marked_dead_before_its_alive_until_has_passed(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        """Not a moment early: the worker's own liveness deadline relies on it (issue 35)."""
        await heartbeat(state_adapter, beat(A, now=now))
        result = await heartbeat(state_adapter, beat(C, now=now + ALIVE, release_dead=True))
        assert result.dead_worker_ids == []
        assert await state_of(state_adapter, A, now=now + ALIVE) is WorkerState.RUNNING
        after = now + ALIVE + state_adapter.time_precision
        assert (await heartbeat(state_adapter, beat(C, now=after, release_dead=True))).dead_worker_ids == [A]

    async def test_a_worker_already_marked_dead_is_not_reported_again(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(A, now=now))
        lapsed = now + ALIVE + timedelta(seconds=5)
        await heartbeat(state_adapter, beat(B, now=lapsed, release_dead=True))
        again = await heartbeat(state_adapter, beat(C, now=lapsed + timedelta(seconds=1), release_dead=True))
        assert again.dead_worker_ids == []
        assert await state_of(state_adapter, A, now=lapsed) is WorkerState.DEAD

    async def test_without_release_dead_nobody_is_marked_dead(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(A, now=now))
        lapsed = now + ALIVE + timedelta(seconds=5)
        result = await heartbeat(state_adapter, beat(B, now=lapsed))
        assert result.dead_worker_ids == []
        assert (await heartbeat(state_adapter, beat(A, now=lapsed + timedelta(seconds=1)))).was_dead is False

    async def test_rolled_back_heartbeat_marks_nobody_dead(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(A, now=now))
        lapsed = now + ALIVE + timedelta(seconds=5)
        with rolls_back():
            async with state_adapter.transaction() as tx:
                assert (
                    await tx.worker_heartbeat(beat(B, now=lapsed, release_dead=True))
                ).dead_worker_ids == [A]
                raise RollbackError
        assert (await heartbeat(state_adapter, beat(A, now=lapsed + timedelta(seconds=1)))).was_dead is False


class WorkerPruneTests:
    """worker_heartbeat: rows lapsed longer than ``prune_after`` are deleted."""

    async def test_rows_lapsed_longer_than_prune_after_are_deleted(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(A, now=now))
        await heartbeat(state_adapter, beat(B, now=now, state=WorkerState.STOPPED))
        await heartbeat(state_adapter, beat(C, now=now + timedelta(minutes=5)))
        at = now + ALIVE + timedelta(minutes=10, seconds=1)
        await heartbeat(state_adapter, beat(D, now=at, prune_after=timedelta(minutes=10)))
        assert sorted(ids_of(await workers(state_adapter, now=at))) == [C, D]

    async def test_rows_lapsed_less_than_prune_after_stay(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(A, now=now))
        at = now + ALIVE + timedelta(minutes=9)
        await heartbeat(state_adapter, beat(B, now=at, prune_after=timedelta(minutes=10)))
        assert sorted(ids_of(await workers(state_adapter, now=at))) == [A, B]

    async def test_a_worker_this_heartbeat_marks_dead_is_pruned_by_a_later_one(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        # Its jobs are released and it lists as dead until the next heartbeat deletes it.
        await heartbeat(state_adapter, beat(A, now=now))
        job = await acquire_job(state_adapter, await start(state_adapter, now=now), now=now, worker_id=A)
        prune_after = timedelta(minutes=10)
        at = now + ALIVE + prune_after + timedelta(seconds=5)
        result = await heartbeat(state_adapter, beat(B, now=at, release_dead=True, prune_after=prune_after))
        assert (result.dead_worker_ids, [released.id for released in result.released_jobs]) == ([A], [job.id])
        assert await state_of(state_adapter, A, now=at) is WorkerState.DEAD
        later = at + timedelta(seconds=1)
        await heartbeat(state_adapter, beat(B, now=later, release_dead=True, prune_after=prune_after))
        assert ids_of(await workers(state_adapter, now=later)) == [B]


class NextLeaseExpiryTests:
    """WorkerHeartbeatResult.next_lease_expiry: when a reap is next worth running."""

    async def test_none_when_no_job_runs(self, state_adapter: StateAdapter, now: datetime) -> None:
        await start(state_adapter, now=now)
        assert (await heartbeat(state_adapter, beat(A, now=now))).next_lease_expiry is None

    async def test_time_until_the_earliest_lease_of_another_worker_expires(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await acquire_job(state_adapter, await start(state_adapter, now=now), now=now, worker_id=B)
        soon = now + timedelta(seconds=5)
        await acquire_job(state_adapter, await start(state_adapter, now=soon), now=soon, worker_id=C)
        at = now + timedelta(seconds=12)
        result = await heartbeat(state_adapter, beat(A, now=at))
        assert_duration(state_adapter, result.next_lease_expiry, LEASE - timedelta(seconds=12))

    async def test_the_callers_own_jobs_do_not_count(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await acquire_job(state_adapter, await start(state_adapter, now=now), now=now, worker_id=A)
        assert (await heartbeat(state_adapter, beat(A, now=now))).next_lease_expiry is None
        later = now + timedelta(seconds=20)
        await acquire_job(state_adapter, await start(state_adapter, now=later), now=later, worker_id=B)
        result = await heartbeat(state_adapter, beat(A, now=later))
        assert_duration(state_adapter, result.next_lease_expiry, LEASE)

    async def test_zero_when_a_lease_already_expired(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await acquire_job(state_adapter, await start(state_adapter, now=now), now=now, worker_id=B)
        late = now + LEASE + timedelta(minutes=3)
        assert (await heartbeat(state_adapter, beat(A, now=late))).next_lease_expiry == timedelta(0)

    async def test_only_jobs_of_the_heartbeats_types_count(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        other = await start(state_adapter, now=now, type_name="other")
        await acquire_job(state_adapter, other, now=now, worker_id=B)
        assert (await heartbeat(state_adapter, beat(A, now=now, type_names=[TYPE]))).next_lease_expiry is None
        both = await heartbeat(state_adapter, beat(A, now=now, type_names=[TYPE, "other"]))
        assert_duration(state_adapter, both.next_lease_expiry, LEASE)


class WorkersListTests:
    """workers_list: reported state, newest start first (then id), filtered by reported state."""

    async def test_empty_registry_lists_nothing(self, state_adapter: StateAdapter, now: datetime) -> None:
        assert await workers(state_adapter, now=now) == []

    async def test_most_recently_started_first_and_a_later_heartbeat_keeps_the_place(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        for offset, worker_id in enumerate([B, A, C]):
            await heartbeat(state_adapter, beat(worker_id, now=now + timedelta(seconds=offset)))
        await heartbeat(state_adapter, beat(B, now=now + timedelta(seconds=5)))
        assert ids_of(await workers(state_adapter, now=now + timedelta(seconds=5))) == [C, A, B]

    async def test_workers_started_together_are_listed_by_id(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        for worker_id in [C, A, B]:
            await heartbeat(state_adapter, beat(worker_id, now=now))
        assert ids_of(await workers(state_adapter, now=now)) == [A, B, C]

    async def test_a_lapsed_worker_is_reported_dead_before_anyone_marks_it(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(A, now=now))
        await heartbeat(state_adapter, beat(B, now=now, state=WorkerState.DRAINING))
        await heartbeat(state_adapter, beat(C, now=now, state=WorkerState.STOPPED))
        await heartbeat(state_adapter, beat(D, now=now, alive_for=timedelta(minutes=5)))
        at = now + ALIVE + timedelta(seconds=1)
        states = {row.id: row.state for row in await workers(state_adapter, now=at)}
        assert states == {
            A: WorkerState.DEAD,
            B: WorkerState.DEAD,
            C: WorkerState.STOPPED,
            D: WorkerState.RUNNING,
        }
        draining = await workers(state_adapter, now=now + timedelta(seconds=1), states=["draining"])
        assert ids_of(draining) == [B]

    async def test_states_filter_on_the_reported_state(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(A, now=now))
        await heartbeat(
            state_adapter, beat(B, now=now + timedelta(seconds=1), alive_for=timedelta(minutes=5))
        )
        await heartbeat(state_adapter, beat(C, now=now + timedelta(seconds=2), state=WorkerState.STOPPED))
        at = now + ALIVE + timedelta(seconds=5)
        assert ids_of(await workers(state_adapter, now=at, states=["dead"])) == [A]
        assert ids_of(await workers(state_adapter, now=at, states=["running"])) == [B]
        assert ids_of(await workers(state_adapter, now=at, states=["stopped", "dead"])) == [C, A]
        assert ids_of(await workers(state_adapter, now=at, states=["draining"])) == []

    async def test_a_worker_marked_dead_lists_as_dead_and_its_fields_stay(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(A, now=now, inflight=2, host="box-1"))
        lapsed = now + ALIVE + timedelta(seconds=5)
        await heartbeat(state_adapter, beat(B, now=lapsed, release_dead=True))
        row = await worker(state_adapter, A, now=lapsed)
        assert row is not None
        assert (row.state, row.inflight, row.host) == (WorkerState.DEAD, 2, "box-1")
        assert_time(state_adapter, row.last_seen_at, now)
        assert ids_of(await workers(state_adapter, now=lapsed, states=["dead"])) == [A]
