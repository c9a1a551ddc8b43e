"""Deletion and retention of the in-process state backend: ``chains_delete`` and ``chains_prune``.

Both remove whole chains (every job, and with each job its blocker rows) and never leave a
job outside the deleted set blocked by a chain that is gone. Like the other writes, each
function is one synchronous attempt (see ``_writes``).
"""

from __future__ import annotations

from datetime import datetime

from jobchain.contracts.state import ChainsDelete, ChainsDeleted, ChainsPrune, ChainsPruned, PrunedChain
from jobchain.entities import Chain, Job, JobStatus
from jobchain.errors import BlockerReference
from jobchain.memory import _ordering
from jobchain.memory._store import created_key, unique
from jobchain.memory._views import View
from jobchain.memory._writes import Ctx


def chains_delete(ctx: Ctx, params: ChainsDelete) -> ChainsDeleted:
    view = ctx.view
    members = {chain_id: view.chain_jobs(chain_id) for chain_id in unique(params.chain_ids)}
    selected = [chain_id for chain_id, jobs in members.items() if jobs]
    if params.cascade:
        requested = len(selected)
        position = 0
        while position < len(selected):  # grows while walking: breadth-first over blockers
            for job in members[selected[position]]:
                for blocker_id in view.blockers(job.id):
                    if blocker_id not in members:
                        members[blocker_id] = view.chain_jobs(blocker_id)
                        if members[blocker_id]:
                            selected.append(blocker_id)
            position += 1
        # Requested chains keep request order; the ones cascade added come by root creation.
        selected[requested:] = sorted(
            selected[requested:], key=lambda chain_id: created_key(members[chain_id][0])
        )
    in_set = set(selected)
    doomed = [job for chain_id in selected for job in members[chain_id]]
    for job in doomed:
        ctx.lock(job.id)  # also makes a concurrent blocked insert against these chains wait
    referencing = [
        (created_key(job), chain_id)
        for chain_id in selected
        for job in view.dependents(chain_id)
        if job.chain_id not in in_set
    ]
    references = [  # by the referencing job's (created_at, id), then the blocker chain's id
        BlockerReference(chain_id=chain_id, referenced_by_job_id=job_key[1])
        for job_key, chain_id in sorted(referencing)
    ]
    if references:
        return ChainsDeleted(chains=[], blocker_references=references)
    for job in doomed:
        ctx.store.put(ctx.tx, job.id, None)
    _ordering.forget_chains(ctx, [members[chain_id][0] for chain_id in selected])
    return ChainsDeleted(
        chains=[Chain(members[chain_id][0], members[chain_id][-1]) for chain_id in selected],
        running_job_ids=[
            job.id for job in sorted(doomed, key=created_key) if job.status is JobStatus.RUNNING
        ],
    )


# ---------------------------------------------------------------- retention


def chains_prune(ctx: Ctx, params: ChainsPrune) -> ChainsPruned:
    """Delete up to ``limit`` of the oldest finished chains past their status's cutoff.

    Chains that block a job of a chain that will not go (now or, transitively, ever under
    these cutoffs) are left out before the batch is chosen, so they never crowd out the
    chains behind them; within the batch, a chain blocking a job outside it is kept too.
    Only references that :func:`holds_back` counts: a ``resolves_on_any_end`` blocker row
    (an ordering predecessor, a wait that runs after failure) goes with its chain instead.
    """
    store = ctx.store
    if store.pruner is not None and store.pruner is not ctx.tx:
        return ChainsPruned(busy=True)
    store.pruner = ctx.tx  # held until the transaction ends (Store.finish)
    ctx.tx.pruning = True
    view = ctx.view
    qualifying = _qualifying(view, params)
    candidates = _closed(view, set(qualifying))
    oldest = sorted(candidates, key=lambda chain_id: (_finished(qualifying[chain_id]), chain_id))
    batch = _closed(view, set(oldest[: params.limit]))
    chosen = [chain_id for chain_id in oldest if chain_id in batch]
    members = {chain_id: view.chain_jobs(chain_id) for chain_id in chosen}
    for jobs in members.values():
        for job in jobs:
            ctx.lock(job.id)  # a concurrent insert blocked by one of these chains: wait for it
    drop_references(ctx, batch)
    for jobs in members.values():
        for job in jobs:
            ctx.store.put(ctx.tx, job.id, None)
    # Ordering entries whose last chain is gone (this prune's or an earlier one's): only with
    # locks_before, as the SQL backends sweep their bookkeeping rows.
    locks_deleted = 0 if params.locks_before is None else _ordering.prune_keys(ctx, params.limit)
    return ChainsPruned(
        chains=[
            PrunedChain(
                id=chain_id,
                type_name=qualifying[chain_id].chain_type_name,
                status=qualifying[chain_id].status.value,
            )
            for chain_id in chosen
        ],
        locks_deleted=locks_deleted,
    )


def _finished(last: Job) -> datetime:
    finished = last.finished_at
    assert finished is not None  # only terminal chains qualify
    return finished


def _qualifying(view: View, params: ChainsPrune) -> dict[str, Job]:
    """Chain id -> last job, for every chain whose status's cutoff it finished before."""
    cutoffs = {
        JobStatus.COMPLETED: params.completed_before,
        JobStatus.FAILED: params.failed_before,
        JobStatus.CANCELLED: params.cancelled_before,
    }
    found: dict[str, Job] = {}
    for root in view.walk(roots=True, descending=False, after=None):
        last = view.last_job(root.id)
        if last is None:
            continue
        cutoff = cutoffs.get(last.status)
        finished = {
            JobStatus.COMPLETED: last.completed_at,
            JobStatus.FAILED: last.failed_at,
            JobStatus.CANCELLED: last.cancelled_at,
        }.get(last.status)
        if cutoff is not None and finished is not None and finished < cutoff:
            found[root.id] = last
    return found


def holds_back(view: View, job: Job, chain_id: str) -> bool:
    """Whether ``job``'s blocker row on ``chain_id`` keeps that (terminal) chain from going.

    Every row but a ``resolves_on_any_end`` one: that blocker is resolved by the chain being
    terminal, so the row is deleted with the chain (:func:`drop_references`).
    """
    return chain_id not in view.any_end(job.id)


def drop_references(ctx: Ctx, chain_ids: set[str]) -> None:
    """Delete the blocker rows that jobs of other chains hold on ``chain_ids`` (about to go).

    Only rows :func:`holds_back` lets go remain there; each dependent keeps its other blockers.
    """
    view = ctx.view
    dropped: dict[str, set[str]] = {}
    for chain_id in chain_ids:
        for job in view.dependents(chain_id):
            if job.chain_id not in chain_ids:
                dropped.setdefault(job.id, set()).add(chain_id)
    for job_id in sorted(dropped):
        gone = dropped[job_id]
        blockers = tuple(chain_id for chain_id in view.blockers(job_id) if chain_id not in gone)
        ctx.store.put_blockers(ctx.tx, job_id, blockers, view.any_end(job_id) - gone)


def _closed(view: View, chain_ids: set[str]) -> set[str]:
    """The largest subset of ``chain_ids`` none of whose chains blocks a job of a chain outside
    it through a row that :func:`holds_back`."""
    kept = set(chain_ids)
    changed = True
    while changed:
        changed = False
        for chain_id in sorted(kept):
            if any(
                job.chain_id not in kept and holds_back(view, job, chain_id)
                for job in view.dependents(chain_id)
            ):
                kept.discard(chain_id)
                changed = True
    return kept
