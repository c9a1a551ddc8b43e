"""``job_wait`` of the in-process state backend: a running job waits for chains (dynamic blockers).

The attempt ends without failing (``attempt_base + 1``, as a released attempt); the job's
blocker chains grow by the new ones and it becomes blocked, pending or — when a new blocker
already failed and the job does not run after its failure — failed, with propagation.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from jobchain.contracts.scheduling import JobWait, JobWaited
from jobchain.entities import Job, JobStatus
from jobchain.errors import ChainNotFoundError, InvalidArgumentError
from jobchain.memory._history import ended_badly, failed_by_blocker
from jobchain.memory._lifecycle import propagate
from jobchain.memory._store import unique
from jobchain.memory._writes import Ctx, owned_job, runs_after_failure


def waited_blockers(ctx: Ctx, job: Job, params: JobWait) -> tuple[tuple[str, ...], frozenset[str]]:
    """The job's blockers with the new ones appended (none twice) and the any-end flags.

    Raises InvalidArgumentError (its own chain) or ChainNotFoundError before anything changes.
    """
    view = ctx.view
    declared = view.blockers(job.id)
    added: list[str] = []
    for chain_id in unique(params.blocker_chain_ids):
        if chain_id == job.chain_id:
            raise InvalidArgumentError(f"job {job.id} cannot wait for its own chain {chain_id}")
        if view.last_job(chain_id) is None:
            raise ChainNotFoundError(chain_id)
        if chain_id not in declared:
            added.append(chain_id)
    flags = view.any_end(job.id)
    if params.runs_after_failed:
        flags = flags | frozenset(added)
    return (*declared, *added), flags


def waiting_state(ctx: Ctx, job: Job, now: datetime) -> tuple[Job, tuple[str, ...], Job | None]:
    """(the job's next version, its open blocker chains, the last job of the blocker chain that
    fails it or None), judged on its stored blockers: failed if a blocker it does not run after
    failed, else blocked while one is not terminal, else pending at ``now``."""
    view = ctx.view
    lasts = [(chain_id, view.last_job(chain_id)) for chain_id in view.blockers(job.id)]
    open_ids = tuple(chain_id for chain_id, last in lasts if last is not None and not last.status.terminal)
    failing = next(
        (
            last
            for chain_id, last in lasts
            if ended_badly(last) and not runs_after_failure(view, job, chain_id)
        ),
        None,
    )
    if failing is not None:
        return failed_by_blocker(job, failing, now), open_ids, failing
    if open_ids:
        return replace(job, status=JobStatus.BLOCKED), open_ids, None
    return replace(job, status=JobStatus.PENDING, scheduled_at=now), open_ids, None


def job_wait(ctx: Ctx, params: JobWait, now: datetime) -> JobWaited:
    job = owned_job(ctx, params.job_id, params.worker_id, params.lease_generation)
    blockers, flags = waited_blockers(ctx, job, params)
    for chain_id in blockers:
        last = ctx.view.last_job(chain_id)
        if last is not None:
            # Locked so a concurrent completion or failure of a blocker cannot miss this dependent.
            ctx.lock(last.id)
    ctx.store.put_blockers(ctx.tx, job.id, blockers, flags)
    released = replace(
        job,
        leased_by=None,
        leased_until=None,
        last_attempt_at=now,
        attempt_base=job.attempt_base + 1,  # the attempt uses none of the budget
    )
    waiting, open_ids, failing = waiting_state(ctx, released, now)
    ctx.put(waiting)
    if failing is None or ctx.view.chain_member(job.chain_id, job.chain_index + 1) is not None:
        return JobWaited(job=waiting, incomplete_blocker_chain_ids=open_ids)
    failed_jobs, unblocked = propagate(ctx, [waiting], now)
    return JobWaited(
        job=waiting, incomplete_blocker_chain_ids=open_ids, failed_jobs=failed_jobs, unblocked_jobs=unblocked
    )
