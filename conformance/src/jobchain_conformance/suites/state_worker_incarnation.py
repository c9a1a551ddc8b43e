"""Fenced heartbeats (issue 35): a presumed-dead worker stays dead until it rejoins.

``WorkerHeartbeat.incarnation`` numbers a worker's lives. A heartbeat of an earlier
incarnation than the row's (late, or replayed after a partition), or of the incarnation of a
row marked ``dead``, writes nothing: the row keeps every field, no other worker is marked dead
or released, and the result says ``was_dead``. A heartbeat of a later incarnation is a rejoin:
the row is written as reported. Every case passes ``now``; rows are marked dead by another
worker's ``release_dead`` heartbeat at an injected time.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from jobchain.contracts import StateAdapter
from jobchain.entities import JobStatus, WorkerInfo, WorkerState
from jobchain_conformance.helpers import acquire_job, assert_time, get_job, start
from jobchain_conformance.suites.state_transactions import RollbackError, rolls_back
from jobchain_conformance.suites.state_workers import ALIVE, A, B, C, beat, heartbeat, worker, workers

LAPSED = ALIVE + timedelta(seconds=5)
"""After ``now + LAPSED`` a worker that last beat at ``now`` is past its ``alive_until``."""


async def mark_dead(adapter: StateAdapter, worker_id: str, *, incarnation: int, now: datetime) -> datetime:
    """Register ``worker_id`` at ``now``, let it lapse, have B mark it dead; the time of that."""
    await heartbeat(adapter, beat(worker_id, now=now, incarnation=incarnation))
    at = now + LAPSED
    result = await heartbeat(adapter, beat(B, now=at, release_dead=True))
    assert worker_id in result.dead_worker_ids, f"{worker_id} was not marked dead: {result!r}"
    return at


async def row_of(adapter: StateAdapter, worker_id: str, *, now: datetime) -> WorkerInfo:
    row = await worker(adapter, worker_id, now=now)
    assert row is not None, f"{worker_id} is not listed"
    return row


def assert_same_row(adapter: StateAdapter, actual: WorkerInfo, expected: WorkerInfo) -> None:
    """Every reported field and the liveness times are those of ``expected``."""
    fields = (
        *("id", "name", "host", "pid", "version", "type_names", "concurrency"),
        *("inflight", "buffered", "committing", "capacity", "state"),
    )
    assert {f: getattr(actual, f) for f in fields} == {f: getattr(expected, f) for f in fields}
    assert_time(adapter, actual.started_at, expected.started_at)
    assert_time(adapter, actual.last_seen_at, expected.last_seen_at)
    assert_time(adapter, actual.alive_until, expected.alive_until)


class WorkerIncarnationTests:
    """worker_heartbeat: the fence by incarnation (a presumed-dead worker stays dead)."""

    async def test_a_first_heartbeat_registers_whatever_its_incarnation(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        result = await heartbeat(state_adapter, beat(A, now=now, incarnation=5))
        assert result.was_dead is False
        row = await row_of(state_adapter, A, now=now)
        assert row.state is WorkerState.RUNNING
        # The incarnation was stored: an earlier one is now refused.
        assert (await heartbeat(state_adapter, beat(A, now=now, incarnation=4))).was_dead is True

    async def test_a_heartbeat_of_the_dead_rows_incarnation_keeps_it_dead(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        dead_at = await mark_dead(state_adapter, A, incarnation=1, now=now)
        before = await row_of(state_adapter, A, now=dead_at)
        late = dead_at + timedelta(seconds=1)
        result = await heartbeat(
            state_adapter,
            beat(A, now=late, incarnation=1, inflight=3, buffered=1, committing=4, capacity=9, pid=99),
        )
        assert result.was_dead is True
        assert (result.released_jobs, result.dead_worker_ids) == ([], [])
        row = await row_of(state_adapter, A, now=late)
        assert row.state is WorkerState.DEAD
        assert_same_row(state_adapter, row, before)
        assert_time(state_adapter, row.alive_until, now + ALIVE)

    async def test_every_heartbeat_of_a_dead_incarnation_says_was_dead(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        dead_at = await mark_dead(state_adapter, A, incarnation=0, now=now)
        for second in (1, 2, 3):
            result = await heartbeat(state_adapter, beat(A, now=dead_at + timedelta(seconds=second)))
            assert result.was_dead is True, f"heartbeat {second} of the dead incarnation revived it"
        assert (await row_of(state_adapter, A, now=dead_at + timedelta(seconds=3))).state is WorkerState.DEAD

    async def test_a_stopping_heartbeat_of_a_dead_incarnation_does_not_stop_the_row(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        dead_at = await mark_dead(state_adapter, A, incarnation=2, now=now)
        late = dead_at + timedelta(seconds=1)
        result = await heartbeat(state_adapter, beat(A, now=late, incarnation=2, state=WorkerState.STOPPED))
        assert result.was_dead is True
        assert (await row_of(state_adapter, A, now=late)).state is WorkerState.DEAD

    async def test_a_heartbeat_of_a_higher_incarnation_rejoins(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        dead_at = await mark_dead(state_adapter, A, incarnation=1, now=now)
        back = dead_at + timedelta(seconds=1)
        result = await heartbeat(state_adapter, beat(A, now=back, incarnation=2, inflight=1))
        assert result.was_dead is False
        row = await row_of(state_adapter, A, now=back)
        assert (row.state, row.inflight) == (WorkerState.RUNNING, 1)
        assert_time(state_adapter, row.last_seen_at, back)
        assert_time(state_adapter, row.alive_until, back + ALIVE)
        running = await workers(state_adapter, now=back, states=["running"])
        assert A in [listed.id for listed in running]
        again = await heartbeat(state_adapter, beat(A, now=back + timedelta(seconds=1), incarnation=2))
        assert again.was_dead is False

    async def test_a_higher_incarnation_replaces_a_live_row_as_reported(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(A, now=now, incarnation=1, pid=10))
        later = now + timedelta(seconds=2)
        params = beat(A, now=later, incarnation=3, pid=11, state=WorkerState.DRAINING)
        assert (await heartbeat(state_adapter, params)).was_dead is False
        row = await row_of(state_adapter, A, now=later)
        assert (row.pid, row.state) == (11, WorkerState.DRAINING)
        assert_time(state_adapter, row.alive_until, later + ALIVE)

    async def test_a_late_heartbeat_of_an_earlier_incarnation_after_a_rejoin_changes_nothing(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        dead_at = await mark_dead(state_adapter, A, incarnation=1, now=now)
        back = dead_at + timedelta(seconds=1)
        await heartbeat(state_adapter, beat(A, now=back, incarnation=2))
        before = await row_of(state_adapter, A, now=back)
        late = back + timedelta(seconds=1)
        stale = beat(A, now=late, incarnation=1, pid=99, inflight=4, state=WorkerState.DRAINING)
        result = await heartbeat(state_adapter, stale)
        assert result.was_dead is True
        assert_same_row(state_adapter, await row_of(state_adapter, A, now=late), before)

    async def test_an_earlier_incarnation_never_overwrites_a_live_later_one(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(A, now=now, incarnation=7, alive_for=timedelta(minutes=1)))
        before = await row_of(state_adapter, A, now=now)
        later = now + timedelta(seconds=3)
        result = await heartbeat(state_adapter, beat(A, now=later, incarnation=6, host="elsewhere"))
        assert result.was_dead is True
        assert_same_row(state_adapter, await row_of(state_adapter, A, now=later), before)

    async def test_a_fenced_heartbeat_releases_no_other_workers_jobs(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        dead_at = await mark_dead(state_adapter, A, incarnation=1, now=now)
        await heartbeat(state_adapter, beat(C, now=dead_at))
        job = await acquire_job(
            state_adapter, await start(state_adapter, now=dead_at), now=dead_at, worker_id=C
        )
        lapsed = dead_at + LAPSED  # C is past alive_until too, its job still leased
        result = await heartbeat(state_adapter, beat(A, now=lapsed, incarnation=1, release_dead=True))
        assert result.was_dead is True
        assert (result.released_jobs, result.dead_worker_ids) == ([], [])
        held = await get_job(state_adapter, job.id)
        assert (held.status, held.leased_by) == (JobStatus.RUNNING, C)
        # Not because nothing was releasable: a live worker's heartbeat releases it.
        rescue = await heartbeat(state_adapter, beat(B, now=lapsed + timedelta(seconds=1), release_dead=True))
        assert (rescue.dead_worker_ids, [j.id for j in rescue.released_jobs]) == ([C], [job.id])

    async def test_a_late_heartbeat_of_an_earlier_incarnation_releases_nothing(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        await heartbeat(state_adapter, beat(C, now=now))
        job = await acquire_job(state_adapter, await start(state_adapter, now=now), now=now, worker_id=C)
        lapsed = now + LAPSED
        await heartbeat(state_adapter, beat(A, now=lapsed, incarnation=4))
        result = await heartbeat(state_adapter, beat(A, now=lapsed, incarnation=3, release_dead=True))
        assert result.was_dead is True
        assert (result.released_jobs, result.dead_worker_ids) == ([], [])
        assert (await get_job(state_adapter, job.id)).leased_by == C

    async def test_a_rejoin_releases_dead_workers_like_any_live_heartbeat(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        dead_at = await mark_dead(state_adapter, A, incarnation=1, now=now)
        await heartbeat(state_adapter, beat(C, now=dead_at))
        job = await acquire_job(
            state_adapter, await start(state_adapter, now=dead_at), now=dead_at, worker_id=C
        )
        back = dead_at + LAPSED
        result = await heartbeat(state_adapter, beat(A, now=back, incarnation=2, release_dead=True))
        assert result.was_dead is False
        assert C in result.dead_worker_ids  # B, which marked A dead, lapsed since too
        assert [j.id for j in result.released_jobs] == [job.id]
        assert (await row_of(state_adapter, A, now=back)).state is WorkerState.RUNNING

    async def test_a_rolled_back_rejoin_leaves_the_row_dead_and_fenced(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        dead_at = await mark_dead(state_adapter, A, incarnation=1, now=now)
        back = dead_at + timedelta(seconds=1)
        with rolls_back():
            async with state_adapter.transaction() as tx:
                assert (await tx.worker_heartbeat(beat(A, now=back, incarnation=2))).was_dead is False
                raise RollbackError
        assert (await row_of(state_adapter, A, now=back)).state is WorkerState.DEAD
        assert (await heartbeat(state_adapter, beat(A, now=back, incarnation=1))).was_dead is True
