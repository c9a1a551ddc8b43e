"""SqliteTx: the StateTx operations on one SQLite transaction (or savepoint).

Most operations are one statement. Where SQLite needs more (no writable CTEs, RETURNING
cannot show a row's previous values), the extra statements are named in the docstring and
run under the write lock the transaction already holds, so they see a consistent state.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta

from jobchain.contracts.end_hooks import EndHooksRegister
from jobchain.contracts.lifecycle import cancel_dry_run
from jobchain.contracts.scheduling import (
    JobWait,
    JobWaited,
    PausedTypesList,
    SchedulesList,
    SchedulesRegister,
    TypesPause,
)
from jobchain.contracts.sessions import SessionRevoked, SessionsRevoke
from jobchain.contracts.state import (
    BlockedJobsList,
    ChainGet,
    ChainJobsList,
    ChainsCancel,
    ChainsCancelled,
    ChainsDelete,
    ChainsDeleted,
    ChainsList,
    ChainsPrune,
    ChainsPruned,
    JobBlockersGet,
    JobComplete,
    JobCompleted,
    JobCreated,
    JobFail,
    JobFailed,
    JobGet,
    JobNextAvailable,
    JobRenewLease,
    JobReschedule,
    JobsAcquire,
    JobsAcquired,
    JobsCreate,
    JobsList,
    JobsReapExpired,
    JobsRetried,
    JobsRetry,
    JobsTrigger,
    JobsTriggered,
    QueueStatsGet,
    StateTx,
    WorkerHeartbeat,
    WorkerHeartbeatResult,
    WorkersList,
)
from jobchain.entities import (
    ATTEMPT_ERRORS_KEPT,
    Chain,
    Job,
    JobStatus,
    Page,
    PausedType,
    ScheduleRecord,
    WorkerInfo,
    utcnow,
)
from jobchain.errors import (
    BlockerReference,
    JobchainError,
)
from jobchain.stats import QueueStats
from jobchain_sqlite import claims, end_hooks, lifecycle, listing, scheduling, sessions, stats, workers
from jobchain_sqlite.complete import jobs_complete, lease_error
from jobchain_sqlite.context import TxContext
from jobchain_sqlite.create import jobs_create
from jobchain_sqlite.rows import (
    attempt_error_json,
    chains_from_jobs,
    dump_json,
    fmt_time,
    job_from_row,
    json_list,
    parse_time,
)


class SqliteTx:
    """One open transaction or savepoint. Create it through ``SqliteStateAdapter.transaction``."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: TxContext) -> None:
        self._ctx = ctx

    # ------------------------------------------------------------ savepoints

    def savepoint(self) -> AbstractAsyncContextManager[StateTx]:
        """Nested unit of work: released on success, rolled back (and re-raised) on error."""
        return self._savepoint()

    @asynccontextmanager
    async def _savepoint(self) -> AsyncIterator[StateTx]:
        ctx = self._ctx
        ctx.savepoints += 1
        name = f"jobchain_sp_{ctx.savepoints}"
        await ctx.fetch(f"SAVEPOINT {name}")
        try:
            yield SqliteTx(ctx)
        except BaseException:
            if not ctx.closed:
                try:
                    await ctx.fetch(f"ROLLBACK TO SAVEPOINT {name}")
                    await ctx.fetch(f"RELEASE SAVEPOINT {name}")
                except JobchainError:
                    pass  # SQLite already rolled the whole transaction back; report the original error
            raise
        else:
            await ctx.fetch(f"RELEASE SAVEPOINT {name}")

    # ------------------------------------------------------------ creation

    async def jobs_create(self, params: JobsCreate) -> list[JobCreated]:
        """Lookup, batch insert and blocker insert: at most three statements (see create.py)."""
        return await jobs_create(self._ctx, params)

    # ------------------------------------------------------------ reads

    async def chain_get(self, params: ChainGet) -> Chain | None:
        """One statement. ``lock=True`` holds already: write transactions own the write lock."""
        if params.lock:  # a read-only transaction holds no write lock, so it cannot lock
            self._ctx.require_write("chain_get with lock=True")
        rows = await self._ctx.fetch(self._ctx.q.chain_get, {"chain_id": params.chain_id})
        return chains_from_jobs([job_from_row(row) for row in rows]).get(params.chain_id)

    async def job_get(self, params: JobGet) -> Job | None:
        if params.lock:
            self._ctx.require_write("job_get with lock=True")
        rows = await self._ctx.fetch(self._ctx.q.job_get, {"job_id": params.job_id})
        return job_from_row(rows[0]) if rows else None

    async def job_blockers_get(self, params: JobBlockersGet) -> list[Chain]:
        rows = await self._ctx.fetch(self._ctx.q.job_blockers_get, {"job_id": params.job_id})
        order: list[str] = []
        jobs: list[Job] = []
        for row in rows:
            job = job_from_row(row)
            if not order or order[-1] != job.chain_id:
                order.append(job.chain_id)
            jobs.append(job)
        chains = chains_from_jobs(jobs)
        return [chains[chain_id] for chain_id in order if chain_id in chains]

    async def job_next_available(self, params: JobNextAvailable) -> timedelta | None:
        if not params.type_names:
            return None
        rows = await self._ctx.fetch(
            self._ctx.q.job_next_available, {"type_names": json_list(params.type_names)}
        )
        next_at = rows[0]["next_at"] if rows else None
        if next_at is None:
            return None
        return max(timedelta(0), parse_time(next_at) - (params.now or utcnow()))

    # ------------------------------------------------------------ worker transitions

    async def jobs_acquire(self, params: JobsAcquire) -> JobsAcquired:
        """One UPDATE … RETURNING for a plain claim; a read, an UPDATE and (for rate-limited
        types) a counter upsert otherwise (see claims.py)."""
        return await claims.jobs_acquire(self._ctx, params)

    async def job_renew_lease(self, params: JobRenewLease) -> Job:
        ctx = self._ctx
        ctx.require_write("job_renew_lease")
        now = params.now or utcnow()
        rows = await ctx.fetch(
            ctx.q.job_renew_lease,
            {
                "job_id": params.job_id,
                "worker_id": params.worker_id,
                "lease_generation": params.lease_generation,
                "leased_until": fmt_time(now + params.lease_for),
            },
        )
        if rows:
            return job_from_row(rows[0])
        raise lease_error(params.job_id, params.worker_id, await self.job_get(JobGet(job_id=params.job_id)))

    async def job_reschedule(self, params: JobReschedule) -> Job:
        ctx = self._ctx
        ctx.require_write("job_reschedule")
        now = params.now or utcnow()
        rows = await ctx.fetch(
            ctx.q.job_reschedule,
            {
                "job_id": params.job_id,
                "worker_id": params.worker_id,
                "lease_generation": params.lease_generation,
                "scheduled_at": fmt_time(params.schedule.resolve(now)),
                "now": fmt_time(now),
                "error": params.error,
                "attempt_error": attempt_error_json(params.attempt_error),
                "errors_kept": ATTEMPT_ERRORS_KEPT,
                "released": 1 if params.released else 0,
            },
        )
        if rows:
            return job_from_row(rows[0])
        raise lease_error(params.job_id, params.worker_id, await self.job_get(JobGet(job_id=params.job_id)))

    async def job_complete(self, params: JobComplete) -> JobCompleted:
        """UPDATE … RETURNING, plus job_unblock when a chain that blocks others completed.

        A workerless completion first reads the job: RETURNING shows only the new row, and
        the caller needs the previous lease holder. With a worker id that is the worker.
        """
        ctx = self._ctx
        ctx.require_write("job_complete")
        now = params.now or utcnow()
        before: Job | None = None
        if params.worker_id is None:
            before = await self.job_get(JobGet(job_id=params.job_id))
            if before is None or before.status.terminal:
                raise lease_error(params.job_id, None, before)
        rows = await ctx.fetch(
            ctx.q.job_complete,
            {
                "job_id": params.job_id,
                "worker_id": params.worker_id,
                "lease_generation": params.lease_generation,
                "output": dump_json(params.output, f"output of job {params.job_id}"),
                "now": fmt_time(now),
            },
        )
        if not rows:
            raise lease_error(
                params.job_id, params.worker_id, await self.job_get(JobGet(job_id=params.job_id))
            )
        job = job_from_row(rows[0])
        chain_completed = not rows[0]["has_next"]
        unblocked: list[Job] = []
        if chain_completed and rows[0]["is_blocker"]:
            unblocked_rows = await ctx.fetch(
                ctx.q.job_unblock, {"chain_id": job.chain_id, "now": fmt_time(now)}
            )
            unblocked = sorted(
                (job_from_row(row) for row in unblocked_rows), key=lambda j: (j.created_at, j.id)
            )
        if before is None:
            previous_leased_by, was_running = params.worker_id, True
        else:
            previous_leased_by, was_running = before.leased_by, before.status is JobStatus.RUNNING
        return JobCompleted(
            job=job,
            chain_completed=chain_completed,
            unblocked_jobs=unblocked,
            previous_leased_by=previous_leased_by,
            was_running=was_running,
        )

    async def jobs_complete(self, params: Sequence[JobComplete]) -> list[JobCompleted | JobchainError]:
        """One UPDATE for the whole group, plus a read of refused items and one unblock when
        needed (see complete.py); refusals are returned in place (CompletesJobsInBatches)."""
        return await jobs_complete(self._ctx, params, self.job_complete)

    async def job_fail(self, params: JobFail) -> JobFailed:
        """UPDATE … RETURNING, plus jobs_propagate when the failed chain blocks others."""
        return await lifecycle.job_fail(self._ctx, params, self._job_get)

    async def chains_cancel(self, params: ChainsCancel) -> ChainsCancelled:
        """Lookup, UPDATE, plus jobs_propagate when a cancelled chain blocks others.

        On SQLite a cancel is a write: it waits for the write lock, so it waits for an
        atomic attempt's transaction to end (that attempt holds the lock while it runs).
        """
        if params.dry_run:
            return await cancel_dry_run(self, params)
        return await lifecycle.chains_cancel(self._ctx, params)

    async def jobs_retry(self, params: JobsRetry) -> JobsRetried:
        """Lookup, then one recursive UPDATE (see lifecycle.py)."""
        return await lifecycle.jobs_retry(self._ctx, params)

    async def chains_prune(self, params: ChainsPrune) -> ChainsPruned:
        """One recursive DELETE … RETURNING; ``busy`` is always False (one writer at a time)."""
        return await lifecycle.chains_prune(self._ctx, params)

    async def _job_get(self, job_id: str) -> Job | None:
        return await self.job_get(JobGet(job_id=job_id))

    async def jobs_reap_expired(self, params: JobsReapExpired) -> list[Job]:
        ctx = self._ctx
        ctx.require_write("jobs_reap_expired")
        if not params.type_names:  # params.limit >= 1: JobsReapExpired checks it when built
            return []
        now_at = params.now or utcnow()
        now = fmt_time(now_at)
        candidates = await ctx.fetch(
            ctx.q.jobs_reap_candidates,
            {
                "type_names": json_list(params.type_names),
                "exclude_job_ids": json_list(params.exclude_job_ids),
                "now": now,
                "limit": params.limit,
            },
        )
        if not candidates:
            return []
        # Two statements because the UPDATE's RETURNING shows the cleared lease only: the
        # candidates' order (oldest lease first) is the result's order.
        order = {row["id"]: position for position, row in enumerate(candidates)}
        rows = await ctx.fetch(
            ctx.q.jobs_reap_expired,
            {
                "job_ids": json_list(list(order)),
                "now": now,
                "now_iso": lifecycle.iso(now_at),
                "errors_kept": ATTEMPT_ERRORS_KEPT,
            },
        )
        return sorted((job_from_row(row) for row in rows), key=lambda job: order[job.id])

    # ------------------------------------------------------------ worker registry

    async def worker_heartbeat(self, params: WorkerHeartbeat) -> WorkerHeartbeatResult:
        """Upsert, release dead workers' jobs, prune: a few statements (see workers.py)."""
        return await workers.worker_heartbeat(self._ctx, params)

    async def workers_list(self, params: WorkersList) -> list[WorkerInfo]:
        return await workers.workers_list(self._ctx, params)

    async def queue_stats(self, params: QueueStatsGet) -> QueueStats:
        """One statement for every per-type figure, one more for throughput (see stats.py)."""
        return await stats.queue_stats(self._ctx, params)

    async def jobs_trigger(self, params: JobsTrigger) -> JobsTriggered:
        """One guarded UPDATE; a lookup only when it refuses (to report why)."""
        ctx = self._ctx
        ctx.require_write("jobs_trigger")
        ids = list(dict.fromkeys(params.job_ids))
        if not ids:
            return JobsTriggered()
        args = {
            "job_ids": json_list(ids),
            "distinct_count": len(ids),
            "now": fmt_time(params.now or utcnow()),
        }
        rows = await ctx.fetch(ctx.q.jobs_trigger, args)
        if rows:
            by_id = {row["id"]: job_from_row(row) for row in rows}
            return JobsTriggered(triggered=[by_id[job_id] for job_id in ids])
        found = {row["id"]: row["status"] for row in await ctx.fetch(ctx.q.jobs_trigger_lookup, args)}
        return JobsTriggered(
            not_found=[job_id for job_id in ids if job_id not in found],
            not_triggerable=[
                (job_id, found[job_id]) for job_id in ids if found.get(job_id, "pending") != "pending"
            ],
        )

    async def chains_delete(self, params: ChainsDelete) -> ChainsDeleted:
        """A recursive lookup (set + references), then one DELETE … RETURNING (when not refused)."""
        ctx = self._ctx
        ctx.require_write("chains_delete")
        requested = list(dict.fromkeys(params.chain_ids))
        if not requested:
            return ChainsDeleted(chains=[])
        rows = await ctx.fetch(
            ctx.q.chains_delete_lookup, {"chain_ids": json_list(requested), "cascade": params.cascade}
        )
        chain_set = list(dict.fromkeys(row["chain_id"] for row in rows if row["kind"] == "chain"))
        # By the referencing job's (created_at, id), then the blocker chain's id.
        referencing = sorted(
            (parse_time(row["created_at"]), row["job_id"], row["chain_id"])
            for row in rows
            if row["kind"] == "reference"
        )
        references = [
            BlockerReference(chain_id=chain_id, referenced_by_job_id=job_id)
            for _, job_id, chain_id in referencing
        ]
        if references:
            # Refused: nothing is deleted; the client raises BlockerReferenceError from these.
            return ChainsDeleted(chains=[], blocker_references=references)
        if not chain_set:
            return ChainsDeleted(chains=[])
        args = {"chain_ids": json_list(chain_set)}
        if not ctx.foreign_keys:
            await ctx.fetch(ctx.q.chains_delete_blockers, args)
        jobs = [job_from_row(row) for row in await ctx.fetch(ctx.q.chains_delete, args)]
        keyed = [job.id for job in jobs if job.ordering_key is not None and job.chain_index == 0]
        if keyed:  # a key whose last chain goes forgets it (its next chain follows none)
            await ctx.fetch(ctx.q.ordering_keys_forget, {"chain_ids": json_list(keyed)})
        chains = chains_from_jobs(jobs)
        ordered = [c for c in requested if c in chains] + sorted(
            (c for c in chains if c not in set(requested)), key=lambda c: (chains[c].created_at, c)
        )
        running = [
            j.id for j in sorted(jobs, key=lambda j: (j.created_at, j.id)) if j.status is JobStatus.RUNNING
        ]
        return ChainsDeleted(chains=[chains[c] for c in ordered], running_job_ids=running)

    # ------------------------------------------------------------ listings

    async def chains_list(self, params: ChainsList) -> Page[Chain]:
        return await listing.chains_list(self._ctx, params)

    async def jobs_list(self, params: JobsList) -> Page[Job]:
        return await listing.jobs_list(self._ctx, params)

    async def chain_jobs_list(self, params: ChainJobsList) -> Page[Job]:
        return await listing.chain_jobs_list(self._ctx, params)

    async def blocked_jobs_list(self, params: BlockedJobsList) -> Page[Job]:
        return await listing.blocked_jobs_list(self._ctx, params)

    # ------------------------------------------------------------ scheduling controls

    async def job_wait(self, params: JobWait) -> JobWaited:
        """Two reads, the new blocker rows and one UPDATE (see scheduling.py)."""
        return await scheduling.job_wait(self._ctx, params)

    async def types_pause(self, params: TypesPause) -> list[PausedType]:
        return await scheduling.types_pause(self._ctx, params)

    async def paused_types_list(self, params: PausedTypesList) -> list[PausedType]:
        return await scheduling.paused_types_list(self._ctx, params)

    async def schedules_register(self, params: SchedulesRegister) -> list[ScheduleRecord]:
        return await scheduling.schedules_register(self._ctx, params)

    async def schedules_list(self, params: SchedulesList) -> list[ScheduleRecord]:
        return await scheduling.schedules_list(self._ctx, params)

    # ------------------------------------------------------------ failure and cancel hooks

    async def end_hooks_register(self, params: EndHooksRegister) -> None:
        """One upsert; the hook jobs themselves are started by the job table's triggers
        (migration 0011_end_hooks), in the statement that fails or cancels a job."""
        await end_hooks.end_hooks_register(self._ctx, params)

    # ------------------------------------------------------------ revoked sessions (RevokesSessions)

    async def sessions_revoke(self, params: SessionsRevoke) -> None:
        """Two statements in this write transaction: prune the expired, upsert this one."""
        await sessions.sessions_revoke(self._ctx, params)

    async def session_revoked(self, params: SessionRevoked) -> bool:
        return await sessions.session_revoked(self._ctx, params)


__all__ = ["SqliteTx"]
