"""The lifecycle operations of the in-process state backend: fail, cancel, retry, propagation.

A chain that becomes failed or cancelled reacts down the blocker graph in the same operation
(see ``jobchain.contracts.lifecycle``, *Propagation*); a retry undoes that for the jobs
that failed because of the retried job's chain. Like the other writes (``_writes``), each
function is one synchronous attempt.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from datetime import datetime

from jobchain.contracts.lifecycle import CancelCascade, cancel_cascade
from jobchain.contracts.state import (
    ChainsCancel,
    ChainsCancelled,
    JobFail,
    JobFailed,
    JobsRetried,
    JobsRetry,
)
from jobchain.entities import Job, JobStatus
from jobchain.memory._history import ended_badly, failed_by_blocker, redriven, resolved, with_error
from jobchain.memory._store import created_key, unique
from jobchain.memory._writes import Ctx, owned_job, runs_after_failure, unblock

RETRYABLE = (JobStatus.FAILED, JobStatus.CANCELLED)


def _ends_chain(ctx: Ctx, job: Job) -> bool:
    return ctx.view.chain_member(job.chain_id, job.chain_index + 1) is None


# ---------------------------------------------------------------- propagation


def propagate(ctx: Ctx, ended: list[Job], now: datetime) -> tuple[list[Job], list[Job]]:
    """React to chains that just failed or were cancelled (given by their last jobs).

    First the whole set of blocked dependents that fail (every level) is found, then each
    fails naming the first of its declared blocker chains that ended (so the choice never
    depends on the order of the walk), then opted-in dependents whose blockers are all
    terminal become pending. Returns (failed, unblocked), each by ``(created_at, id)``.
    """
    view = ctx.view
    ends = {job.chain_id: job for job in ended}  # chain id -> the job that ended it
    doomed: dict[str, Job] = {}
    queue = deque(ends)
    while queue:
        chain_id = queue.popleft()
        for job in sorted(view.dependents(chain_id), key=created_key):
            if (
                job.status is JobStatus.BLOCKED
                and not runs_after_failure(view, job, chain_id)
                and job.id not in doomed
            ):
                ctx.lock(job.id)  # before writing any: a dependent changed elsewhere makes us wait
                doomed[job.id] = job
                if job.chain_id not in ends and _ends_chain(ctx, job):  # a blocked job always does
                    ends[job.chain_id] = job
                    queue.append(job.chain_id)
    failed = [
        ctx.put(failed_by_blocker(job, ends[_failing_blocker(ctx, job, ends)], now))
        for job in sorted(doomed.values(), key=created_key)
    ]
    unblocked = [job for chain_id in ends for job in unblock(ctx, chain_id, now, only_opted_in=True)]
    unblocked.sort(key=created_key)
    return failed, unblocked


def _failing_blocker(ctx: Ctx, job: Job, ends: dict[str, Job]) -> str:
    """The first declared blocker of a doomed job that ended and does not run after failure."""
    view = ctx.view
    return next(b for b in view.blockers(job.id) if b in ends and not runs_after_failure(view, job, b))


# ---------------------------------------------------------------- fail


def job_fail(ctx: Ctx, params: JobFail, now: datetime) -> JobFailed:
    job = owned_job(ctx, params.job_id, params.worker_id, params.lease_generation)
    was_running = job.status is JobStatus.RUNNING
    failed = ctx.put(
        replace(
            job,
            status=JobStatus.FAILED,
            failed_at=now,
            last_attempt_at=now,  # as a reschedule records it
            last_attempt_error=params.error,
            attempt_errors=with_error(job.attempt_errors, params.attempt_error),
            leased_by=None,
            leased_until=None,
        )
    )
    failed_jobs, unblocked = propagate(ctx, [failed], now) if _ends_chain(ctx, failed) else ([], [])
    return JobFailed(
        job=failed,
        failed_jobs=failed_jobs,
        unblocked_jobs=unblocked,
        previous_leased_by=job.leased_by,
        was_running=was_running,
    )


# ---------------------------------------------------------------- cancel


def chains_cancel(ctx: Ctx, params: ChainsCancel, now: datetime) -> ChainsCancelled:
    chain_ids = unique(params.chain_ids)
    lasts: list[Job] = []
    not_found: list[str] = []
    not_cancellable: list[tuple[str, str]] = []
    for chain_id in chain_ids:
        last = ctx.view.last_job(chain_id)
        if last is None:
            not_found.append(chain_id)
            continue
        # Through holds: an atomic attempt holding its job must not make the cancel wait.
        ctx.store.lock(ctx.tx, last.id, through_holds=True)
        if last.status.terminal:
            not_cancellable.append((chain_id, last.status.value))
        lasts.append(last)
    if not_found or not_cancellable:
        return ChainsCancelled(not_found=not_found, not_cancellable=not_cancellable)
    plan = _cascade(ctx, chain_ids, params.include_shared) if params.cascade else None
    added: list[Job] = []
    for chain_id in plan.added if plan is not None else ():
        last = ctx.view.last_job(chain_id)
        if last is not None:
            ctx.store.lock(ctx.tx, last.id, through_holds=True)
            added.append(last)

    def cancel_job(last: Job) -> Job:
        return ctx.put(
            replace(
                last,
                status=JobStatus.CANCELLED,
                cancelled_at=now,
                cancel_reason=params.reason,
                leased_by=None,
                leased_until=None,
            ),
            through_holds=True,
        )

    cancelled = [cancel_job(last) for last in lasts]
    cascaded = [cancel_job(last) for last in added]
    running = [last for last in (*lasts, *added) if last.status is JobStatus.RUNNING]
    failed_jobs, unblocked = propagate(ctx, [*cancelled, *cascaded], now)
    return ChainsCancelled(
        cancelled=cancelled,
        running_job_ids=[job.id for job in running],
        previous_leased_by={job.id: job.leased_by for job in running if job.leased_by is not None},
        failed_jobs=failed_jobs,
        unblocked_jobs=unblocked,
        cascaded=cascaded,
        shared=[] if plan is None else plan.shared,
    )


def _open(ctx: Ctx, chain_id: str) -> bool:
    last = ctx.view.last_job(chain_id)
    return last is not None and not last.status.terminal


def _cascade(ctx: Ctx, named: list[str], include_shared: bool) -> CancelCascade:
    """The blocker edges of the non-terminal chains reachable from ``named``, then the plan."""
    view = ctx.view
    seen = set(named)
    queue = deque(named)
    closure: list[str] = []
    while queue:
        for job in view.chain_jobs(queue.popleft()):
            for blocker_id in view.blockers(job.id):
                if blocker_id not in seen and _open(ctx, blocker_id):
                    seen.add(blocker_id)
                    closure.append(blocker_id)
                    queue.append(blocker_id)
    edges = [
        (job.chain_id, blocker_id)
        for blocker_id in closure
        for job in view.dependents(blocker_id)
        if _open(ctx, job.chain_id)
    ]
    order = {chain_id: created_key(view.chain_jobs(chain_id)[0]) for chain_id in closure}
    return cancel_cascade(named, edges, order, include_shared=include_shared)


# ---------------------------------------------------------------- retry


def _bad_blocker(ctx: Ctx, job: Job, *, besides: str | None = None) -> str | None:
    """A failed or cancelled blocker chain that keeps ``job`` (not opted in) from running.

    ``failed_by_chain_id`` first, then the declared blockers in order; ``besides`` is ignored.
    """
    if job.runs_after_failed_blockers:
        return None
    view = ctx.view
    any_end = view.any_end(job.id)
    for chain_id in (job.failed_by_chain_id, *view.blockers(job.id)):
        if (
            chain_id is not None
            and chain_id != besides
            and chain_id not in any_end
            and ended_badly(view.last_job(chain_id))
        ):
            return chain_id
    return None


def _waits(ctx: Ctx, job: Job) -> bool:
    """Whether ``job`` must be blocked: one of its blocker chains does not resolve it yet."""
    view = ctx.view
    return not all(
        resolved(view.last_job(b), runs_after_failed_blockers=runs_after_failure(view, job, b))
        for b in view.blockers(job.id)
    )


def jobs_retry(ctx: Ctx, params: JobsRetry, now: datetime) -> JobsRetried:
    job_ids = unique(params.job_ids)
    found = {job_id: job for job_id in job_ids if (job := ctx.locked_job(job_id)) is not None}
    not_found = [job_id for job_id in job_ids if job_id not in found]
    not_retryable = [
        (job_id, job.status.value) for job_id, job in found.items() if job.status not in RETRYABLE
    ]
    blocked_by_failed = [
        (job_id, chain_id)
        for job_id, job in found.items()
        if job.status in RETRYABLE and (chain_id := _bad_blocker(ctx, job)) is not None
    ]
    if not_found or not_retryable or blocked_by_failed:
        return JobsRetried(
            not_found=not_found, not_retryable=not_retryable, blocked_by_failed=blocked_by_failed
        )
    scheduled_at = now if params.schedule is None else max(params.schedule.resolve(now), now)
    # Every job is back in play before any decides whether it waits: one retried job may
    # block another, whatever their order in the request.
    for job_id in job_ids:
        ctx.put(redriven(found[job_id], JobStatus.PENDING, scheduled_at))
    retried: list[Job] = []
    for job_id in job_ids:
        job = ctx.view.job(job_id)
        assert job is not None  # written just above
        retried.append(ctx.put(replace(job, status=JobStatus.BLOCKED)) if _waits(ctx, job) else job)
    return JobsRetried(retried=retried, reblocked=_reblock_dependents(ctx, retried))


def _reblock_dependents(ctx: Ctx, retried: list[Job]) -> list[Job]:
    """Jobs that failed because a retried chain failed go back to blocked on it, recursively.

    One that another failed or cancelled blocker chain also keeps from running stays failed,
    now naming that chain (retrying that chain brings it back).
    """
    reblocked: list[Job] = []
    queue = deque(retried)
    while queue:
        job = queue.popleft()
        followers = sorted(
            (
                dependent
                for dependent in ctx.view.dependents(job.chain_id)
                if dependent.status is JobStatus.FAILED and dependent.failed_by_chain_id == job.chain_id
            ),
            key=created_key,
        )
        for dependent in followers:
            ctx.lock(dependent.id)
        for dependent in followers:
            other = _bad_blocker(ctx, replace(dependent, failed_by_chain_id=None), besides=job.chain_id)
            if other is not None:
                ctx.put(replace(dependent, failed_by_chain_id=other))
                continue
            back = ctx.put(redriven(dependent, JobStatus.BLOCKED, dependent.scheduled_at))
            reblocked.append(back)
            queue.append(back)
    reblocked.sort(key=created_key)
    return reblocked
