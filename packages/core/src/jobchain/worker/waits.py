"""Dynamic blockers: a running job ends its attempt waiting for chains (``Attempt.wait_for``).

The wait is one state operation (``job_wait``) in the attempt's transaction: the job goes back
to ``blocked`` with the chains appended to its blockers (``pending`` at once if they are all
terminal already), its lease is released and the attempt uses none of its budget. When the
last of them ends, the job becomes ``pending`` as any blocked job does and its handler runs
again, a new attempt that reads every blocker (``attempt.blockers()``, old and new, in
declared order). After commit: *job scheduled* if it is pending already, *chain finished*
and the propagation if a failed or cancelled chain failed it (without ``runs_after_failed``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from jobchain.completion import buffer_failed, job_attrs
from jobchain.contracts import JobFailed, JobWait, JobWaited
from jobchain.entities import Chain, JobStatus, validate_id
from jobchain.errors import InvalidArgumentError
from jobchain.transactions import Transaction, TransactionHooks


def waited_chain_ids(chains: Iterable[Any]) -> list[str]:
    """Validated, de-duplicated chain ids of ``Chain``/``ChainStarted`` objects or id strings."""
    ids: dict[str, None] = {}
    for chain in chains:
        if isinstance(chain, Chain):
            chain_id = chain.id
        elif isinstance(chain, str):
            chain_id = validate_id(chain)
        elif isinstance(getattr(chain, "chain", None), Chain):  # a ChainStarted
            chain_id = chain.chain.id
        else:
            raise InvalidArgumentError(
                f"wait_for takes chains (Chain, ChainStarted or a chain id), got {chain!r}"
            )
        ids[chain_id] = None
    if not ids:
        raise InvalidArgumentError("wait_for needs at least one chain to wait for")
    return list(ids)


async def wait_in(
    tx: Transaction,
    job_id: str,
    chain_ids: list[str],
    *,
    worker_id: str,
    lease_generation: int,
    runs_after_failed: bool,
) -> JobWaited:
    """Run ``job_wait`` in ``tx`` and buffer what it did for after the commit."""
    waited = await tx.state.job_wait(
        JobWait(
            job_id=job_id,
            worker_id=worker_id,
            blocker_chain_ids=chain_ids,
            lease_generation=lease_generation,
            runs_after_failed=runs_after_failed,
        )
    )
    buffer_waited(tx.hooks, waited, chain_ids, worker_id=worker_id)
    return waited


def buffer_waited(
    hooks: TransactionHooks, waited: JobWaited, chain_ids: list[str], *, worker_id: str
) -> None:
    """Buffer the notifications and events of a ``job_wait`` (flushed after commit)."""
    job = waited.job
    if hooks.records_events:
        hooks.event("job_waiting", **job_attrs(job), worker_id=worker_id, blocker_chain_ids=list(chain_ids))
    if job.status is JobStatus.PENDING:
        hooks.job_scheduled(job.type_name)
    elif job.status is JobStatus.BLOCKED:
        if hooks.records_events:
            hooks.event(
                "job_blocked", **job_attrs(job), blocker_chain_ids=list(waited.incomplete_blocker_chain_ids)
            )
    elif job.status is JobStatus.FAILED:
        failed = JobFailed(job=job, failed_jobs=waited.failed_jobs, unblocked_jobs=waited.unblocked_jobs)
        buffer_failed(hooks, failed, worker_id=worker_id)
