"""The lifecycle operations: fail, cancel, redrive (retry), retention (prune), and the
propagation of failed and cancelled chains down the blocker graph.

Each runs in the caller's write transaction, which holds SQLite's write lock from start to
end, so its statements see one consistent state:

- ``job_fail``: one UPDATE … RETURNING (a workerless failure reads the job first, for its
  previous lease holder); ``jobs_propagate`` only when the failed chain blocks other jobs.
- ``chains_cancel``: a lookup of the chains' last jobs (all-or-nothing, and which were
  running under whose lease: RETURNING cannot show a row's previous values), one UPDATE,
  then ``jobs_propagate`` only when a cancelled chain blocks other jobs. With ``cascade``,
  one recursive SELECT of the blocker edges (``chains_cancel_cascade``) and, when it adds
  chains, the lookup again for them, between the lookup and the UPDATE; a dry run is the
  call in a savepoint rolled back.
- ``jobs_retry``: a lookup (all-or-nothing), then one recursive UPDATE for the jobs and
  their dependents.
- ``chains_prune``: one recursive SELECT of the chains to delete, then (when it found any)
  a DELETE of the ``resolves_on_any_end`` blocker rows on them and a DELETE … RETURNING of
  their jobs (the rows must go first: ``blocked_by_chain_id`` references the root job).
  SQLite runs one writer at a time, so two prunes never overlap: a second one waits for the
  write lock (like any write) and then finds what the first left. ``busy`` is therefore
  always False here.

``jobs_propagate`` is one statement for the whole graph (a recursive CTE), however deep.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

from jobchain.contracts.lifecycle import cancel_cascade
from jobchain.contracts.state import (
    ChainsCancel,
    ChainsCancelled,
    ChainsPrune,
    ChainsPruned,
    JobFail,
    JobFailed,
    JobsRetried,
    JobsRetry,
    PrunedChain,
)
from jobchain.entities import ATTEMPT_ERRORS_KEPT, Job, JobStatus, utcnow
from jobchain_sqlite.complete import lease_error
from jobchain_sqlite.context import TxContext
from jobchain_sqlite.rows import Row, attempt_error_json, fmt_time, job_from_row, json_list, opt_time

_TERMINAL = frozenset({"completed", "failed", "cancelled"})
_FINISHED = frozenset({"failed", "cancelled"})


def _by_creation(jobs: Sequence[Job]) -> list[Job]:
    return sorted(jobs, key=lambda job: (job.created_at, job.id))


def iso(now: datetime) -> str:
    """``now`` as AttemptError.to_json writes ``at`` (ISO 8601, UTC offset)."""
    return now.astimezone(UTC).isoformat()


async def propagate(
    ctx: TxContext, origins: Sequence[tuple[str, str]], now: datetime
) -> tuple[list[Job], list[Job]]:
    """Apply the failure or cancellation of ``origins`` ((chain id, status) pairs) to the jobs
    they block, recursively; returns (jobs failed, jobs made pending), by creation."""
    if not origins:
        return [], []
    rows = await ctx.fetch(
        ctx.q.jobs_propagate,
        {
            "origins": json.dumps([list(origin) for origin in origins], separators=(",", ":")),
            "now": fmt_time(now),
            "now_iso": iso(now),
            "errors_kept": ATTEMPT_ERRORS_KEPT,
        },
    )
    jobs = _by_creation([job_from_row(row) for row in rows])
    return (
        [job for job in jobs if job.status is JobStatus.FAILED],
        [job for job in jobs if job.status is JobStatus.PENDING],
    )


async def job_fail(
    ctx: TxContext, params: JobFail, job_get: Callable[[str], Awaitable[Job | None]]
) -> JobFailed:
    """See StateTx.job_fail: fencing as job_reschedule, then propagation."""
    ctx.require_write("job_fail")
    now = params.now or utcnow()
    before: Job | None = None
    if params.worker_id is None:
        before = await job_get(params.job_id)
        if before is None or before.status.terminal:
            raise lease_error(params.job_id, None, before)
    rows = await ctx.fetch(
        ctx.q.job_fail,
        {
            "job_id": params.job_id,
            "worker_id": params.worker_id,
            "lease_generation": params.lease_generation,
            "now": fmt_time(now),
            "error": params.error,
            "attempt_error": attempt_error_json(params.attempt_error),
            "errors_kept": ATTEMPT_ERRORS_KEPT,
        },
    )
    if not rows:
        raise lease_error(params.job_id, params.worker_id, await job_get(params.job_id))
    job = job_from_row(rows[0])
    failed: list[Job] = []
    unblocked: list[Job] = []
    if rows[0]["is_blocker"]:
        failed, unblocked = await propagate(ctx, [(job.chain_id, "failed")], now)
    if before is None:
        previous_leased_by, was_running = params.worker_id, True
    else:
        previous_leased_by, was_running = before.leased_by, before.status is JobStatus.RUNNING
    return JobFailed(
        job=job,
        failed_jobs=failed,
        unblocked_jobs=unblocked,
        previous_leased_by=previous_leased_by,
        was_running=was_running,
    )


async def chains_cancel(ctx: TxContext, params: ChainsCancel) -> ChainsCancelled:
    """See StateTx.chains_cancel: all-or-nothing, the cascade, then propagation."""
    ctx.require_write("chains_cancel")
    requested = list(dict.fromkeys(params.chain_ids))
    if not requested:
        return ChainsCancelled()
    found = await ctx.fetch(ctx.q.chains_cancel_lookup, {"chain_ids": json_list(requested)})
    not_found = [row["chain_id"] for row in found if row["job_id"] is None]
    not_cancellable = [
        (row["chain_id"], row["status"])
        for row in found
        if row["job_id"] is not None and row["status"] in _TERMINAL
    ]
    if not_found or not_cancellable:
        return ChainsCancelled(not_found=not_found, not_cancellable=not_cancellable)
    added: list[str] = []
    shared: list[str] = []
    if params.cascade:
        edges = await ctx.fetch(ctx.q.chains_cancel_cascade, {"chain_ids": json_list(requested)})
        order = {row["blocker_id"]: (row["created_at"], row["blocker_id"]) for row in edges}
        plan = cancel_cascade(
            requested,
            [(row["dependent_id"], row["blocker_id"]) for row in edges],
            order,
            include_shared=params.include_shared,
        )
        added, shared = plan.added, plan.shared
        if added:  # all non-terminal: the write lock is held since the lookup
            found = [*found, *await ctx.fetch(ctx.q.chains_cancel_lookup, {"chain_ids": json_list(added)})]
    running = {row["job_id"]: row["leased_by"] for row in found if row["status"] == "running"}
    now = params.now or utcnow()
    rows = await ctx.fetch(
        ctx.q.chains_cancel,
        {
            "job_ids": json_list(row["job_id"] for row in found),
            "now": fmt_time(now),
            "reason": params.reason,
        },
    )
    by_chain: dict[str, tuple[Job, Row]] = {}
    for row in rows:
        job = job_from_row(row)
        by_chain[job.chain_id] = (job, row)
    cancelled = [by_chain[chain_id][0] for chain_id in requested]
    cascaded = [by_chain[chain_id][0] for chain_id in added]
    failed, unblocked = await propagate(
        ctx,
        [(chain_id, "cancelled") for chain_id in (*requested, *added) if by_chain[chain_id][1]["is_blocker"]],
        now,
    )
    return ChainsCancelled(
        cancelled=cancelled,
        running_job_ids=[job.id for job in (*cancelled, *cascaded) if job.id in running],
        previous_leased_by={
            job_id: leased_by for job_id, leased_by in running.items() if leased_by is not None
        },
        failed_jobs=failed,
        unblocked_jobs=unblocked,
        cascaded=cascaded,
        shared=shared,
    )


async def jobs_retry(ctx: TxContext, params: JobsRetry) -> JobsRetried:
    """See StateTx.jobs_retry: all-or-nothing; dependents failed by a redriven chain follow."""
    ctx.require_write("jobs_retry")
    ids = list(dict.fromkeys(params.job_ids))
    if not ids:
        return JobsRetried()
    args = {"job_ids": json_list(ids)}
    found = {row["id"]: row for row in await ctx.fetch(ctx.q.jobs_retry_lookup, args)}
    not_found = [job_id for job_id in ids if job_id not in found]
    not_retryable = [
        (job_id, found[job_id]["status"])
        for job_id in ids
        if job_id in found and found[job_id]["status"] not in _FINISHED
    ]
    blocked_by_failed = [
        (job_id, found[job_id]["bad_blocker"])
        for job_id in ids
        if job_id in found
        and found[job_id]["status"] in _FINISHED
        and found[job_id]["bad_blocker"] is not None
    ]
    if not_found or not_retryable or blocked_by_failed:
        return JobsRetried(
            not_found=not_found, not_retryable=not_retryable, blocked_by_failed=blocked_by_failed
        )
    now = params.now or utcnow()
    scheduled_at = now if params.schedule is None else params.schedule.resolve(now)
    rows = await ctx.fetch(ctx.q.jobs_retry, {**args, "scheduled_at": fmt_time(scheduled_at)})
    # A dependent that another failed blocker keeps failed is written (it names that
    # blocker now) but neither retried nor reblocked.
    jobs = {job.id: job for job in map(job_from_row, rows) if job.status is not JobStatus.FAILED}
    return JobsRetried(
        retried=[jobs[job_id] for job_id in ids],
        reblocked=_by_creation([job for job in jobs.values() if job.id not in found]),
    )


async def chains_prune(ctx: TxContext, params: ChainsPrune) -> ChainsPruned:
    """See StateTx.chains_prune: a SELECT, then two DELETEs; never busy (SQLite serializes writers)."""
    ctx.require_write("chains_prune")
    if params.completed_before is None and params.failed_before is None and params.cancelled_before is None:
        return ChainsPruned(locks_deleted=await _prune_keys(ctx, params))
    chosen = await ctx.fetch(
        ctx.q.chains_prune,
        {
            "completed_before": opt_time(params.completed_before),
            "failed_before": opt_time(params.failed_before),
            "cancelled_before": opt_time(params.cancelled_before),
            "limit": params.limit,
        },
    )
    if not chosen:
        return ChainsPruned(locks_deleted=await _prune_keys(ctx, params))
    chain_ids = json_list(row["chain_id"] for row in chosen)
    # Ordering successors and runs_after_failed waiters lose their row on a chain that goes.
    await ctx.fetch(ctx.q.chains_prune_blockers, {"chain_ids": chain_ids})
    rows = await ctx.fetch(ctx.q.chains_prune_delete, {"chain_ids": chain_ids})
    if not ctx.foreign_keys:
        await ctx.fetch(ctx.q.jobs_delete_blockers, {"job_ids": json_list(row["id"] for row in rows)})
    keyed = [row["id"] for row in rows if row["ordering_key"] is not None and row["chain_index"] == 0]
    if keyed:  # the key rows whose last chain went (not counted: the chains were the point)
        await ctx.fetch(ctx.q.ordering_keys_forget, {"chain_ids": json_list(keyed)})
    last: dict[str, Row] = {}
    for row in rows:
        seen = last.get(row["chain_id"])
        if seen is None or row["chain_index"] > seen["chain_index"]:
            last[row["chain_id"]] = row

    def finished(row: Row) -> str:
        return str(row[f"{row['status']}_at"])

    ordered = sorted(last.values(), key=lambda row: (finished(row), row["chain_id"]))
    return ChainsPruned(
        chains=[
            PrunedChain(id=row["chain_id"], type_name=row["chain_type_name"], status=row["status"])
            for row in ordered
        ],
        locks_deleted=await _prune_keys(ctx, params),
    )


async def _prune_keys(ctx: TxContext, params: ChainsPrune) -> int:
    """With ``locks_before``: delete up to ``limit`` ordering-key rows whose last chain is gone.

    SQLite keeps no deduplication bookkeeping rows (its single writer serializes starts), and
    the key rows of deleted chains go with them; this sweeps what another path left.
    """
    if params.locks_before is None:
        return 0
    return len(await ctx.fetch(ctx.q.ordering_keys_prune, {"limit": params.limit}))


__all__ = ["chains_cancel", "chains_prune", "iso", "job_fail", "jobs_retry", "propagate"]
