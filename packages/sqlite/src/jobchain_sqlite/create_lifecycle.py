"""What a new job's blocker chains decide at insertion, and the lifecycle columns it starts with.

A blocker chain that is not terminal keeps the job ``blocked``. One that already failed or
was cancelled fails a job without ``runs_after_failed_blockers`` at once, exactly as
propagation would have (state contract, ``JobsCreate``): ``failed_by_chain_id`` = the first
such chain declared, a readable ``last_attempt_error`` and a ``BlockerChainFailed`` /
``BlockerChainCancelled`` entry in the error history. A chain created earlier in the same
batch that fails that way fails its own dependents in the batch in turn.

Those columns and ``runs_after_failed_blockers`` are written by one more statement
(``jobs_create_extras``) only for a batch that holds such jobs, so a plain insert stays as
it was.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from jobchain.contracts.state import NewJob
from jobchain.entities import AttemptError, Job, JobStatus
from jobchain.errors import ChainNotFoundError
from jobchain_sqlite.context import TxContext
from jobchain_sqlite.rows import fmt_time

_ENDED_BADLY = (JobStatus.FAILED, JobStatus.CANCELLED)


@dataclass(frozen=True, slots=True)
class BlockerDecision:
    """For one new job: the blocker chains that are not terminal, and the one that fails it."""

    incomplete: tuple[str, ...] = ()
    failed_by: tuple[str, JobStatus, str] | None = None
    """(chain id, its status, its chain type) of the first declared blocker chain that failed
    or was cancelled, for a job without runs_after_failed_blockers."""

    @property
    def status(self) -> str:
        if self.failed_by is not None:
            return "failed"
        return "blocked" if self.incomplete else "pending"


def decide_blockers(
    jobs: Sequence[NewJob],
    inserted: Mapping[str, int],
    blocker_status: Mapping[str, JobStatus],
    blocker_type: Mapping[str, str],
    ordered_after: Mapping[int, str],
) -> dict[int, BlockerDecision]:
    """The decision for every inserted item (by item index); raises ChainNotFoundError for a
    blocker chain that neither exists nor is created by this batch. ``ordered_after``: the
    implicit blocker of a root with an ordering key (resolved by any terminal status)."""
    new_chains = {
        job_id: jobs[i].chain_type_name for job_id, i in inserted.items() if jobs[i].chain_id is None
    }
    for i in inserted.values():
        for chain_id in jobs[i].blocker_chain_ids:
            if chain_id not in blocker_status and chain_id not in new_chains:
                raise ChainNotFoundError(chain_id)
    failed_new: set[str] = set()
    while True:  # until no more new chain of the batch fails: the failures only grow
        decisions = {
            i: _decide(jobs[i], new_chains, failed_new, blocker_status, blocker_type, ordered_after.get(i))
            for i in inserted.values()
        }
        now_failed = {
            job_id
            for job_id, i in inserted.items()
            if job_id in new_chains and decisions[i].failed_by is not None
        }
        if now_failed == failed_new:
            return decisions
        failed_new = now_failed


def _decide(
    job: NewJob,
    new_chains: Mapping[str, str],
    failed_new: set[str],
    blocker_status: Mapping[str, JobStatus],
    blocker_type: Mapping[str, str],
    ordered_after: str | None,
) -> BlockerDecision:
    incomplete: list[str] = []
    failed_by: tuple[str, JobStatus, str] | None = None
    for chain_id in dict.fromkeys(job.blocker_chain_ids):
        if chain_id in new_chains:  # created by this batch: open, unless it failed at once
            status = JobStatus.FAILED if chain_id in failed_new else JobStatus.BLOCKED
            chain_type = new_chains[chain_id]
        else:
            status, chain_type = blocker_status[chain_id], blocker_type[chain_id]
        if not status.terminal:
            incomplete.append(chain_id)
        elif failed_by is None and not job.runs_after_failed_blockers and status in _ENDED_BADLY:
            failed_by = (chain_id, status, chain_type)
    if ordered_after is not None:  # any terminal status resolves it: it never fails the job
        if ordered_after in new_chains:
            open_ = ordered_after not in failed_new
        else:
            open_ = not blocker_status[ordered_after].terminal
        if open_:
            incomplete.append(ordered_after)
    return BlockerDecision(tuple(incomplete), failed_by)


def failed_at_insert(job: Job, failed_by: tuple[str, JobStatus, str], now: datetime) -> Job:
    """``job`` as inserted when its blocker chain ``failed_by`` had already ended badly."""
    chain_id, status, chain_type = failed_by
    cancelled = status is JobStatus.CANCELLED
    message = f"blocker chain {chain_id} ({chain_type}) {'was cancelled' if cancelled else 'failed'}"
    entry = AttemptError(
        attempt=job.attempt,
        worker_id=None,
        error_type="BlockerChainCancelled" if cancelled else "BlockerChainFailed",
        message=message,
        at=now,
    )
    return replace(
        job,
        status=JobStatus.FAILED,
        failed_at=now,
        failed_by_chain_id=chain_id,
        last_attempt_error=message,
        attempt_errors=(entry,),
    )


async def write_extras(ctx: TxContext, jobs: Sequence[Job]) -> None:
    """Store the lifecycle columns of new jobs that start with any (one statement)."""
    items: list[list[Any]] = [
        [
            job.id,
            1 if job.runs_after_failed_blockers else 0,
            None if job.failed_at is None else fmt_time(job.failed_at),
            job.failed_by_chain_id,
            job.last_attempt_error,
            json.dumps([e.to_json() for e in job.attempt_errors], separators=(",", ":"))
            if job.attempt_errors
            else None,
        ]
        for job in jobs
        if job.runs_after_failed_blockers or job.status is JobStatus.FAILED
    ]
    if items:
        await ctx.fetch(ctx.q.jobs_create_extras, {"items": json.dumps(items, separators=(",", ":"))})


__all__ = ["BlockerDecision", "decide_blockers", "failed_at_insert", "write_extras"]
