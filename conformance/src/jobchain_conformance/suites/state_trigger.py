"""jobs_trigger: pending jobs become eligible now, all-or-nothing, reported instead of raised."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest

from jobchain.contracts import StateAdapter
from jobchain.entities import Job, JobStatus, Schedule, new_id
from jobchain_conformance.helpers import (
    acquire,
    acquire_job,
    assert_time,
    complete,
    get_job,
    ids,
    start,
    trigger,
)

LATER = Schedule(after=timedelta(hours=1))


async def _job_in_status(adapter: StateAdapter, status: JobStatus, now: datetime) -> Job:
    """A job of type ``t`` in ``status`` (blocked, running or completed)."""
    if status is JobStatus.BLOCKED:
        blocker = await start(adapter, now=now, type_name="blocker")
        return await start(adapter, now=now, blocker_chain_ids=[blocker.id])
    if status is JobStatus.RUNNING:
        return await acquire_job(adapter, await start(adapter, now=now), now=now)
    return (await complete(adapter, (await start(adapter, now=now)).id, now=now)).job


class JobsTriggerTests:
    """jobs_trigger: make pending jobs eligible now."""

    async def test_trigger_sets_scheduled_at_of_a_pending_job_to_now(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now, schedule=LATER)
        at = now + timedelta(minutes=1)
        result = await trigger(state_adapter, [job.id], now=at)
        assert ids(result.triggered) == [job.id]
        assert_time(state_adapter, result.triggered[0].scheduled_at, at)
        assert_time(state_adapter, (await get_job(state_adapter, job.id)).scheduled_at, at)

    async def test_triggered_future_job_becomes_acquirable(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now, schedule=LATER)
        assert (await acquire(state_adapter, now=now)).jobs == []
        await trigger(state_adapter, [job.id], now=now)
        assert ids((await acquire(state_adapter, now=now)).jobs) == [job.id]

    async def test_trigger_changes_nothing_but_scheduled_at(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now, schedule=LATER, input={"keep": [1, 2]})
        await trigger(state_adapter, [job.id], now=now + timedelta(minutes=1))
        after = await get_job(state_adapter, job.id)
        assert after == dataclasses.replace(job, scheduled_at=after.scheduled_at)
        assert after.status is JobStatus.PENDING

    async def test_trigger_answers_several_jobs_in_input_order(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        jobs = [await start(state_adapter, now=now, schedule=LATER) for _ in range(3)]
        order = [jobs[1].id, jobs[2].id, jobs[0].id]
        result = await trigger(state_adapter, order, now=now)
        assert ids(result.triggered) == order
        assert (result.not_found, result.not_triggerable) == ([], [])

    async def test_trigger_with_no_ids_returns_empty_buckets(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        result = await trigger(state_adapter, [], now=now)
        assert (result.triggered, result.not_found, result.not_triggerable) == ([], [], [])

    async def test_trigger_reports_missing_ids_and_triggers_nothing(
        self, state_adapter: StateAdapter, now: datetime
    ) -> None:
        job = await start(state_adapter, now=now, schedule=LATER)
        missing = new_id()
        result = await trigger(state_adapter, [job.id, missing], now=now)
        assert (result.triggered, result.not_found) == ([], [missing])
        assert await get_job(state_adapter, job.id) == job

    @pytest.mark.parametrize("status", [JobStatus.RUNNING, JobStatus.BLOCKED, JobStatus.COMPLETED])
    async def test_trigger_reports_non_pending_jobs_with_their_status_and_triggers_nothing(
        self, state_adapter: StateAdapter, now: datetime, status: JobStatus
    ) -> None:
        pending = await start(state_adapter, now=now, type_name="p", schedule=LATER)
        other = await _job_in_status(state_adapter, status, now)
        result = await trigger(state_adapter, [pending.id, other.id], now=now)
        assert result.triggered == []
        assert result.not_triggerable == [(other.id, status.value)]
        assert await get_job(state_adapter, pending.id) == pending
        assert await get_job(state_adapter, other.id) == other
