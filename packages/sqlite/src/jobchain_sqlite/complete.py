"""jobs_complete: many completions in one statement, each decided as job_complete decides it.

A worker's group commit hands over completions of jobs it holds, with distinct ids. They
take one UPDATE … FROM … RETURNING; only when something needs more does another statement
run: a read of the refused items (to say why each was refused) and one unblock for all the
chains that completed here and block other jobs. Anything else (a repeated id, a workerless
completion, whose previous holder must be read first) completes item by item through
job_complete, so every item is decided exactly as the sequential calls would decide it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

from jobchain.contracts.state import COMPLETION_REFUSALS, JobComplete, JobCompleted
from jobchain.entities import Job, JobStatus, utcnow
from jobchain.errors import (
    JobAlreadyCompletedError,
    JobCancelledError,
    JobchainError,
    JobFinishedError,
    JobNotFoundError,
    JobTakenByAnotherWorkerError,
)
from jobchain_sqlite.context import TxContext
from jobchain_sqlite.rows import (
    completed_from_running,
    dump_json,
    fmt_time,
    job_from_row,
    json_list,
    load_json,
    parse_time,
    running_job_from_row,
)


def lease_error(job_id: str, worker_id: str | None, job: Job | None) -> JobchainError:
    """Why a guarded write to ``job_id`` by ``worker_id`` changed nothing (``job`` as it is now).

    Fencing (state contract): a worker's write to a cancelled job raises JobCancelledError,
    to a job another attempt failed JobTakenByAnotherWorkerError; a workerless write to a
    failed or cancelled job raises JobFinishedError.
    """
    if job is None:
        return JobNotFoundError(job_id)
    status = job.status
    if status is JobStatus.COMPLETED:
        return JobAlreadyCompletedError(job_id)
    if worker_id is None and status in _FINISHED:
        return JobFinishedError(job_id, status.value)
    if status is JobStatus.CANCELLED:
        return JobCancelledError(job_id, job.cancel_reason)
    return JobTakenByAnotherWorkerError(job_id, worker_id, job.leased_by)


_FINISHED = (JobStatus.FAILED, JobStatus.CANCELLED)


def _known(item: JobComplete) -> bool:
    """Whether ``item`` carries the job as claimed under the lease it completes."""
    running = item.running
    return (
        running is not None
        and item.lease_generation is not None
        and running.id == item.job_id
        and running.status is JobStatus.RUNNING
        and running.lease_generation == item.lease_generation
        and running.leased_by == item.worker_id
    )


async def _refused_or(completion: Awaitable[JobCompleted]) -> JobCompleted | JobchainError:
    try:
        return await completion
    except COMPLETION_REFUSALS as refused:
        return refused


async def jobs_complete(
    ctx: TxContext,
    params: Sequence[JobComplete],
    complete_one: Callable[[JobComplete], Awaitable[JobCompleted]],
) -> list[JobCompleted | JobchainError]:
    """See CompletesJobsInBatches.jobs_complete: refusals are returned in their item's place."""
    ctx.require_write("jobs_complete")
    items = list(params)
    if not items:
        return []
    ids = [item.job_id for item in items]
    if len(set(ids)) != len(ids) or any(item.worker_id is None for item in items):
        return [await _refused_or(complete_one(item)) for item in items]

    default_now = fmt_time(utcnow())
    nows = [default_now if item.now is None else fmt_time(item.now) for item in items]
    outputs = [dump_json(item.output, f"output of job {item.job_id}") for item in items]
    encoded = [
        [item.job_id, item.worker_id, item.lease_generation, output, now]
        for item, output, now in zip(items, outputs, nows, strict=True)
    ]
    payload = {"items": json.dumps(encoded, separators=(",", ":"))}
    completed: dict[str, tuple[Job, bool, bool]]
    if all(_known(item) for item in items):
        # The plain group commit: the jobs are built from the worker's copies (see
        # JobComplete.running), so the statement returns three columns instead of 29.
        known = {row[0].job_id: row for row in zip(items, outputs, nows, strict=True)}
        times: dict[str, datetime] = {}
        completed = {}
        for row in await ctx.fetch(ctx.q.jobs_complete_known, payload):
            item, output, now = known[row["id"]]
            at = times.get(now) or times.setdefault(now, parse_time(now))
            job = completed_from_running(item.running, load_json(output), at, item.worker_id)  # type: ignore[arg-type]
            completed[job.id] = (job, not row["has_next"], bool(row["is_blocker"]))
    else:
        completed = {
            row["id"]: (running_job_from_row(row), not row["has_next"], bool(row["is_blocker"]))
            for row in await ctx.fetch(ctx.q.jobs_complete, payload)
        }

    refused: dict[str, Job] = {}
    if len(completed) < len(items):
        missing = [job_id for job_id in ids if job_id not in completed]
        found = await ctx.fetch(ctx.q.jobs_get, {"job_ids": json_list(missing)})
        refused = {job.id: job for job in map(job_from_row, found)}

    unblocked: dict[int, list[Job]] = {}
    done = [
        [completed[item.job_id][0].chain_id, position, now]
        for position, (item, now) in enumerate(zip(items, nows, strict=True))
        if item.job_id in completed and completed[item.job_id][1] and completed[item.job_id][2]
    ]
    if done:
        released = await ctx.fetch(ctx.q.jobs_unblock, {"done": json.dumps(done, separators=(",", ":"))})
        for row in released:
            unblocked.setdefault(row["position"], []).append(job_from_row(row))

    results: list[JobCompleted | JobchainError] = []
    for position, item in enumerate(items):
        outcome = completed.get(item.job_id)
        if outcome is None:
            results.append(lease_error(item.job_id, item.worker_id, refused.get(item.job_id)))
            continue
        job, chain_completed, _ = outcome
        results.append(
            JobCompleted(
                job=job,
                chain_completed=chain_completed,
                unblocked_jobs=sorted(unblocked.get(position, ()), key=lambda j: (j.created_at, j.id)),
                previous_leased_by=item.worker_id,
                was_running=True,
            )
        )
    return results


__all__ = ["jobs_complete", "lease_error"]
