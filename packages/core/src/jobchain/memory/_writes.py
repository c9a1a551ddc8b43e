"""The write operations (and locked reads) of the in-process state backend.

Each function is one synchronous *attempt* of an operation inside a write transaction.
It reads through the transaction's view and locks every row it changes. When it needs a
row another open transaction holds, it raises :class:`Blocked`; the caller then undoes the
attempt, waits for that transaction to end and runs the attempt again, so the attempt that
finally succeeds ran with every lock it needed (PostgreSQL's ``FOR UPDATE`` wait).
Acquisition (``_claims``) skips locked (and held) rows instead (``SKIP LOCKED``); reaping and
the worker registry live in ``_workers``, fail/cancel/retry and propagation in ``_lifecycle``,
deletion and retention in ``_deletion``, ordering keys in ``_ordering``, waits in ``_waits``,
pause and schedules in ``_scheduling``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from jobchain.contracts.state import (
    JobComplete,
    JobCompleted,
    JobCreated,
    JobRenewLease,
    JobReschedule,
    JobsCreate,
    JobsTrigger,
    JobsTriggered,
    NewJob,
)
from jobchain.entities import Chain, Deduplication, Job, JobStatus, validate_id
from jobchain.errors import (
    ChainNotFoundError,
    DuplicateJobIdError,
    InvalidArgumentError,
    JobAlreadyCompletedError,
    JobCancelledError,
    JobFinishedError,
    JobNotFoundError,
    JobTakenByAnotherWorkerError,
)
from jobchain.memory import _ordering
from jobchain.memory._end_hooks import started_by
from jobchain.memory._history import ended_badly, failed_by_blocker, resolved, with_error
from jobchain.memory._store import NO_FLAGS, Blocked, Store, TxState, created_key, unique
from jobchain.memory._views import View


@dataclass(frozen=True, slots=True)
class Ctx:
    """One attempt of one write operation: the tables, the transaction and what it sees."""

    store: Store
    tx: TxState
    view: View

    def lock(self, job_id: str) -> None:
        self.store.lock(self.tx, job_id)

    def put(
        self,
        job: Job,
        blockers: tuple[str, ...] = (),
        *,
        any_end: frozenset[str] = NO_FLAGS,
        through_holds: bool = False,
    ) -> Job:
        """Write ``job`` (locking it first), then start the hooks its failure or cancel calls for."""
        if job.failed_at is None and job.cancelled_at is None:  # claims, renewals, completions
            self.store.put(self.tx, job.id, job, blockers, any_end=any_end, through_holds=through_holds)
            return job
        before = self.store.row(job.id)
        self.store.put(self.tx, job.id, job, blockers, any_end=any_end, through_holds=through_holds)
        for hook_job in started_by(self.store, self.tx, None if before is None else before[0], job):
            self.store.put(self.tx, hook_job.id, hook_job)
        return job

    def locked_elsewhere(self, job_id: str) -> bool:
        holder = self.store.locks.get(job_id)
        return holder is not None and holder is not self.tx

    def skipped(self, job_id: str) -> bool:
        """Another transaction locks or holds the row: ``SKIP LOCKED`` passes it by."""
        return self.store.held_elsewhere(self.tx, job_id)

    def locked_job(self, job_id: str) -> Job | None:
        """Read a job and lock it (``FOR UPDATE``), or None when this transaction cannot see it."""
        job = self.view.job(job_id)
        if job is not None:
            self.lock(job_id)  # a row visible to us and changed by another tx is locked by it: we wait
        return job

    def await_uncommitted_insert(self, job_id: str) -> None:
        """Like a unique index: a row another open transaction inserted waits for its outcome."""
        inserted_elsewhere = job_id in self.store.preimages and self.store.preimages[job_id] is None
        if inserted_elsewhere and self.locked_elsewhere(job_id):
            raise Blocked(self.store.locks[job_id])


# ---------------------------------------------------------------- creation


def jobs_create(ctx: Ctx, params: JobsCreate, now: datetime) -> list[JobCreated]:
    for new in params.jobs:  # refused before anything of the batch is written
        _check_new_job(new)
    first_of_key: dict[tuple[str, str], Job] = {}  # in-batch deduplication
    results: list[JobCreated] = []
    for new in params.jobs:
        if new.chain_id is None:
            results.append(_create_root(ctx, new, now, first_of_key))
        else:
            results.append(_create_continuation(ctx, new, new.chain_id, now))
    return results


def _check_new_job(new: NewJob) -> None:
    """Ids are UUIDs; a root sits at index 0 and a continuation after it."""
    validate_id(new.id)
    if new.chain_id is None:
        if new.chain_index != 0:
            raise InvalidArgumentError(f"a new chain's first job has chain_index 0, got {new.chain_index!r}")
    elif new.chain_index < 1:
        raise InvalidArgumentError(
            f"continuation {new.id} of chain {new.chain_id} needs chain_index >= 1, got {new.chain_index!r}"
        )


def _create_root(
    ctx: Ctx, new: NewJob, now: datetime, first_of_key: dict[tuple[str, str], Job]
) -> JobCreated:
    dedup = new.deduplication
    if dedup is None:
        return _insert_root(ctx, new, now)
    key = (dedup.key, new.chain_type_name)
    match = first_of_key.get(key)
    if match is None:
        for root_id in ctx.store.dedup.get(key, ()):
            ctx.await_uncommitted_insert(root_id)
        match = _deduplication_match(ctx.view, dedup, new.chain_type_name, now)
    if match is not None:
        first_of_key[key] = match
        return JobCreated(job=match, deduplicated=True)
    created = _insert_root(ctx, new, now)
    first_of_key[key] = created.job
    return created


def _insert_root(ctx: Ctx, new: NewJob, now: datetime) -> JobCreated:
    """A new chain; one with an ordering key takes the key (a deduplicated start never gets here)."""
    if new.ordering_key is None:
        return _insert(ctx, new, new.id, 0, now)
    previous = _ordering.take_key(ctx, new.ordering_key, new.id)
    return _insert(ctx, new, new.id, 0, now, ordered_after=previous)


def _deduplication_match(view: View, dedup: Deduplication, chain_type_name: str, now: datetime) -> Job | None:
    """The newest root of the same key and chain type that the scope and window allow."""
    excluded = set(dedup.exclude_chain_ids)
    best: Job | None = None
    for root in view.dedup_roots(dedup.key, chain_type_name):
        if root.id in excluded:
            continue
        if dedup.window is not None and root.created_at < now - dedup.window:
            continue
        if dedup.scope == "incomplete":
            last = view.last_job(root.id)
            if last is not None and last.status.terminal:  # a finished chain frees its key
                continue
        if best is None or created_key(root) > created_key(best):
            best = root
    return best


def _create_continuation(ctx: Ctx, new: NewJob, chain_id: str, now: datetime) -> JobCreated:
    live_id = ctx.store.chain_member_id(chain_id, new.chain_index)
    if live_id is not None:
        ctx.await_uncommitted_insert(live_id)
    existing = ctx.view.chain_member(chain_id, new.chain_index)
    if existing is not None:
        return JobCreated(job=existing, deduplicated=True)
    last = ctx.view.last_job(chain_id)
    if last is None:
        raise ChainNotFoundError(chain_id)
    ctx.lock(last.id)  # serializes with a concurrent continuation, completion or deletion
    return _insert(ctx, new, chain_id, new.chain_index, now)


def _insert(
    ctx: Ctx, new: NewJob, chain_id: str, chain_index: int, now: datetime, *, ordered_after: str | None = None
) -> JobCreated:
    """Insert one job; ``ordered_after`` (a new root's ordering predecessor, whatever its status)
    is appended to its blockers, resolved by any end (a declared blocker keeps its meaning)."""
    if ctx.locked_elsewhere(new.id):  # being inserted or deleted elsewhere: wait for the outcome
        raise Blocked(ctx.store.locks[new.id])
    if ctx.view.job(new.id) is not None:
        raise DuplicateJobIdError(new.id)
    blockers = tuple(unique(new.blocker_chain_ids))
    any_end = NO_FLAGS
    if ordered_after is not None and ordered_after not in blockers:
        blockers, any_end = (*blockers, ordered_after), frozenset((ordered_after,))
    incomplete: list[str] = []
    failed_by: Job | None = None  # the first blocker chain that ended badly, for a default job
    for blocker_id in blockers:
        last = ctx.view.last_job(blocker_id)
        if last is None:
            raise ChainNotFoundError(blocker_id)
        # Locked so a concurrent completion (or failure) of the blocker cannot miss this new dependent.
        ctx.lock(last.id)
        if not last.status.terminal:
            incomplete.append(blocker_id)
        elif (
            failed_by is None
            and not (new.runs_after_failed_blockers or blocker_id in any_end)
            and ended_badly(last)
        ):
            failed_by = last
    job = Job(
        id=new.id,
        chain_id=chain_id,
        type_name=new.type_name,
        chain_type_name=new.chain_type_name,
        chain_index=chain_index,
        status=JobStatus.BLOCKED if incomplete else JobStatus.PENDING,
        input=new.input,
        created_at=now,
        scheduled_at=new.schedule.resolve(now) if new.schedule is not None else now,
        deduplication_key=new.deduplication.key if new.deduplication is not None else None,
        trace_context=new.trace_context,
        chain_trace_context=new.chain_trace_context,
        runs_after_failed_blockers=new.runs_after_failed_blockers,
        priority=new.priority,
        ordering_key=new.ordering_key if chain_index == 0 else None,  # continuations never carry it
    )
    if failed_by is not None:  # its blocker already failed: it fails as it would have then
        job = failed_by_blocker(job, failed_by, now)
    ctx.put(job, blockers, any_end=any_end)
    return JobCreated(job=job, incomplete_blocker_chain_ids=tuple(incomplete), ordered_after=ordered_after)


# ---------------------------------------------------------------- locked reads


def job_get_locked(ctx: Ctx, job_id: str) -> Job | None:
    """A hold, not a write lock: claims and reaps skip the row, a cancellation does not wait."""
    job = ctx.view.job(job_id)
    if job is not None:
        ctx.store.hold(ctx.tx, job_id)
    return job


def chain_get_locked(ctx: Ctx, chain_id: str) -> Chain | None:
    last = ctx.view.last_job(chain_id)
    if last is None:
        return None
    ctx.lock(last.id)
    return ctx.view.chain(chain_id)


# ---------------------------------------------------------------- worker transitions


def _open_job(ctx: Ctx, job_id: str, worker_id: str | None) -> Job:
    job = ctx.locked_job(job_id)
    if job is None:
        raise JobNotFoundError(job_id)
    if job.status is JobStatus.COMPLETED:
        raise JobAlreadyCompletedError(job_id)
    if job.status is JobStatus.CANCELLED and worker_id is not None:
        raise JobCancelledError(job_id, job.cancel_reason)
    if job.status.terminal and worker_id is None:
        raise JobFinishedError(job_id, job.status.value)
    return job


def owned_job(ctx: Ctx, job_id: str, worker_id: str | None, lease_generation: int | None) -> Job:
    """The job, locked, if ``worker_id`` (None: anyone) may still write it; else the fencing error."""
    job = _open_job(ctx, job_id, worker_id)
    if worker_id is not None and (
        job.status is not JobStatus.RUNNING
        or job.leased_by != worker_id
        or (lease_generation is not None and lease_generation != job.lease_generation)
    ):
        raise JobTakenByAnotherWorkerError(job_id, worker_id, job.leased_by)
    return job


def job_renew_lease(ctx: Ctx, params: JobRenewLease, now: datetime) -> Job:
    job = owned_job(ctx, params.job_id, params.worker_id, params.lease_generation)
    return ctx.put(replace(job, leased_until=now + params.lease_for))


def job_reschedule(ctx: Ctx, params: JobReschedule, now: datetime) -> Job:
    job = owned_job(ctx, params.job_id, params.worker_id, params.lease_generation)
    rescheduled = replace(
        job,
        status=JobStatus.PENDING,
        scheduled_at=params.schedule.resolve(now),
        last_attempt_at=now,
        last_attempt_error=params.error,
        attempt_errors=with_error(job.attempt_errors, params.attempt_error),
        attempt_base=job.attempt_base + 1 if params.released else job.attempt_base,
        leased_by=None,
        leased_until=None,
    )
    return ctx.put(rescheduled)


def job_complete(ctx: Ctx, params: JobComplete, now: datetime) -> JobCompleted:
    job = owned_job(ctx, params.job_id, params.worker_id, params.lease_generation)
    completed = replace(
        job,
        status=JobStatus.COMPLETED,
        output=params.output,
        completed_at=now,
        completed_by=params.worker_id,
        leased_by=None,
        leased_until=None,
        last_attempt_error=None,
    )
    ctx.put(completed)
    chain_completed = ctx.view.chain_member(job.chain_id, job.chain_index + 1) is None
    return JobCompleted(
        job=completed,
        chain_completed=chain_completed,
        unblocked_jobs=unblock(ctx, job.chain_id, now) if chain_completed else [],
        previous_leased_by=job.leased_by,
        was_running=job.status is JobStatus.RUNNING,
    )


def runs_after_failure(view: View, job: Job, chain_id: str) -> bool:
    """Whether a failed or cancelled ``chain_id`` counts as resolved for ``job``: the job was
    created with ``runs_after_failed_blockers`` or that blocker resolves on any end."""
    return job.runs_after_failed_blockers or chain_id in view.any_end(job.id)


def unblock(ctx: Ctx, chain_id: str, now: datetime, *, only_opted_in: bool = False) -> list[Job]:
    """Move the blocked dependents of a finished chain whose blockers are all resolved to pending.

    A completed chain resolves every dependent; a failed or cancelled one only those for which
    it runs after failure (``only_opted_in``: the others are failed instead).
    """
    view = ctx.view
    candidates = [
        job
        for job in view.dependents(chain_id)
        if job.status is JobStatus.BLOCKED and (not only_opted_in or runs_after_failure(view, job, chain_id))
    ]
    for job in candidates:
        # Locked before deciding: two transactions completing this job's last two blockers
        # concurrently are serialized here, so the second one sees the first one's commit.
        ctx.lock(job.id)
    unblocked: list[Job] = []
    for job in candidates:
        blockers = view.blockers(job.id)
        if all(
            resolved(view.last_job(b), runs_after_failed_blockers=runs_after_failure(view, job, b))
            for b in blockers
        ):
            pending = replace(job, status=JobStatus.PENDING, scheduled_at=max(job.scheduled_at, now))
            unblocked.append(ctx.put(pending))
    unblocked.sort(key=created_key)
    return unblocked


# ---------------------------------------------------------------- operator transitions


def jobs_trigger(ctx: Ctx, params: JobsTrigger, now: datetime) -> JobsTriggered:
    job_ids = unique(params.job_ids)
    found = {job_id: job for job_id in job_ids if (job := ctx.locked_job(job_id)) is not None}
    not_found = [job_id for job_id in job_ids if job_id not in found]
    not_triggerable = [
        (job_id, job.status.value) for job_id, job in found.items() if job.status is not JobStatus.PENDING
    ]
    if not_found or not_triggerable:
        return JobsTriggered(not_found=not_found, not_triggerable=not_triggerable)
    return JobsTriggered(triggered=[ctx.put(replace(found[job_id], scheduled_at=now)) for job_id in job_ids])
