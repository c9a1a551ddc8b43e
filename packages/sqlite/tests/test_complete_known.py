"""jobs_complete with the worker's copies (JobComplete.running): the group commit's plain path.

The adapter builds the completed jobs from the copies instead of reading 29 columns back, so
each test checks the built job against the stored row and against the path that reads it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from jobchain.contracts import (
    ChainsCancel,
    CompletesJobsInBatches,
    JobComplete,
    JobCompleted,
    JobGet,
    JobRenewLease,
    JobReschedule,
    JobsAcquire,
    JobsCreate,
    NewJob,
)
from jobchain.entities import AttemptError, Job, JobStatus, Schedule, new_id
from jobchain.errors import JobCancelledError, JobTakenByAnotherWorkerError
from jobchain_sqlite import SqliteStateAdapter
from jobchain_sqlite.queries import queries

LEASE = timedelta(seconds=30)
NOW = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def _new(type_name: str = "t", **fields: object) -> NewJob:
    return NewJob(id=new_id(), type_name=type_name, chain_type_name=type_name, **fields)  # type: ignore[arg-type]


async def _claim(adapter: SqliteStateAdapter, now: datetime = NOW) -> list[Job]:
    async with adapter.transaction() as tx:
        claimed = await tx.jobs_acquire(
            JobsAcquire(type_names=["t"], worker_id="w", lease_for=LEASE, limit=10, now=now)
        )
    return sorted(claimed.jobs, key=lambda job: job.id)


async def _history(adapter: SqliteStateAdapter) -> tuple[list[Job], NewJob]:
    """Claimed jobs that carry everything a row can: an error history, a renewed lease, trace
    contexts, a continuation after them and a dependent blocked by one of them."""
    worn, plain, blocker = (
        _new(input={"a": [1, None]}, trace_context={"tp": "00-a"}, chain_trace_context={"c": 1}),
        _new(),
        _new(),
    )
    dependent = _new("dep", blocker_chain_ids=[blocker.id])
    async with adapter.transaction() as tx:
        await tx.jobs_create(JobsCreate(jobs=[worn, plain, blocker, dependent], now=NOW))
    [first] = [job for job in await _claim(adapter) if job.id == worn.id]
    error = AttemptError(attempt=1, worker_id="w", error_type="ValueError", message="boom", at=NOW)
    async with adapter.transaction() as tx:
        # The other two stay claimed by this first claim; the worn one fails once and returns.
        await tx.job_reschedule(
            JobReschedule(
                job_id=worn.id,
                worker_id="w",
                lease_generation=first.lease_generation,
                schedule=Schedule(at=NOW),
                error="boom",
                attempt_error=error,
                now=NOW,
            )
        )
    later = NOW + timedelta(seconds=5)
    [again] = await _claim(adapter, later)
    async with adapter.transaction() as tx:
        await tx.job_renew_lease(
            JobRenewLease(
                job_id=worn.id, worker_id="w", lease_generation=again.lease_generation, lease_for=LEASE
            )
        )
        claimed = [await tx.job_get(JobGet(job_id=job_id)) for job_id in (plain.id, blocker.id)]
    assert again.attempt_errors
    assert again.attempt == 2
    # The copies a worker holds: the renewal's new leased_until is not in them (workers keep
    # the claimed Job), which the completed job clears anyway.
    return [again, *(job for job in claimed if job is not None)], dependent


class TestKnownCompletions:
    async def test_built_jobs_equal_the_stored_rows_and_the_read_back_path(self, tmp_path: Path) -> None:
        results: dict[str, list[JobCompleted]] = {}
        for name in ("known", "read"):
            adapter = SqliteStateAdapter(str(tmp_path / f"{name}.db"))
            await adapter.migrate()
            try:
                jobs, dependent = await _history(adapter)
                done_at = NOW + timedelta(seconds=9)
                params = [
                    JobComplete(
                        job_id=job.id,
                        worker_id="w",
                        lease_generation=job.lease_generation,
                        output={"n": n, "t": (1, 2)},  # a tuple: stored as JSON, read as a list
                        now=done_at,
                        running=job if name == "known" else None,
                    )
                    for n, job in enumerate(jobs)
                ]
                async with adapter.transaction() as tx:
                    assert isinstance(tx, CompletesJobsInBatches)
                    outcome = await tx.jobs_complete(params)
                completed = [result for result in outcome if isinstance(result, JobCompleted)]
                assert len(completed) == 3
                async with adapter.transaction(read_only=True) as tx:
                    for result in completed:
                        assert await tx.job_get(JobGet(job_id=result.job.id)) == result.job
                        assert isinstance(result.job.output, dict)
                        assert result.job.output["t"] == [1, 2]
                    stored_dependent = await tx.job_get(JobGet(job_id=dependent.id))
                assert stored_dependent is not None
                assert stored_dependent.status is JobStatus.PENDING
                assert [job.id for r in completed for job in r.unblocked_jobs] == [dependent.id]
                results[name] = completed
            finally:
                await adapter.close()
        # Both databases hold different ids: compare everything but the ids.
        for known, read in zip(results["known"], results["read"], strict=True):
            assert replace(known.job, id="x", chain_id="x") == replace(read.job, id="x", chain_id="x")
            assert known.chain_completed == read.chain_completed
        assert results["known"][0].job.attempt_errors[0].message == "boom"

    async def test_a_stale_copy_is_not_trusted(self, adapter: SqliteStateAdapter) -> None:
        job = _new()
        async with adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[job], now=NOW))
        [claimed] = await _claim(adapter)
        # The copy names an older generation than the item: the adapter reads the row back,
        # and the guard (generation) refuses as it always does.
        stale = replace(claimed, lease_generation=claimed.lease_generation - 1)
        async with adapter.transaction() as tx:
            assert isinstance(tx, CompletesJobsInBatches)
            [refused] = await tx.jobs_complete(
                [
                    JobComplete(
                        job_id=job.id, worker_id="w", lease_generation=stale.lease_generation, running=stale
                    )
                ]
            )
            [done] = await tx.jobs_complete(
                [
                    JobComplete(
                        job_id=job.id,
                        worker_id="w",
                        lease_generation=claimed.lease_generation,
                        running=replace(claimed, input={"not": "stored"}),  # same generation, other data
                        now=NOW,
                    )
                ]
            )
        assert isinstance(refused, JobTakenByAnotherWorkerError)
        assert isinstance(done, JobCompleted)
        # A copy with the matching generation is the claimed row by contract (JobComplete.running).
        assert done.job.input == {"not": "stored"}

    async def test_a_cancelled_job_refuses_the_known_path_too(self, adapter: SqliteStateAdapter) -> None:
        job = _new()
        async with adapter.transaction() as tx:
            await tx.jobs_create(JobsCreate(jobs=[job], now=NOW))
        [claimed] = await _claim(adapter)
        async with adapter.transaction() as tx:
            await tx.chains_cancel(ChainsCancel(chain_ids=[job.id], reason="stop", now=NOW))
        async with adapter.transaction() as tx:
            assert isinstance(tx, CompletesJobsInBatches)
            [refused] = await tx.jobs_complete(
                [
                    JobComplete(
                        job_id=job.id,
                        worker_id="w",
                        lease_generation=claimed.lease_generation,
                        running=claimed,
                    )
                ]
            )
            stored = await tx.job_get(JobGet(job_id=job.id))
        assert isinstance(refused, JobCancelledError)
        assert stored is not None
        assert stored.status is JobStatus.CANCELLED

    async def test_known_completion_drives_primary_key_lookups(
        self, adapter: SqliteStateAdapter, db_path: Path
    ) -> None:
        with sqlite3.connect(db_path) as conn:
            plan = conn.execute(
                f"EXPLAIN QUERY PLAN {queries('jobchain_').jobs_complete_known}", {"items": "[]"}
            )
            details = [str(row[-1]) for row in plan]
        conn.close()
        assert details[0].startswith("SCAN json_each")
        assert any("USING INDEX sqlite_autoindex_jobchain_job_1" in d or "PRIMARY KEY" in d for d in details)
